"""One request for the queries that wait on each other.

Triton's dynamic batcher merges only requests of one shape, and each text query has its own
length, so concurrent queries ran the model one by one. A ``Coalescer`` sends at once while fewer
than ``in_flight`` requests are out; calls arriving meanwhile go out together when one returns.
Threads call it, event loops await ``acall``, in one queue. Senders are the coalescer's own
threads: a sender task in the loop would wait behind the loop's other work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

HANDOVER_S = 0.002  # the longest a sender waits for its callers' loop before sending
T = TypeVar("T")
R = TypeVar("R")


class _Call(Generic[T, R]):
    """One caller's item: a thread's waits on ``done``, a loop's on ``future`` (settled in ``loop``)."""

    __slots__ = ("item", "future", "loop", "done", "result", "error")

    def __init__(self, item: T, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.item, self.loop = item, loop
        self.future: asyncio.Future[R] | None = loop.create_future() if loop is not None else None
        self.done = threading.Event() if loop is None else None
        self.result: R | None = None
        self.error: BaseException | None = None

    def given_up(self) -> bool:
        """A loop's caller that was cancelled (a racy read from a sender thread: at worst one item too many)."""
        return self.future is not None and self.future.done()

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class Coalescer(Generic[T, R]):
    """``coalescer(item)`` or ``await coalescer.acall(item)`` returns ``send([..., item, ...])``'s
    result for ``item``: one ``send`` per batch of waiting calls (at most ``max_batch`` items,
    ``in_flight`` requests at once). A failed request fails all its calls, so items must not fail
    alone. A cancelled caller not yet sent is dropped. Senders end after ``idle_s`` idle. Under
    load a sender first lets its callers' loops run up to ``handover_s``, so fresh requests join
    this batch."""

    def __init__(self, send: Callable[[list[T]], Sequence[R]], max_batch: int, in_flight: int = 1,
                 idle_s: float = 60.0, handover_s: float = HANDOVER_S) -> None:
        self._send, self.max_batch, self.in_flight, self.idle_s = send, max_batch, in_flight, idle_s
        self.handover_s = handover_s
        self._ready = threading.Condition()
        self._waiting: list[_Call[T, R]] = []
        self._threads = self._idle = 0
        self.requests = self.items = 0  # what went out: items / requests is the mean batch

    @property
    def waiting(self) -> int:
        """Calls queued for the next request."""
        with self._ready:
            return len(self._waiting)

    @property
    def senders(self) -> int:
        """Sender threads running (busy or idle)."""
        with self._ready:
            return self._threads

    def __call__(self, item: T) -> R:
        call: _Call[T, R] = _Call(item)
        self._queue(call)
        call.done.wait()  # type: ignore[union-attr]
        return call.outcome()

    async def acall(self, item: T) -> R:
        call: _Call[T, R] = _Call(item, asyncio.get_running_loop())
        self._queue(call)
        return await call.future  # type: ignore[misc]

    def _queue(self, call: _Call[T, R]) -> None:
        with self._ready:
            self._waiting.append(call)
            if self._idle:
                self._ready.notify()
            elif self._threads < self.in_flight:
                self._threads += 1
                threading.Thread(target=self._sender, name="coalesce", daemon=True).start()

    def _sender(self) -> None:
        while True:
            with self._ready:
                while not self._waiting:
                    self._idle += 1
                    woken = self._ready.wait(self.idle_s)
                    self._idle -= 1
                    if not woken and not self._waiting:
                        self._threads -= 1
                        return
                # Under load (another sender's request out), the loops first run what is ready in them:
                # the requests that have just come in then join this request instead of the next one
                busy = self._threads - self._idle > 1
                loops = {c.loop for c in self._waiting if c.loop is not None} if busy else set()
            for loop in loops:
                _handed_over(loop, self.handover_s)
            with self._ready:
                live = [c for c in self._waiting if not c.given_up()]
                batch, self._waiting = live[:self.max_batch], live[self.max_batch:]
            if not batch:
                continue
            try:
                outcome: Sequence[R] | BaseException = self._send([c.item for c in batch])
            except BaseException as exc:  # the callers get it: this thread lives on
                outcome = exc
            with self._ready:
                self.requests, self.items = self.requests + 1, self.items + len(batch)
            _deliver(batch, outcome)


def _deliver(batch: list[_Call], outcome: Sequence | BaseException) -> None:
    """Each call its result (or the request's error): a thread's at once, a loop's in one callback per loop."""
    failed = isinstance(outcome, BaseException)
    loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = {}
    for i, call in enumerate(batch):
        result = outcome if failed else outcome[i]  # type: ignore[index]
        if call.loop is None:
            if failed:
                call.error = result
            else:
                call.result = result
            call.done.set()
        else:
            loops.setdefault(call.loop, []).append((call.future, result))
    for loop, settled in loops.items():
        try:
            loop.call_soon_threadsafe(_settle, settled, failed)
        except RuntimeError:  # that loop has closed: nobody awaits its calls
            pass


def _handed_over(loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
    """Returns once ``loop`` has run the callbacks ready in it now, and those they made ready in turn
    (a request read from its socket starts its handler there), or after ``timeout_s``."""
    done = threading.Event()
    try:
        loop.call_soon_threadsafe(lambda: loop.call_soon(done.set))
    except RuntimeError:  # that loop has closed
        return
    done.wait(timeout_s)


def _settle(settled: list[tuple[asyncio.Future, object]], failed: bool) -> None:
    """In the callers' loop: each future gets its result, or the request's error."""
    for future, result in settled:
        if future.done():  # its caller gave up
            continue
        if failed:
            future.set_exception(result)  # type: ignore[arg-type]
        else:
            future.set_result(result)
