"""One request for the queries that wait on each other.

Triton's dynamic batcher merges only requests of one shape, and each text query is tokenized to its
own length, so concurrent queries each ran the text tower alone and queued behind each other (1.27
requests per execution under 8 clients). A ``Coalescer`` sends a call at once when none is in
flight; calls that arrive while one is go out together as the next request, one tower execution
for all of them. A lone query pays nothing; under load the request grows with the queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Call(Generic[T, R]):
    __slots__ = ("item", "done", "lead", "result", "error")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = threading.Event()
        self.lead = False  # woken to send the next request, not with a result
        self.result: R | None = None
        self.error: BaseException | None = None

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class Coalescer(Generic[T, R]):
    """``coalescer(item)`` returns ``send([..., item, ...])``'s result for ``item``, from one ``send``
    per batch of calls that waited on each other (at most ``max_batch`` items; one request in
    flight). A request that fails fails every call in it: meant for items that cannot fail alone (a
    text query's failures are the server's, not the text's)."""

    def __init__(self, send: Callable[[list[T]], Sequence[R]], max_batch: int) -> None:
        self._send, self.max_batch = send, max_batch
        self._lock = threading.Lock()
        self._waiting: list[_Call[T, R]] = []
        self._busy = False
        self.requests = self.items = 0  # what went out: items / requests is the mean batch

    @property
    def waiting(self) -> int:
        """Calls queued for the next request."""
        with self._lock:
            return len(self._waiting)

    def __call__(self, item: T) -> R:
        call = _Call(item)
        with self._lock:
            self._waiting.append(call)
            lead, self._busy = not self._busy, True
        if not lead:
            call.done.wait()
            if not call.lead:
                return call.outcome()
        with self._lock:
            batch, self._waiting = self._waiting[:self.max_batch], self._waiting[self.max_batch:]
            self.requests, self.items = self.requests + 1, self.items + len(batch)
        try:
            for c, r in zip(batch, self._send([c.item for c in batch]), strict=True):
                c.result = r
        except BaseException as exc:
            for c in batch:
                c.error = exc
        finally:
            with self._lock:
                if self._waiting:  # the first of them sends the next request
                    self._waiting[0].lead = True
                    self._waiting[0].done.set()
                else:
                    self._busy = False
            for other in batch:
                if other is not call:
                    other.done.set()
        return call.outcome()
