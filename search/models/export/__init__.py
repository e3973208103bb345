"""Export code per family: weights -> ONNX + step files in triton_repo/. Needs the `export` extra
(torch, transformers, onnx); only ``Family.build`` imports these modules."""
