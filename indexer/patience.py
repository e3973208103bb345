"""An ingest rides out a Triton that does not answer: a model call that fails because Triton is down,
stopped or too busy to meet its deadline (``TritonUnavailable``, once the client's own retries are
spent) is not the end of the run. The run pauses "waiting for Triton", asks its health probe with a
growing, jittered interval, and sends the call again once Triton answers; embedding a batch again is
harmless (its points' ids come from the content). Only after ``limit_s`` without an answer does the
call raise ``GaveUp``: the engine keeps what it wrote and the run ends with that one line.

A Triton started again (its supervisor, `search triton up`) is live before its models are loaded:
a model "not ready" while Triton comes back is part of the same outage. So is a step that failed again
right after the client reloaded it (``ModelUnhealthy``) a few times in a row: on a swamped machine a
stall follows a stall; one that fails on every request fails the run after ``UNHEALTHY_TRIES``."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from search.errors import ModelNotReady, ModelUnhealthy, TritonUnavailable

T = TypeVar("T")
WAITING = "waiting for Triton"
FIRST_POLL_S, MAX_POLL_S = 0.5, 10.0
SETTLE_S = 180.0  # after Triton answers again, a model "not ready" for this long is one still loading
LIMIT_SETTING = "SEARCH_INGEST_TRITON_WAIT_S"
UNHEALTHY_TRIES = 3  # a call's tries after its step failed again right after a reload


class GaveUp(TritonUnavailable):
    """Triton did not answer within the run's limit, or the run was cancelled while it waited."""


class Patience:
    """Shared by the threads of one run. ``probe()``: whether Triton answers its health check.
    ``on_wait(why)``: the run starts waiting (``why``), or goes on (None). ``stop()``: the run is
    cancelled; a wait then ends at once."""

    def __init__(self, probe: Callable[[], bool], *, limit_s: float, on_wait: Callable[[str | None], None] | None = None,
                 stop: Callable[[], bool] | None = None, first_poll_s: float = FIRST_POLL_S, max_poll_s: float = MAX_POLL_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.probe, self.limit_s, self.on_wait, self.stop = probe, limit_s, on_wait, stop
        self.first_poll_s, self.max_poll_s, self.clock, self.sleep = first_poll_s, max_poll_s, clock, sleep
        self._lock = threading.Lock()
        self._since: float | None = None  # when the outage began: no call answered since
        self._back_at = float("-inf")  # when a call was answered again after the last outage
        self.waits = 0  # outages ridden out (for the report and the tests)

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """``fn(*args, **kwargs)``, asked again after each outage until it answers or the limit is spent."""
        delay = self.first_poll_s  # grows over the outage: a Triton too busy to answer is not asked at once again
        unhealthy = 0
        while True:
            try:
                got = fn(*args, **kwargs)
            except TritonUnavailable as exc:
                if isinstance(exc, GaveUp):
                    raise
                failure: Exception = exc
            except ModelUnhealthy as exc:
                unhealthy += 1
                if unhealthy >= UNHEALTHY_TRIES:
                    raise
                failure = exc
            except ModelNotReady as exc:
                if not self._coming_back():
                    raise
                failure = exc
            else:
                self._answered()
                return got
            delay = self.wait(failure, delay)

    def _coming_back(self) -> bool:
        with self._lock:
            return self._since is not None or self.clock() - self._back_at < SETTLE_S

    def _answered(self) -> None:
        with self._lock:
            was, self._since = self._since, None
            if was is not None:
                self._back_at = self.clock()
        if was is not None and self.on_wait:
            self.on_wait(None)

    def wait(self, failure: Exception, delay: float = FIRST_POLL_S) -> float:
        """After ``failure``: until the probe says Triton answers (then the caller asks again: the
        next delay is returned), or raise ``GaveUp``."""
        why = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        with self._lock:
            first = self._since is None
            if first:
                self._since, self.waits = self.clock(), self.waits + 1
            since = self._since
        if first and self.on_wait:
            self.on_wait(f"{WAITING}: {why}")
        while True:
            if self.stop is not None and self.stop():
                raise GaveUp(f"cancelled while {WAITING}")
            if self.clock() - since >= self.limit_s:
                raise GaveUp(f"Triton did not answer for {self.limit_s:.0f} s ({LIMIT_SETTING}); the files done so far "
                             f"stay indexed: {why}")
            self.sleep(delay * random.uniform(0.5, 1.0))  # jitter: the run's waiting threads do not ask together
            delay = min(delay * 2, self.max_poll_s)
            if self.probe():
                return delay


class PatientTriton:
    """A Triton client whose ``infer`` waits out an outage (``Patience``); the rest is the client's."""

    def __init__(self, triton, patience: Patience) -> None:
        self._triton, self.patience = triton, patience

    def __getattr__(self, name: str):
        return getattr(self._triton, name)

    def infer(self, *args, **kwargs):
        return self.patience.call(self._triton.infer, *args, **kwargs)
