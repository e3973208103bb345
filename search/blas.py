"""numpy's BLAS on one thread in this project's processes.

OpenBLAS keeps its worker threads spinning for a while after every matrix product. The products
here are small (a query against the relevance sample, ColBERT rows), gain nothing from a second
thread, and each left a core busy-waiting beside Triton, which multiplied a search's CPU and slowed
Triton's own work."""

from __future__ import annotations

from functools import cache

from threadpoolctl import threadpool_limits


@cache
def one_blas_thread() -> None:
    """Limit numpy's BLAS to one thread, once per process (threadpoolctl changes it at run time, so
    it works whenever numpy was first imported)."""
    threadpool_limits(limits=1, user_api="blas")
