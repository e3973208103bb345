"""Which kernels numpy's OpenBLAS loads: ones this CPU can run, chosen before numpy first loads.

numpy 1.26's OpenBLAS (0.3.23) does not know CPUs newer than itself, such as Intel's Emerald Rapids
(family 6 model 207), and falls back to its oldest, much slower kernels (Prescott, SSE3). Both
command lines' ``main`` run it before any command loads numpy (`search serve`, `search ui`, `search
mcp` included). Not the package's ``__init__``: Triton's Python steps import that, and their image
holds only ``search.triton.steps``."""

from __future__ import annotations

import os

# The kernels to name for a CPU that has these instructions, best first
CORETYPES = (("SkylakeX", {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}), ("Haswell", {"avx2", "fma"}))


def choose_openblas_kernels(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """Set OPENBLAS_CORETYPE from the CPU's instruction sets, unless it is set already; processes
    started from this one (Triton's Python steps, Ray's workers) inherit it. Returns what was set."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    try:
        with open(cpuinfo) as f:  # the first CPU's flags: the file is read no further than that
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:  # not Linux: OpenBLAS's own detection stands
        return None
    core = next((name for name, needs in CORETYPES if needs <= flags), None)
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core
