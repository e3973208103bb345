"""One request for the queries that wait on each other.

Triton's dynamic batcher merges only requests of one shape, and each text query is tokenized to its
own length. So concurrent queries each ran the model alone and queued behind each other (CLIP's
text tower: 1.27 requests per execution under 8 clients). A ``Coalescer`` sends a call at once
while fewer than ``in_flight`` requests are out. Calls that arrive meanwhile wait, and go out
together when a request comes back: one model execution for all of them. A lone query pays
nothing; under load the request grows with the queue. ``AsyncCoalescer`` does the same for the
calls of one event loop (the REST API awaits its document queries there)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

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


class AsyncCoalescer(Generic[T, R]):
    """``Coalescer`` for the calls of an event loop: a call sends at once while fewer than
    ``in_flight`` requests are out; the calls that wait go out together when one comes back. The
    requests are sent by a task of their own, so a caller that gives up cancels only its own wait.
    Bound to the running loop: a call from another loop (a new app, a test's) starts afresh."""

    def __init__(self, send: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int, in_flight: int = 1) -> None:
        self._send, self.max_batch, self.in_flight = send, max_batch, in_flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._senders: set[asyncio.Task] = set()
        self.requests = self.items = 0  # what went out: items / requests is the mean batch

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._waiting, self._senders = loop, [], set()
        future: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, future))
        if len(self._senders) < self.in_flight:
            sender = loop.create_task(self._send_waiting())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await future

    async def _send_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:self.max_batch], self._waiting[self.max_batch:]
            batch = [(item, future) for item, future in batch if not future.done()]  # not those given up
            if not batch:
                continue
            self.requests, self.items = self.requests + 1, self.items + len(batch)
            try:
                results = await self._send([item for item, _ in batch])
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
