"""A busy or stopped Triton is not a dead one: a call that misses its deadline says so ("timed out
after N s (SEARCH_TRITON_TIMEOUT_S)"), is tried again within its budget, and succeeds once Triton
answers; only a Triton that is down is "not reachable". A private server takes the SIGSTOPs; the
session's is only looked at (its shared memory is the user's alone)."""

from __future__ import annotations

import logging
import os
import signal
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from python_models import onnx_double

from search.api import create_app
from search.config import Settings
from search.errors import TritonTimeout, TritonUnavailable
from search.models import built_triton_models
from search.triton.client import QUERY, Retry, TritonClient, client_options
from search.triton.local import LocalTriton, free_port
from search.triton.retry import Deadline, Tries

X = np.arange(4, dtype=np.float32).reshape(-1, 1)


@pytest.fixture
def echo(tmp_path):
    """A private server of one ONNX model (Y = 2 X): Triton 2.51 aborts when a Python step seems to
    stall (docs/reliability.md), which a stop of the whole group can look like on a loaded machine."""
    onnx_double(tmp_path / "repo", "echo")
    srv = LocalTriton(tmp_path / "repo", tmp_path / "run", models=["echo"]).start()
    yield srv
    _signal(srv, signal.SIGCONT)
    srv.stop()


def _signal(srv: LocalTriton, sig: int) -> None:
    """``sig`` to the server's whole process group: its supervisor, Triton and the steps' processes."""
    try:
        os.killpg(srv.state.pid, sig)
    except ProcessLookupError:
        pass


def _client(srv: LocalTriton, **settings) -> TritonClient:
    s = Settings(triton_timeout_per_row_s=0, triton_timeout_per_mib_s=0, **settings)
    return TritonClient(f"127.0.0.1:{srv.grpc_port}", **client_options(s))


def _retried(caplog, got: list, timeout: float = 120) -> None:
    """Wait until the client said it will try again after a timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not got:
        if any("timed out" in r.getMessage() and "trying again" in r.getMessage() for r in caplog.records):
            return
        time.sleep(0.1)
    raise AssertionError(f"no retry logged ({got}): " + "; ".join(r.getMessage() for r in caplog.records))


def test_the_shared_memory_of_a_running_triton_is_private_to_its_user(triton):
    regions = list(Path("/dev/shm").glob(f"{triton.state.shm_prefix}*"))
    assert regions, "the session's Triton serves Python steps, each with its shared memory"
    modes = {r.name: oct(stat.S_IMODE(r.stat().st_mode)) for r in regions}
    assert set(modes.values()) == {"0o600"}, modes


def test_a_stopped_triton_times_out_by_name_and_answers_again_when_continued(echo):
    client = _client(echo, triton_timeout_s=1, triton_retry_budget_s=5)
    patient = Retry(budget_s=300)  # the calls around the stop: a loaded machine may take over a second at times
    assert (client.infer("echo", {"X": X}, ["Y"], retry=patient)["Y"] == X * 2).all()
    _signal(echo, signal.SIGSTOP)
    try:
        with pytest.raises(TritonTimeout) as err:
            client.infer("echo", {"X": X}, ["Y"])
        assert not client.down(), "a stopped server's port still takes connections: it is not down"
    finally:
        _signal(echo, signal.SIGCONT)
    message = str(err.value)
    assert "timed out after 1 s (SEARCH_TRITON_TIMEOUT_S)" in message, message
    assert "not reachable" not in message and "search triton up" not in message, message
    assert err.value.exit_code == 9 and "\n" not in message
    assert (client.infer("echo", {"X": X}, ["Y"], retry=patient)["Y"] == X * 2).all()


@pytest.mark.parametrize("policy", ["batch", "query"])
def test_a_call_that_times_out_and_is_tried_again_gets_its_answer(echo, caplog, policy):
    """A batch retries within its budget; a query once, within its own deadline (its first try gets half)."""
    caplog.set_level(logging.INFO, logger="search.triton.client")
    if policy == "batch":
        client = _client(echo, triton_timeout_s=1, triton_retry_budget_s=600)
    else:
        client = _client(echo, triton_timeout_s=40, triton_retry_budget_s=0).with_retry(QUERY)
    got: list = []
    with ThreadPoolExecutor(1) as pool:  # one thread, its channel connected: a batcher's or an ingest worker's
        assert (pool.submit(_outcome, client).result() == X * 2).all()
        _signal(echo, signal.SIGSTOP)
        try:
            call = pool.submit(lambda: got.append(_outcome(client)))
            _retried(caplog, got)
        finally:
            _signal(echo, signal.SIGCONT)
        call.result(timeout=300)
    if not (len(got) == 1 and isinstance(got[0], np.ndarray)):
        time.sleep(2)  # the supervisor's word on a restart, if Triton exited
        said = [r.getMessage() for r in caplog.records]
        raise AssertionError(f"{got}; restarts: {echo.restarts()}; client: {said}; log: {Path(echo.state.log).read_text()[-2000:]}")
    assert (got[0] == X * 2).all()


def test_a_readiness_probe_that_times_out_is_asked_again(echo, caplog):
    """``model_ready`` before a query or a check: a stopped Triton is asked again, not reported busy at once."""
    caplog.set_level(logging.INFO, logger="search.triton.client")
    client = _client(echo, triton_timeout_s=1, triton_retry_budget_s=600)
    got: list = []
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(client.model_ready, "echo").result()
        _signal(echo, signal.SIGSTOP)
        try:
            call = pool.submit(lambda: got.append(client.model_ready("echo")))
            _retried(caplog, got)
        finally:
            _signal(echo, signal.SIGCONT)
        call.result(timeout=300)
    assert got == [True], [r.getMessage() for r in caplog.records]


def _outcome(client: TritonClient):
    try:
        return client.infer("echo", {"X": X}, ["Y"])["Y"]
    except Exception as exc:  # noqa: BLE001 - the test reports what came back
        return exc


def test_a_triton_that_is_down_is_not_reachable_at_once(tmp_path):
    client = TritonClient(f"127.0.0.1:{free_port()}", 1, retry=Retry(budget_s=600))
    with pytest.raises(TritonUnavailable) as err:
        client.infer("echo", {"X": X}, ["Y"])
    assert type(err.value) is TritonUnavailable and err.value.exit_code == 3
    assert "not reachable" in str(err.value) and "search triton up" in str(err.value)
    assert client.down()


def test_a_deadline_grows_with_the_batch():
    deadline = Deadline(base_s=10, per_row_s=0.5, per_mib_s=2)
    assert deadline.of({"X": np.zeros((1, 1), np.float32)}) == pytest.approx(10.5, abs=1e-3)
    assert deadline.of({"X": np.zeros((16, 1), np.float32)}) == pytest.approx(18, abs=1e-3)
    big = np.array([b"x" * (4 << 20)], dtype=np.object_).reshape(-1, 1)  # a 4 MiB image
    assert deadline.of({"IMAGE": big}) == pytest.approx(10 + 0.5 + 8)
    client = TritonClient("127.0.0.1:1", **client_options(Settings(triton_timeout_s=7, triton_timeout_per_row_s=1)))
    assert client.deadline.of({"X": np.zeros((3, 1), np.float32)}) == pytest.approx(10, abs=1e-3)


def test_a_query_counts_its_timeouts_not_the_tries_refused_or_cut_as_triton_comes_back():
    """A query's second try failed at once with "Stream removed" as a stopped Triton came back (seen
    in a loaded suite run): such a try used none of its share, so the query tries again within what
    is left of its deadline; only a second timeout ends it."""
    tries = Tries(QUERY, deadline=40)
    assert tries.next_timeout() == pytest.approx(20, abs=0.1)  # the first try gets half
    assert tries.backoff(timed_out=True) is not None
    tries.next_timeout()
    assert tries.backoff(timed_out=False) is not None  # its stream lost: not one of the two
    assert tries.next_timeout() == pytest.approx(40 - tries.elapsed(), abs=0.5)  # the last try gets the rest
    assert tries.backoff(timed_out=True) is None
    assert tries.count == 3


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_rest_says_503_with_retry_after_only_when_triton_is_down(settings, model_repo, tmp_path):
    body = {"model": "minilm", "input": "reset password"}
    with TestClient(create_app(settings.model_copy(update={"triton_url": f"127.0.0.1:{free_port()}"}))) as c:
        down = c.post("/v1/embeddings", json=body)
    assert down.status_code == 503 and down.headers.get("retry-after"), (down.status_code, down.headers)

    minilm = [m for m in built_triton_models(model_repo) if m.startswith("minilm")]
    srv = LocalTriton(model_repo, tmp_path / "run", models=minilm).start(timeout=120)
    try:
        # The answers before and after the stop get the default deadline: a loaded machine may take over
        # the 2 s that make the stop's 504 quick.
        at = {"triton_url": f"127.0.0.1:{srv.grpc_port}"}
        with TestClient(create_app(settings.model_copy(update=at))) as patient, \
                TestClient(create_app(settings.model_copy(update={**at, "triton_timeout_s": 2}))) as c:
            assert patient.post("/v1/embeddings", json=body).status_code == 200
            _signal(srv, signal.SIGSTOP)
            try:
                busy = c.post("/v1/embeddings", json=body)
            finally:
                _signal(srv, signal.SIGCONT)
            assert busy.status_code == 504 and "retry-after" not in busy.headers, (busy.status_code, busy.text)
            assert "timed out after" in busy.json()["error"]["message"], busy.text
            assert patient.post("/v1/embeddings", json=body).status_code == 200
    finally:
        _signal(srv, signal.SIGCONT)
        srv.stop()
