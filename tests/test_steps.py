"""A service's model call is written once (search/services/steps.py) and a thread runs it or an
event loop awaits it, with the same answers and the same errors: a batcher's error reaches the
steps, which may fall back, and one they do not handle reaches the caller. Real Coalescers (the
query batchers' class) over a plain send; no server needed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from search.services.steps import Batched, Blocking, Steps
from search.triton.coalesce import Coalescer


class Refused(Exception):
    pass


def doubled(items: list[int]) -> list[int]:
    if any(i < 0 for i in items):
        raise Refused("no negatives")
    return [2 * i for i in items]


BATCHERS = {"double": Coalescer(doubled, 8), "plus": Coalescer(lambda items: [i + 1 for i in items], 8)}


def steps(x: int):
    """Ask a blocking question, then the doubling model; on its refusal, the other model."""
    threads = yield Blocking(lambda: threading.current_thread().name)
    try:
        return (yield Batched("double", x)), threads
    except Refused:
        return (yield Batched("plus", -x)), threads


def failing():
    yield Blocking(lambda: 1 / 0)


async def awaited(call: Steps):
    return await call


def test_a_thread_and_an_event_loop_run_the_same_steps():
    assert Steps(steps(3), BATCHERS).run() == (6, threading.current_thread().name)
    assert Steps(steps(-3), BATCHERS).run()[0] == 4  # the fallback, inside the steps

    value, thread = asyncio.run(awaited(Steps(steps(3), BATCHERS)))
    assert value == 6 and thread != threading.current_thread().name  # the blocking call, off the loop
    assert asyncio.run(awaited(Steps(steps(-3), BATCHERS)))[0] == 4

    async def together():
        return await asyncio.gather(*(Steps(steps(i), BATCHERS) for i in range(20)))
    assert [v for v, _ in asyncio.run(together())] == [2 * i for i in range(20)]


def test_an_error_the_steps_leave_reaches_the_caller():
    with pytest.raises(ZeroDivisionError):
        Steps(failing(), BATCHERS).run()
    with pytest.raises(ZeroDivisionError):
        asyncio.run(awaited(Steps(failing(), BATCHERS)))
