"""One request for the queries that wait on each other.

Triton's dynamic batcher merges only requests of one shape, and each text query is tokenized to its
own length. So concurrent queries each ran the model alone and queued behind each other (CLIP's
text tower: 1.27 requests per execution under 8 clients). A ``Coalescer`` sends a call at once
while fewer than ``in_flight`` requests are out. Calls that arrive meanwhile wait, and go out
together when a request comes back: one model execution for all of them. A lone query pays
nothing; under load the request grows with the queue. ``LoopCoalescer`` does the same for callers
that await in an event loop (the REST API's document queries), sending from threads of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

HANDOVER_S = 0.002  # the longest a sender waits for its callers' loop before sending
T = TypeVar("T")
R = TypeVar("R")


class _Call(Generic[T, R]):
    __slots__ = ("item", "done", "batch", "result", "error")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = threading.Event()
        self.batch: list[_Call[T, R]] | None = None  # set when this call is to send the request for them
        self.result: R | None = None
        self.error: BaseException | None = None

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class Coalescer(Generic[T, R]):
    """``coalescer(item)`` returns ``send([..., item, ...])``'s result for ``item``, from one ``send``
    per batch of calls that waited on each other (at most ``max_batch`` items; at most ``in_flight``
    requests at once, one per model instance that can run them side by side). A request that fails
    fails every call in it: meant for items that cannot fail alone (a text query's failures are the
    server's, not the text's)."""

    def __init__(self, send: Callable[[list[T]], Sequence[R]], max_batch: int, in_flight: int = 1) -> None:
        self._send, self.max_batch, self.in_flight = send, max_batch, in_flight
        self._lock = threading.Lock()
        self._waiting: list[_Call[T, R]] = []
        self._sending = 0  # requests in flight
        self.requests = self.items = 0  # what went out: items / requests is the mean batch

    @property
    def waiting(self) -> int:
        """Calls queued for the next request."""
        with self._lock:
            return len(self._waiting)

    def __call__(self, item: T) -> R:
        call = _Call(item)
        with self._lock:
            if self._sending < self.in_flight:  # then nothing waits either: a lone call goes at once
                self._sending += 1
                call.batch = [call]
            else:
                self._waiting.append(call)
        if call.batch is None:
            call.done.wait()
            if call.batch is None:  # answered by another call's request
                return call.outcome()
        batch = call.batch
        try:
            for c, r in zip(batch, self._send([c.item for c in batch]), strict=True):
                c.result = r
        except BaseException as exc:
            for c in batch:
                c.error = exc
        finally:
            with self._lock:
                self.requests, self.items = self.requests + 1, self.items + len(batch)
                if self._waiting:  # the first of those waiting sends the next request, for them all
                    nxt, self._waiting = self._waiting[:self.max_batch], self._waiting[self.max_batch:]
                    nxt[0].batch = nxt
                    nxt[0].done.set()
                else:
                    self._sending -= 1
            for other in batch:
                if other is not call:
                    other.done.set()
        return call.outcome()


class LoopCoalescer(Generic[T, R]):
    """``Coalescer`` for callers that await in an event loop (the REST API's), whose requests go out
    from threads of their own, one per request in flight, on a blocking ``send``. When a request
    comes back, its thread sends the calls that waited at once: a sender task in the loop would wait
    for its turn behind the other requests' work, and the model would sit idle meanwhile (at 32
    clients, HTTP search 229 -> 309 requests/s and p99 280 -> 217 ms; docs/api.md, run J3). A
    caller that gives up is not sent if its request has not gone out yet. Each loop gets its results
    in one callback per request. A thread with nothing to send for ``idle_s`` ends; the next call
    starts one again. Whatever ``send`` raises is each of its calls' error: a sender never dies
    with calls waiting on it. Under load (another request out), a sender first lets its callers'
    loop run what is ready in it, up to ``handover_s``: requests that have just come in reach the
    coalescer there and join this request rather than the next (at 32 clients over HTTP, 5-9 texts
    per encoder run became 9-11, as full as 32 threads in one process make them; docs/api.md, run Z2)."""

    def __init__(self, send: Callable[[list[T]], Sequence[R]], max_batch: int, in_flight: int = 1,
                 idle_s: float = 60.0, handover_s: float = HANDOVER_S) -> None:
        self._send, self.max_batch, self.in_flight, self.idle_s = send, max_batch, in_flight, idle_s
        self.handover_s = handover_s
        self._ready = threading.Condition()
        self._waiting: list[tuple[T, asyncio.Future[R], asyncio.AbstractEventLoop]] = []
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

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        with self._ready:
            self._waiting.append((item, future, loop))
            if self._idle:
                self._ready.notify()
            elif self._threads < self.in_flight:
                self._threads += 1
                threading.Thread(target=self._sender, name="coalesce", daemon=True).start()
        return await future

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
                loops = {loop for _, _, loop in self._waiting} if self._threads - self._idle > 1 else ()
            for loop in loops:
                _handed_over(loop, self.handover_s)
            with self._ready:
                # not those given up (a racy read from this thread: at worst one text too many)
                live = [call for call in self._waiting if not call[1].done()]
                batch, self._waiting = live[:self.max_batch], live[self.max_batch:]
            if not batch:
                continue
            try:
                outcome: Sequence[R] | BaseException = self._send([item for item, _, _ in batch])
            except BaseException as exc:  # the callers get it, in their loop: this thread lives on
                outcome = exc
            with self._ready:
                self.requests, self.items = self.requests + 1, self.items + len(batch)
            loops: dict[asyncio.AbstractEventLoop, list[int]] = {}
            for i, (_, _, loop) in enumerate(batch):
                loops.setdefault(loop, []).append(i)
            for loop, calls in loops.items():
                results = outcome if isinstance(outcome, BaseException) else [outcome[i] for i in calls]
                try:
                    loop.call_soon_threadsafe(_settle, [batch[i][1] for i in calls], results)
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


def _settle(futures: list[asyncio.Future], outcome: Sequence | BaseException) -> None:
    """In the callers' loop: each future gets its result, or the request's error."""
    for i, future in enumerate(futures):
        if future.done():  # its caller gave up
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome[i])
