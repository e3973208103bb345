"""The batcher behind concurrent text queries: one request for the calls that waited on each other,
from threads and from event loops alike."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from search.triton.coalesce import Coalescer


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
        firsts = []
        for x in "ab":  # one at a time: two calls queued together before a sender wakes would share a request
            firsts.append(pool.submit(c, x))
            assert entered.acquire(timeout=10)
        rest = [pool.submit(c, x) for x in "cde"]
        wait_for(lambda: c.waiting == 3)
        gate.set()
        assert [f.result(10) for f in [*firsts, *rest]] == list("ABCDE")
    assert sorted(map(len, batches)) == [1, 1, 3] and sorted(batches[2]) == list("cde")
    assert c.waiting == 0 and c("f") == "F" and batches[-1] == ["f"]


# -- callers in an event loop (the REST API's queries): the same queue, awaited
async def until(cond, timeout=10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.001)


def test_loop_calls_that_wait_on_one_in_flight_go_out_as_one_request():
    async def main():
        send = Gated()
        c = Coalescer(send, max_batch=8)
        first = asyncio.create_task(c.acall("b"))
        await until(send.entered.is_set)  # the first call went out alone, at once
        rest = [asyncio.create_task(c.acall(x)) for x in "cdef"]
        await until(lambda: c.waiting == 4)
        send.gate.set()
        assert await asyncio.gather(first, *rest) == list("BCDEF")
        assert send.batches == [["b"], ["c", "d", "e", "f"]] and (c.requests, c.items) == (2, 5)
        assert await c.acall("a") == "A" and send.batches[-1] == ["a"]  # a lone call goes alone

    asyncio.run(main())


def test_loop_requests_in_flight_errors_and_cancelled_callers():
    async def main():
        held = threading.Event()
        entered = []

        def send(items):
            entered.append(list(items))
            assert held.wait(10)
            if "c" in items:
                raise RuntimeError("server down at c")
            return [i.upper() for i in items]

        c = Coalescer(send, max_batch=3, in_flight=2)
        calls = {}
        for x in "ab":  # two requests out, one per sender thread, each call alone
            calls[x] = asyncio.create_task(c.acall(x))
            await until(lambda: len(entered) == len(calls))
        calls |= {x: asyncio.create_task(c.acall(x)) for x in "cdef"}
        await until(lambda: c.waiting == 4)
        calls["d"].cancel()  # a caller that gives up
        await asyncio.sleep(0)
        held.set()
        assert [await calls[x] for x in "ab"] == ["A", "B"]
        for x in "cef":  # one request for the three that waited: its failure is each one's
            with pytest.raises(RuntimeError, match="server down at c"):
                await calls[x]
        with pytest.raises(asyncio.CancelledError):
            await calls["d"]
        assert entered == [["a"], ["b"], ["c", "e", "f"]]  # the cancelled call was not sent
        assert await c.acall("g") == "G"
        return c

    c = asyncio.run(main())
    assert asyncio.run(c.acall("h")) == "H"  # another event loop gets its own results


def test_loop_callers_of_two_loops_share_a_request_and_idle_senders_end():
    send = Gated()
    c = Coalescer(send, max_batch=8, idle_s=0.05)
    results: dict[str, str] = {}

    def in_a_loop(item: str) -> None:
        results[item] = asyncio.run(c.acall(item))

    first = threading.Thread(target=in_a_loop, args=("a",))
    first.start()
    assert send.entered.wait(10)
    others = [threading.Thread(target=in_a_loop, args=(x,)) for x in "bc"]
    for t in others:
        t.start()
    wait_for(lambda: c.waiting == 2)
    send.gate.set()
    for t in [first, *others]:
        t.join(10)
    assert results == {"a": "A", "b": "B", "c": "C"} and [sorted(b) for b in send.batches] == [["a"], ["b", "c"]]
    wait_for(lambda: c.senders == 0)  # idle: the sender ended
    assert asyncio.run(c.acall("d")) == "D" and c.senders == 1  # the next call starts one again


def test_a_sender_survives_whatever_its_send_raises():
    def send(items):
        if "stop" in items:
            raise SystemExit("the send gave up")
        return [i.upper() for i in items]

    c = Coalescer(send, max_batch=4)

    async def main():
        with pytest.raises(SystemExit):
            await c.acall("stop")
        return await c.acall("next")

    assert asyncio.run(main()) == "NEXT" and c.senders == 1


def test_under_load_a_sender_lets_the_loop_hand_over_what_just_came_in():
    async def main():
        send = Gated()
        c = Coalescer(send, max_batch=8, in_flight=2, handover_s=10)
        first = asyncio.create_task(c.acall("a"))
        await until(send.entered.is_set)  # one request out: the next sender is under load

        async def request_b():
            result = asyncio.ensure_future(c.acall("b"))
            await asyncio.sleep(0)  # "b" waits, and the second sender starts
            asyncio.create_task(c.acall("c"))  # the next request: it reaches the coalescer in the loop's next round,
            time.sleep(0.3)  # while the loop is still busy with this one and the sender has found "b" alone
            return await result

        b = asyncio.create_task(request_b())
        await until(lambda: len(send.batches) == 2)
        assert sorted(send.batches[1]) == ["b", "c"]  # "c" came in while the sender waited on the loop
        send.gate.set()
        assert await asyncio.gather(first, b) == ["A", "B"]

    asyncio.run(main())


def test_a_sender_with_no_other_request_out_does_not_wait_for_the_loop():
    async def main():
        sent_while_busy = threading.Event()

        def send(items):
            sent_while_busy.set()
            return [i.upper() for i in items]

        c = Coalescer(send, max_batch=8, in_flight=2, handover_s=10)
        call = asyncio.ensure_future(c.acall("a"))
        await asyncio.sleep(0)  # "a" waits: a sender starts
        time.sleep(0.3)  # the loop is busy, and nothing else is out: the sender goes at once
        assert sent_while_busy.is_set()
        assert await call == "A"

    asyncio.run(main())


def test_threads_and_a_loop_wait_in_one_queue_and_share_a_request():
    send = Gated()
    c = Coalescer(send, max_batch=8)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(c, "a")
        assert send.entered.wait(10)
        threaded = [pool.submit(c, x) for x in "bc"]
        wait_for(lambda: c.waiting == 2)

        async def awaited():
            calls = [asyncio.create_task(c.acall(x)) for x in "de"]
            await until(lambda: c.waiting == 4)
            send.gate.set()
            return await asyncio.gather(*calls)

        assert asyncio.run(awaited()) == ["D", "E"]
        assert [f.result(10) for f in [first, *threaded]] == ["A", "B", "C"]
    assert send.batches[0] == ["a"] and sorted(send.batches[1]) == list("bcde") and len(send.batches) == 2
    assert (c.requests, c.items, c.waiting) == (2, 5, 0)


def test_a_failed_request_fails_thread_and_loop_callers_alike():
    def send(items):
        raise RuntimeError("server down")

    c = Coalescer(send, max_batch=8)
    with pytest.raises(RuntimeError, match="server down"):
        c("a")

    async def awaited():
        return await c.acall("b")

    with pytest.raises(RuntimeError, match="server down"):
        asyncio.run(awaited())
    assert c.senders == 1  # the sender lived on
