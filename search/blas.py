"""numpy's BLAS on one thread in this project's processes.

OpenBLAS keeps its worker threads spinning for a while (~0.1 s) after every matrix product. The
products here are small (a query against a 2,000-vector relevance sample, ColBERT rows), gain
nothing from a second thread, and each one left a core busy-waiting beside Triton: on 2 cores a
semantic search cost 14.5 ms of CPU in the calling process instead of 2.6 ms, and Triton's own
work slowed down with it."""

from __future__ import annotations

from functools import cache

from threadpoolctl import threadpool_limits


@cache
def one_blas_thread() -> None:
    """Limit numpy's BLAS to one thread, once per process (threadpoolctl changes it at run time, so
    it works whenever numpy was first imported)."""
    threadpool_limits(limits=1, user_api="blas")
