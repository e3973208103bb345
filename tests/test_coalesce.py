"""The coalescer behind concurrent text queries: one request for the calls that waited on each other."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from search.triton.coalesce import AsyncCoalescer, Coalescer


class Gated:
    """A send that records its batches and holds the first one until ``release``."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_on = fail_on

    def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.gate.wait(10)
        if self.fail_on in items:
            raise RuntimeError(f"server down at {self.fail_on}")
        return [i.upper() for i in items]


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


def test_a_lone_call_goes_out_alone_at_once():
    sent = []
    c = Coalescer(lambda items: sent.append(list(items)) or [i * 2 for i in items], max_batch=8)
    assert [c(1), c(2), c(3)] == [2, 4, 6]
    assert sent == [[1], [2], [3]] and (c.requests, c.items) == (3, 3)


def held_behind_the_first(c: Coalescer, send: Gated, items: str) -> list[str]:
    """Call ``c`` with each item in its own thread, the later ones while the first is held in flight."""
    with ThreadPoolExecutor(len(items)) as pool:
        first = pool.submit(c, items[0])
        assert send.entered.wait(10)
        rest = [pool.submit(c, x) for x in items[1:]]
        wait_for(lambda: c.waiting == len(rest))
        send.gate.set()
        return [f.result(10) for f in [first, *rest]]


def test_calls_that_wait_on_one_in_flight_go_out_as_one_request():
    send = Gated()
    c = Coalescer(send, max_batch=8)
    assert held_behind_the_first(c, send, "abcdefg") == list("ABCDEFG")
    assert send.batches[0] == ["a"] and sorted(send.batches[1]) == list("bcdefg") and len(send.batches) == 2
    assert (c.requests, c.items, c.waiting) == (2, 7, 0)


def test_a_request_holds_at_most_max_batch_calls():
    send = Gated()
    c = Coalescer(send, max_batch=2)
    assert held_behind_the_first(c, send, "abcde") == list("ABCDE")
    assert [len(b) for b in send.batches] == [1, 2, 2]


def test_a_failed_request_fails_its_calls_and_the_next_request_still_goes_out():
    send = Gated(fail_on="b")
    c = Coalescer(send, max_batch=2)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(c, "a")
        assert send.entered.wait(10)
        failed = [pool.submit(c, x) for x in "bc"]
        wait_for(lambda: c.waiting == 2)
        later = pool.submit(c, "d")
        wait_for(lambda: c.waiting == 3)
        send.gate.set()
        assert first.result(10) == "A" and later.result(10) == "D"
        for f in failed:
            with pytest.raises(RuntimeError, match="server down at b"):
                f.result(10)
    assert send.batches == [["a"], ["b", "c"], ["d"]]
    assert c("e") == "E"  # nothing left held


def test_with_two_in_flight_two_calls_go_at_once_and_the_rest_wait_for_either():
    entered, gate, batches = threading.Semaphore(0), threading.Event(), []

    def send(items):
        batches.append(list(items))
        entered.release()
        assert gate.wait(10)
        return [i.upper() for i in items]

    c = Coalescer(send, max_batch=8, in_flight=2)
    with ThreadPoolExecutor(5) as pool:
        firsts = [pool.submit(c, x) for x in "ab"]
        assert entered.acquire(timeout=10) and entered.acquire(timeout=10)
        rest = [pool.submit(c, x) for x in "cde"]
        wait_for(lambda: c.waiting == 3)
        gate.set()
        assert [f.result(10) for f in [*firsts, *rest]] == list("ABCDE")
    assert sorted(map(len, batches)) == [1, 1, 3] and sorted(batches[2]) == list("cde")
    assert c.waiting == 0 and c("f") == "F" and batches[-1] == ["f"]


# -- the event loop's coalescer (the REST API's document queries)
class AsyncGated:
    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.fail_on = fail_on

    async def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        await self.gate.wait()
        if self.fail_on in items:
            raise RuntimeError(f"server down at {self.fail_on}")
        return [i.upper() for i in items]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_async_calls_that_wait_on_one_in_flight_go_out_as_one_request():
    async def main():
        send = AsyncGated()
        c = AsyncCoalescer(send, max_batch=8)
        send.gate.set()
        assert await c("a") == "A" and send.batches == [["a"]]  # a lone call goes alone
        send.gate.clear()
        first = asyncio.create_task(c("b"))
        await settle()
        rest = [asyncio.create_task(c(x)) for x in "cdef"]
        await settle()
        send.gate.set()
        assert await asyncio.gather(first, *rest) == list("BCDEF")
        assert send.batches == [["a"], ["b"], ["c", "d", "e", "f"]] and (c.requests, c.items) == (3, 6)

    asyncio.run(main())


def test_async_requests_in_flight_errors_and_cancelled_callers():
    async def main():
        send = AsyncGated(fail_on="b")
        c = AsyncCoalescer(send, max_batch=2, in_flight=2)
        calls = {x: asyncio.create_task(c(x)) for x in "a"}
        await settle()
        calls |= {x: asyncio.create_task(c(x)) for x in "bcde"}
        await settle()
        assert send.batches == [["a"], ["b", "c"]]  # two requests out; d and e wait
        calls["d"].cancel()  # a caller that gives up
        send.gate.set()
        assert await calls["a"] == "A" and await calls["e"] == "E"
        for x in "bc":
            with pytest.raises(RuntimeError, match="server down at b"):
                await calls[x]
        with pytest.raises(asyncio.CancelledError):
            await calls["d"]
        assert send.batches[2:] == [["e"]]  # the cancelled call was not sent
        assert await c("f") == "F"
        return c

    c = asyncio.run(main())
    assert asyncio.run(c("g")) == "G"  # another event loop: starts afresh
