"""Back-pressure for the local executor: how many model requests are in flight (``window``) and how
many units each carries (``batch``) follow Triton's latency, so a machine too busy to answer in
time gets less at once instead of more timeouts. AIMD, as TCP does: a request that takes more than
``SLOW`` of its deadline (or fails) halves both; one that takes less than ``FAST`` of it gives one
request and a quarter of the largest batch back, up to the configured ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
SLOW, FAST = 0.5, 0.25  # of the deadline


class Pacer:
    def __init__(self, window: int, batch: int, deadline_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.most_window, self.most_batch, self.deadline_s, self.clock = window, batch, deadline_s, clock
        self.window, self.batch = window, batch
        self.slowdowns = 0  # times it shrank (for the report and the tests)
        self._busy = 0
        self._cond = threading.Condition()

    def observe(self, seconds: float, ok: bool = True) -> None:
        """One request's time (``ok``: it was answered)."""
        with self._cond:
            if not ok or seconds > self.deadline_s * SLOW:
                self.window, self.batch = max(1, self.window // 2), max(1, self.batch // 2)
                self.slowdowns += 1
            elif seconds < self.deadline_s * FAST:
                self.window = min(self.most_window, self.window + 1)
                self.batch = min(self.most_batch, self.batch + max(1, self.most_batch // 4))
            self._cond.notify_all()

    def run(self, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` once fewer than ``window`` requests are in flight, its time observed."""
        with self._cond:
            self._cond.wait_for(lambda: self._busy < self.window)
            self._busy += 1
        started, ok = self.clock(), False
        try:
            got = fn(*args)
            ok = True
            return got
        finally:
            with self._cond:
                self._busy -= 1
            self.observe(self.clock() - started, ok)
