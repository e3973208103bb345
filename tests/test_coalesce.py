"""The coalescer behind concurrent text queries: one request for the calls that waited on each other."""

from __future__ import annotations

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
