from search.cpu_kernels import choose_openblas_kernels

choose_openblas_kernels()  # before anything loads numpy
