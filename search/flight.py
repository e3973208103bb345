"""One run at a time of an expensive call, shared by the callers that ask for the same thing while
it runs, and optionally by those that ask soon after (the model verification behind
`/readyz?verify=1`, `/models/verify` and the page's panel)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

V = TypeVar("V")


class SingleFlight(Generic[V]):
    """``run(key, fn)`` calls ``fn()`` unless a call for ``key`` is running or waiting; then it waits
    and returns a copy of that result or raises its error. At most one ``fn`` runs at once (other
    keys wait). With ``max_age_s``, a result for ``key`` at most that old is returned (a copy)
    instead of a new run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _flights and _last
        self._turn = threading.Lock()  # held by the one running fn
        self._flights: dict[Hashable, Future[V]] = {}
        self._last: dict[Hashable, tuple[float, V]] = {}  # key -> (monotonic end, result) of its last run
        self.runs = 0  # fn calls started: what sharing saved is requests minus runs

    def run(self, key: Hashable, fn: Callable[[], V], max_age_s: float = 0.0) -> V:
        with self._lock:
            last = self._last.get(key)
            if last is not None and max_age_s > 0 and time.monotonic() - last[0] <= max_age_s:
                return copy.deepcopy(last[1])
            flight = self._flights.get(key)
            leads = flight is None
            if leads:
                flight = self._flights[key] = Future()
        if not leads:
            return copy.deepcopy(flight.result())  # each caller may change its own answer
        try:
            with self._turn:
                self.runs += 1
                result = fn()
        except BaseException as exc:
            with self._lock:  # from here on a caller for this key starts a fresh run ...
                del self._flights[key]
                self._last.pop(key, None)  # ... since a result older than this error no longer stands
            flight.set_exception(exc)
            raise
        with self._lock:  # in one step, so a caller sees either the flight or its result
            del self._flights[key]
            self._last[key] = (time.monotonic(), result)
        flight.set_result(result)
        return copy.deepcopy(result)  # the kept one stays as fn made it while the others copy it
