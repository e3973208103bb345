"""`search models verify` runs: concurrent callers share one run, a recent report is reused only when allowed; SingleFlight itself."""

from __future__ import annotations

import threading
import time

import pytest

from search.errors import BadRequest
from search.flight import SingleFlight
from search.resources import Resources
from search.services import SearchService


# -- concurrent callers share one run, and runs never overlap
def test_concurrent_verifications_share_one_run(settings):
    resources = Resources(settings)
    barrier = threading.Barrier(6)
    reports: list[dict] = []

    def ask() -> None:
        barrier.wait()
        reports.append(SearchService(settings, resources).verify_models(["minilm"]))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        resources.close()
    assert len(reports) == 6 and all(r == reports[0] and r["passed"] for r in reports)
    assert resources.verify_runs.runs <= 2  # one run of ~1 s, shared by callers that arrive within it (six before)
    with pytest.raises(BadRequest, match="no model family 'gpt'"):  # a bad name is refused before any run
        SearchService(settings, resources).verify_models(["gpt"])
    assert resources.verify_runs.runs <= 2


def test_a_recent_report_is_reused_only_when_the_caller_allows_it(settings):
    resources = Resources(settings)
    svc = SearchService(settings, resources)
    try:
        first = svc.verify_models(["minilm"])
        fresh = svc.verify_models(["minilm"])  # the command line and /models/verify: always a new run
        reused = svc.verify_models(["minilm"], max_age_s=60)
        probe = svc.readiness_verified()  # every family: another check, so a run of its own
    finally:
        resources.close()
    assert first["passed"] and fresh["checked_at"] > first["checked_at"]
    assert reused == fresh and resources.verify_runs.runs == 3
    assert probe["verify"]["passed"] and probe["verify"]["age_s"] >= 0


def test_single_flight_reuses_a_result_no_older_than_asked():
    flight: SingleFlight[dict] = SingleFlight()
    count = iter(range(100))

    def work() -> dict:
        return {"n": next(count)}

    def fails() -> dict:
        raise ValueError("Triton gone")

    assert flight.run("a", work) == {"n": 0}
    assert flight.run("a", work, max_age_s=60) == {"n": 0} and flight.runs == 1
    assert flight.run("a", work) == {"n": 1}  # no max_age_s: a new run, kept for the next
    assert flight.run("b", work, max_age_s=60) == {"n": 2}  # another key has nothing to reuse
    mine = flight.run("a", work, max_age_s=60)
    mine["n"] = -1  # a reused result is the caller's own copy
    assert flight.run("a", work, max_age_s=60) == {"n": 1}
    time.sleep(0.05)
    assert flight.run("a", work, max_age_s=0.01) == {"n": 3}  # too old
    with pytest.raises(ValueError, match="Triton gone"):
        flight.run("a", fails)
    assert flight.run("a", work, max_age_s=60) == {"n": 4}  # an error drops what was kept


def test_single_flight_shares_same_key_calls_and_runs_one_at_a_time():
    flight: SingleFlight[dict] = SingleFlight()
    release, started = threading.Event(), threading.Event()
    running = peak = 0
    lock = threading.Lock()

    def work(key: str) -> dict:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        started.set()
        release.wait(10)
        with lock:
            running -= 1
        return {"key": key, "items": []}

    results: dict[int, dict] = {}

    def call(i: int, key: str) -> None:
        results[i] = flight.run(key, lambda: work(key))

    first = threading.Thread(target=call, args=(0, "a"))
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=call, args=(i, key)) for i, key in enumerate(["a", "a", "b", "b"], 1)]
    for t in others:
        t.start()
    time.sleep(0.2)  # let them queue: "a" callers join the running flight, "b" ones wait their turn
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert flight.runs == 2 and peak == 1  # one run per key, never two at once
    assert [results[i]["key"] for i in range(5)] == ["a", "a", "a", "b", "b"]
    results[1]["items"].append(1)  # a shared answer is each caller's own copy
    assert results[0]["items"] == [] and results[2]["items"] == []

    def fails() -> dict:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):  # an error reaches its callers and is not kept
        flight.run("c", fails)
    assert flight.run("c", lambda: {"ok": True}) == {"ok": True}
