"""How long a Triton call may take and how it rides out a busy server: its deadline grows with its
batch (``Deadline``), and a call that timed out, was refused while Triton is there or lost its stream
is tried again with exponential backoff and jitter while its ``Retry`` budget lasts (``Tries``).
Whether Triton is down is for its health probe to say, not for the error (``TritonClient.down``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from search.backoff import backoff_s

MIB = 1 << 20


@dataclass(frozen=True)
class Deadline:
    """A call's deadline: ``base_s`` plus ``per_row_s`` a row and ``per_mib_s`` a MiB of its inputs
    (a batch of 16 long chunks or a large scan takes longer than one short query)."""

    base_s: float = 30.0
    per_row_s: float = 0.0
    per_mib_s: float = 0.0

    def of(self, inputs: dict[str, np.ndarray]) -> float:
        rows = len(next(iter(inputs.values()))) if inputs else 0
        return self.base_s + self.per_row_s * rows + self.per_mib_s * _bytes(inputs) / MIB


@dataclass(frozen=True)
class Retry:
    """``budget_s``: a new try starts only within this many seconds of the first (0: none), each with
    the call's whole deadline. ``tries``: at most so many, sharing the call's deadline between them
    instead (a query: two, each of its tries gets what is left of its deadline split among the tries left)."""

    budget_s: float = 0.0
    tries: int | None = None


QUERY = Retry(tries=2)  # a query tries once more within its own deadline


class Tries:
    """One call's tries under ``retry``, with its ``deadline`` in seconds."""

    def __init__(self, retry: Retry, deadline: float) -> None:
        self.retry, self.deadline = retry, deadline
        self.started = time.monotonic()
        self.count = 0
        self.free = 0  # tries that were refused or lost their stream: not among those the deadline is split for
        self.timeout = deadline

    def next_timeout(self) -> float:
        """The deadline of the try about to start (and count it)."""
        if self.retry.tries:
            left = max(self.deadline - self.elapsed(), 0.1)
            self.timeout = left / max(self.retry.tries - self.counted(), 1)
        self.count += 1
        return self.timeout

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def counted(self) -> int:
        return self.count - self.free

    def backoff(self, timed_out: bool = True) -> float | None:
        """Seconds to wait before the next try, or None when no try is left: exponential, with half of it
        random so that the calls a stall failed together do not come back together. A try that did not
        time out (refused, or its stream lost as a server comes back) does not count against ``tries``:
        the deadline alone bounds those."""
        self.free += not timed_out
        if self.retry.tries is not None and self.counted() >= self.retry.tries:
            return None
        wait = backoff_s(self.count)
        limit = self.deadline if self.retry.tries else self.retry.budget_s
        return wait if self.elapsed() + wait < limit else None


def _bytes(inputs: dict[str, np.ndarray]) -> int:
    """The inputs' size: an object (BYTES) tensor's by its items."""
    total = 0
    for array in inputs.values():
        if array.dtype == np.object_:
            total += sum(len(x) if isinstance(x, (bytes, str)) else 8 for x in array.reshape(-1))
        else:
            total += array.nbytes
    return total
