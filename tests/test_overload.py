"""What keeps an ingest going on an overloaded machine, part by part: the wait for a Triton that does
not answer (indexer/patience.py), the back-pressure on the model's requests (indexer/pacing.py) and
the local Ray cluster's start (indexer/ray_cluster.py). tests/test_triton_outage.py stops and kills
a real Triton under a running job."""

from __future__ import annotations

import threading

import pytest
from rich.progress import Progress, TextColumn

from indexer import ray_cluster
from indexer.cli_run import waiting as _waiting
from indexer.pacing import Pacer
from indexer.patience import GaveUp, Patience
from indexer.ray_cluster import RayUnavailable, gcs_wait_s
from search.errors import ModelNotReady, ModelUnhealthy, TritonUnavailable


class Clock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def flaky(*failures: Exception):
    """A model call that raises ``failures`` in turn, then answers; its calls are counted."""
    left, calls = list(failures), []

    def call(x):
        calls.append(x)
        if left:
            raise left.pop(0)
        return x * 2

    return call, calls


def patience(clock: Clock, probe=lambda: True, **kw) -> tuple[Patience, list]:
    said: list = []
    return Patience(probe, limit_s=kw.pop("limit_s", 600), on_wait=said.append, clock=clock, sleep=clock.sleep, **kw), said


def test_a_call_that_finds_triton_down_waits_until_it_answers_then_goes_on():
    clock, up = Clock(), [False, False, True]
    p, said = patience(clock, probe=lambda: up.pop(0))
    call, calls = flaky(TritonUnavailable("Triton is not reachable at 127.0.0.1:1 (DEADLINE_EXCEEDED)"))
    assert p.call(call, 21) == 42
    assert calls == [21, 21] and p.waits == 1
    assert said == ["waiting for Triton: Triton is not reachable at 127.0.0.1:1 (DEADLINE_EXCEEDED)", None]
    assert clock.now > 0  # it waited (with backoff) before asking again


def test_past_its_limit_the_wait_ends_in_one_line_naming_the_setting():
    clock = Clock()
    p, said = patience(clock, probe=lambda: False, limit_s=60)
    call, _ = flaky(*[TritonUnavailable("Triton is not reachable at 127.0.0.1:1 (UNAVAILABLE)\ndetails")] * 3)
    with pytest.raises(GaveUp) as exc:
        p.call(call, 1)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("Triton did not answer for 60 s (SEARCH_INGEST_TRITON_WAIT_S)")
    assert "the files done so far stay indexed" in message
    assert said == ["waiting for Triton: Triton is not reachable at 127.0.0.1:1 (UNAVAILABLE)"]
    assert 60 <= clock.now < 80


def test_a_cancelled_run_stops_waiting_at_once():
    clock, stop = Clock(), threading.Event()
    p, _ = patience(clock, probe=lambda: stop.set() or False, stop=stop.is_set)
    with pytest.raises(GaveUp, match="cancelled while waiting for Triton"):
        p.call(flaky(TritonUnavailable("x"))[0], 1)
    assert clock.now < 10


def test_a_model_not_ready_is_an_outage_only_while_triton_comes_back():
    clock = Clock()
    p, _ = patience(clock)
    with pytest.raises(ModelNotReady):  # a model that is not served: the kind stops, as before
        p.call(flaky(ModelNotReady("model 'm' is not loaded"))[0], 1)
    # Triton started again: live before its models are loaded
    call, calls = flaky(TritonUnavailable("down"), ModelNotReady("model 'm' is not available in Triton (not ready)"))
    assert p.call(call, 1) == 2 and len(calls) == 3


def test_a_step_that_fails_again_after_its_reload_is_asked_a_few_times_not_forever():
    """On a swamped machine one stall follows another: the client's reload and retry can both land
    in one. The run asks again (a stall passes); a step that fails on every request still ends it."""
    clock = Clock()
    p, said = patience(clock)
    unhealthy = ModelUnhealthy("model 'bge_m3' failed in Triton: a step dropped its requests (it stalled or died): "
                               "again right after a reload")
    call, calls = flaky(unhealthy, unhealthy)
    assert p.call(call, 1) == 2 and len(calls) == 3
    assert said[0].startswith("waiting for Triton: model 'bge_m3' failed in Triton") and said[-1] is None
    p, _ = patience(Clock())  # (a run that just came back from an outage waits out its models a while longer)
    call, calls = flaky(*[unhealthy] * 5)
    with pytest.raises(ModelUnhealthy):
        p.call(call, 1)
    assert len(calls) == 3


def test_no_wait_allowed_fails_at_once():
    p, _ = patience(Clock(), limit_s=0)
    with pytest.raises(GaveUp):
        p.call(flaky(TritonUnavailable("down"))[0], 1)


def test_slow_requests_halve_the_window_and_batch_and_fast_ones_give_them_back():
    pacer = Pacer(window=4, batch=16, deadline_s=30)
    pacer.observe(20)  # two thirds of the deadline: the machine is too busy for this much at once
    assert (pacer.window, pacer.batch) == (2, 8)
    pacer.observe(1, ok=False)  # a timeout
    pacer.observe(16)
    assert (pacer.window, pacer.batch) == (1, 2) and pacer.slowdowns == 3
    pacer.observe(10)  # between the thresholds: as it is
    assert (pacer.window, pacer.batch) == (1, 2)
    for _ in range(3):
        pacer.observe(1)
    assert (pacer.window, pacer.batch) == (4, 14)
    for _ in range(5):
        pacer.observe(1)
    assert (pacer.window, pacer.batch) == (4, 16)  # never past what was configured


def test_the_window_bounds_the_requests_in_flight():
    # every request takes 0 s of a 0 s deadline: neither slow nor fast, the window stays as the slow one left it
    pacer = Pacer(window=3, batch=8, deadline_s=0, clock=lambda: 0.0)
    pacer.observe(30)  # one slow request: one at a time now
    lock, inside, most, gate = threading.Lock(), [0], [0], threading.Event()

    def request(_):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        gate.wait(0.05)
        with lock:
            inside[0] -= 1

    threads = [threading.Thread(target=pacer.run, args=(request, k)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pacer.window == 1 and most[0] == 1


def test_a_local_ray_start_waits_longer_on_a_busy_machine(monkeypatch):
    monkeypatch.delenv(ray_cluster.GCS_WAIT_VAR, raising=False)
    assert gcs_wait_s(1, load=0.5, cores=2) == 30  # Ray's own wait on a quiet machine
    assert gcs_wait_s(1, load=10, cores=2) == 150 and gcs_wait_s(2, load=10, cores=2) == 300
    assert gcs_wait_s(2, load=160, cores=2) == ray_cluster.GCS_WAIT_MAX_S
    monkeypatch.setenv(ray_cluster.GCS_WAIT_VAR, "45")
    assert gcs_wait_s(2, load=10, cores=2) == 45  # the user's setting wins


def test_a_local_ray_start_that_times_out_is_tried_once_more_then_named_in_one_line(monkeypatch, caplog):
    """What Ray raised on a machine at load 10-160 ("Timed out waiting for file .../gcs_server_port_...")."""
    ray = pytest.importorskip("ray")
    waits, starts = [], []

    def init(**kwargs):
        starts.append(kwargs["address"])
        waits.append(int(ray_cluster.os.environ[ray_cluster.GCS_WAIT_VAR]))
        raise RuntimeError("Timed out waiting for file /tmp/ray/session_x/gcs_server_port_abc\nmore")

    monkeypatch.delenv(ray_cluster.GCS_WAIT_VAR, raising=False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_cluster.os, "getloadavg", lambda: (10.0, 10.0, 10.0))
    monkeypatch.setattr(ray_cluster.os, "cpu_count", lambda: 2)
    with pytest.raises(RayUnavailable) as exc:
        ray_cluster.connect(None)
    assert starts == ["local", "local"] and waits == [150, 300]
    message = str(exc.value)
    assert "\n" not in message and message.startswith("could not start or join a Ray cluster locally: Timed out waiting for file")
    assert "tried twice, waiting up to 300 s; load 10.0 on 2 cores" in message
    assert "waiting up to 150 s" in caplog.text and ray_cluster.GCS_WAIT_VAR not in ray_cluster.os.environ


def test_the_cli_says_when_a_run_waits_for_triton_and_when_it_goes_on(capsys):
    progress = Progress(TextColumn("{task.fields[current]}"), disable=True)
    task = progress.add_task("files", total=None, current="")
    on_wait = _waiting(progress, task)
    on_wait("waiting for Triton: Triton is not reachable at 127.0.0.1:8001 (DEADLINE_EXCEEDED)")
    assert progress.tasks[0].fields["current"].startswith("waiting for Triton: ")  # the progress line
    on_wait("waiting for Triton: Triton is not reachable at 127.0.0.1:8001 (DEADLINE_EXCEEDED)")  # a job polled again
    on_wait(None)
    said = capsys.readouterr().err
    assert said.count("waiting for Triton") == 1 and "Triton answers again: going on" in said
    assert progress.tasks[0].fields["current"] == ""
