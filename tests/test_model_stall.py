"""A step that stalls: SIGSTOP the real Python-backend stub of BGE-M3's encoder step for longer than
the second Triton 2.51's Python backend waits, while requests flow. Triton then calls the step
unhealthy, hands its late answers to the next requests, and aborts (boost lock_exception) a moment
later (docs/reliability.md, "A stalled step"). What this product owes its callers then: no request
gets another text's vectors, every failure is one of its clear errors, and the local server is
back without anyone running `search triton up`. (Sometimes the client's reload of the step wins
the race, its retry is answered and Triton does not abort at all.) A dedicated server takes the
damage; the session's stays untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from processes import leftovers, serving, stubs
from python_models import python_model
from tritonclient.utils import InferenceServerException

from search.errors import ModelUnhealthy, TritonUnavailable
from search.models import BGEM3, bge_m3
from search.triton.client import TritonClient
from search.triton.local import LocalTriton

# Triton's Python backend gives a step up after a whole 1 s slice of its wait without a sign of life
# (the stub gives one every 0.3 s): only a stall of 2.3 s or more is sure to contain such a slice.
STALL_S = 3.0
WORDS = "printer queue badge reader password reset vpn laptop docking station monitor".split()


@pytest.fixture
def server(model_repo, tmp_path):
    srv = LocalTriton(model_repo, tmp_path / "data" / "triton", models=list(BGEM3().triton_models))  # <data dir>/triton
    srv.start(timeout=120)
    yield srv
    srv.stop()


def test_a_stalled_step_never_hands_a_request_another_texts_vectors_and_triton_comes_back(server):
    data_dir = server.run_dir.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "QDRANT_"))} | {"HF_HUB_OFFLINE": "1"}
    client = TritonClient(f"127.0.0.1:{server.grpc_port}")
    # One text per request, each of its own width: a late answer for a different text then differs
    # in shape or padding, so the steps and Triton can tell; one for the same text is its answer.
    texts = [" ".join(WORDS[i % len(WORDS)] for i in range(n)) for n in (2, 9, 30, 100)]
    reference = {t: bge_m3.encode(client, [t])[0] for t in texts}
    widths = sorted(r.n_tokens for r in reference.values())
    assert all(b > a * 1.25 + 4 for a, b in zip(widths, widths[1:])), widths  # no two share a width

    stop, wrong, failures, answered = threading.Event(), [], [], [0]

    def send(k: int) -> None:
        while not stop.is_set():
            text = texts[k % len(texts)]
            k += 1
            try:
                got = bge_m3.encode(client, [text])[0]
            except Exception as exc:  # noqa: BLE001 - every failure is checked below
                failures.append(exc)
                if isinstance(exc, TritonUnavailable):
                    return  # Triton aborted: nothing more to learn from this server
                continue
            ref = reference[text]
            if (float(got.dense @ ref.dense) < 0.9999 or got.n_tokens != ref.n_tokens or got.sparse.keys() != ref.sparse.keys()
                    or not np.allclose(got.colbert, ref.colbert, atol=1e-4)):
                wrong.append(text)
            answered[0] += 1

    (encoder,) = stubs(server, "bge_m3_onnx")
    with ThreadPoolExecutor(4) as pool:
        for k in range(4):
            pool.submit(send, k)
        time.sleep(1.0)
        os.kill(encoder, signal.SIGSTOP)
        time.sleep(STALL_S)
        os.kill(encoder, signal.SIGCONT)
        time.sleep(4.0)
        stop.set()

    assert answered[0] > 0
    assert not wrong, f"{len(wrong)} answers carried another text's vectors"
    # Whatever Triton did with the stall, each failure is this product's error naming the model or
    # the server (not a raw gRPC error, nor numpy's about shapes that do not broadcast).
    assert all(isinstance(e, (ModelUnhealthy, TritonUnavailable)) for e in failures), failures
    assert all("'bge_m3'" in str(e) or "Triton is not reachable" in str(e) for e in failures), failures

    # Triton aborted (or, if it did not, still serves): either way it serves again, on its ports. It
    # can also abort a second after the client's reloads, after the readiness check, and its
    # supervisor starts it again.
    deadline = time.monotonic() + 120
    while True:
        assert serving(server).is_ready(), Path(server.state.log).read_text()[-2000:]
        try:
            for text, ref in reference.items():
                assert float(bge_m3.encode(client, [text])[0].dense @ ref.dense) >= 0.9999
            break
        except TritonUnavailable:
            assert time.monotonic() < deadline, Path(server.state.log).read_text()[-2000:]
            time.sleep(0.5)
    # Noticed: the client reloaded the step (and its retry was answered) or Triton was started again;
    # either way the stalled stub is gone.
    assert encoder not in stubs(server, "bge_m3_onnx"), "the stall went unnoticed: no request was in flight"
    # Whether Triton aborted is read from its supervisor, not from the callers' errors: a caller can
    # be told "not reachable" (a deadline, a moment of reload) by a Triton that never exited.
    if server.restarts():
        assert "Triton exited (signal" in server.restarts()[0], server.restarts()
        shown = subprocess.run([sys.executable, "-m", "search", "--data-dir", str(data_dir), "triton", "status"],
                               capture_output=True, text=True, timeout=120, env=env)
        assert "started again 1 time(s) after Triton exited by itself" in shown.stdout, shown.stdout + shown.stderr
    prefix = server.state.shm_prefix
    server.stop()
    assert leftovers(prefix) == ([], [])


@pytest.mark.parametrize("message", [
    "in ensemble 'bge_m3', Failed to process the request(s) for model 'bge_m3_post_0_0', message: "
    "MixedUp: the encoder's outputs of another request: its padding does not match this request's tokens",
    "in ensemble 'bge_m3', [request id: <id_unknown>] input 'WITH_COLBERT' batch size does not match other inputs for 'bge_m3_post'",
    "in ensemble 'bge_m3', [request id: <id_unknown>] expected number of inputs between 5 and 6 but got 4 inputs for model 'bge_m3_post'",
])
def test_a_step_handed_another_requests_outputs_fails_as_the_model_and_reloads_all_its_steps(message):
    """What Triton says when a late answer reached the wrong request (seen in the stall test's runs):
    the client reloads every step of the ensemble, since any of them may have answered late."""
    died = TritonClient("127.0.0.1:1")._error("bge_m3", InferenceServerException(message, "StatusCode.INTERNAL"))
    assert died is not None and died.mixed_up and died.instance is None and died.ensemble == "bge_m3"
    error = str(died.error("bge_m3", "restart Triton"))
    assert error.startswith("model 'bge_m3' failed in Triton: a step was handed another request's outputs")


@pytest.mark.parametrize("message", ["in ensemble 'bge_m3', Failed to process the requests.",
                                     "Failed to process the requests."])
def test_requests_a_stalled_step_dropped_are_that_steps_trouble_not_a_raw_error(message):
    """Seen in a loaded suite run, right after another request found 'bge_m3_onnx' stalled and the
    client reloaded it: the ensemble's requests failed with only this. It is the stall's (the client
    waits for the reload under way, or reloads, and asks once more), never a raw gRPC error that
    fails an ingest job."""
    dropped = TritonClient("127.0.0.1:1")._error("bge_m3", InferenceServerException(message, "StatusCode.INTERNAL"))
    assert dropped is not None and dropped.dropped and not dropped.mixed_up and dropped.instance is None
    assert dropped.ensemble == ("bge_m3" if "ensemble" in message else None)
    assert str(dropped.error("bge_m3", "restart Triton")) == ("model 'bge_m3' failed in Triton: a step dropped its "
                                                              "requests (it stalled or died): restart Triton")
    other = "Failed to process the request(s) for model 'x_0_0', message: ValueError: bad input"
    assert TritonClient("127.0.0.1:1")._error("x", InferenceServerException(other, "StatusCode.INTERNAL")) is None


def test_an_answer_without_a_row_per_input_is_refused_and_the_model_reloaded(tmp_path):
    """Triton hands a step's answer to the client unchecked (tried on 2.51: [4, 1] for a [3, 1]
    request). Texts zipped with such an answer would get other texts' vectors, or be dropped."""
    repo = tmp_path / "repo"
    # An echo with one row too many while ``bad``: "late" until it is reloaded, "wrong" always.
    for name, always in (("late", False), ("wrong", True)):
        python_model(repo, name, answer="np.concatenate([x, x[:1]]) if self.bad else x",
                     init=f'flag = os.path.join(args["model_repository"], "loaded-before"); '
                          f'self.bad = {always} or not os.path.exists(flag); open(flag, "w").close()')
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    with LocalTriton(repo, tmp_path / "run", models=["late", "wrong"]).start(timeout=120) as srv:
        url = f"127.0.0.1:{srv.grpc_port}"
        with pytest.raises(ModelUnhealthy) as plain:  # without healing: the one-line fix
            TritonClient(url, heal=False).infer("late", {"X": x}, ["Y"])
        assert "its answer was not this request's (Y has 4 rows for 3 inputs" in str(plain.value)
        assert "search triton down && search triton up" in str(plain.value)
        client = TritonClient(url)
        np.testing.assert_array_equal(client.infer("late", {"X": x}, ["Y"])["Y"], x)  # reloaded, asked again
        with pytest.raises(ModelUnhealthy) as again:
            client.infer("wrong", {"X": x}, ["Y"])
        assert str(again.value).startswith("model 'wrong' failed in Triton: its answer was not this request's "
                                           "(Y has 4 rows for 3 inputs")
        assert "again right after a reload" in str(again.value)
        with pytest.raises(ModelUnhealthy, match="Y has 2 rows for 1 inputs"):
            client.infer("wrong", {"X": x[:1]}, ["Y"])
        assert not client.probe("wrong").healthy and client.probe("late").healthy


def test_an_answer_to_a_request_out_while_a_step_was_reloaded_is_asked_for_again(tmp_path):
    """A late answer of the right shape passes every check: so an answer to a request that was out
    while a step was found mixed up (here "late", a row too many until reloaded) and reloaded is
    asked for again. The echo "slow" answers once "late" has been loaded again (or after 60 s), so
    its first answer overlaps that reload however slow the machine (a fixed 2 s did not, once)."""
    repo = tmp_path / "repo"
    python_model(repo, "late", answer="np.concatenate([x, x[:1]]) if self.bad else x",
                 init='flag = os.path.join(args["model_repository"], "loaded-before"); '
                      'self.bad = not os.path.exists(flag); open(flag, "w").close(); '
                      'self.bad or open(os.path.join(args["model_repository"], "reloaded"), "w").close()')
    python_model(repo, "slow", answer="(self.wait(), x)[1]",
                 init='self.reloaded = os.path.join(os.path.dirname(args["model_repository"]), "late", "reloaded"); '
                      'self.running = os.path.join(args["model_repository"], "running"); '
                      'self.wait = lambda: (open(self.running, "w").close(), '
                      '[time.sleep(0.05) for _ in range(1200) if not os.path.exists(self.reloaded)])')
    x = np.arange(2, dtype=np.float32).reshape(2, 1)
    with LocalTriton(repo, tmp_path / "run", models=["late", "slow"]).start(timeout=120) as srv:
        client = TritonClient(f"127.0.0.1:{srv.grpc_port}")

        def runs(model: str, least: int) -> int:
            """Executions of ``model``: Triton counts one after its answer has gone, so wait up to 5 s
            for ``least`` (a full run read 2 for 3 right after the third answer)."""
            deadline = time.monotonic() + 5
            while True:
                n = int(client._client.get_inference_statistics(model, as_json=True)["model_stats"][0].get("execution_count", 0))
                if n >= least or time.monotonic() > deadline:
                    return n
                time.sleep(0.05)

        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(client.infer, "slow", {"X": x}, ["Y"])
            deadline = time.monotonic() + 30
            while not (repo / "slow" / "running").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            # "slow" is running: now a step is found mixed up and reloaded
            np.testing.assert_array_equal(client.infer("late", {"X": x}, ["Y"])["Y"], x)
            np.testing.assert_array_equal(slow.result(timeout=60)["Y"], x)
        assert runs("slow", 2) == 2  # its first answer came while "late" was being reloaded
        np.testing.assert_array_equal(client.infer("slow", {"X": x}, ["Y"])["Y"], x)
        assert runs("slow", 3) == 3  # once all is settled, an answer is taken as it comes


def test_requests_of_one_shape_never_get_each_others_answers_when_a_step_stalls(tmp_path):
    """The same-shape case of the stall, end to end: 4 threads share one client (as a process's
    services do) and send [2, 1] requests of their own values to a Python echo while its stub is
    stopped for 3 s. Triton 2.51 then aborts (the supervisor starts it again), or the client's
    reload wins and Triton goes on; before the client asked again for answers that came during a
    reload, 2 of 2 such runs handed one request another's values, silently."""
    python_model(tmp_path / "repo", "echo")
    with LocalTriton(tmp_path / "repo", tmp_path / "run", models=["echo"]).start(timeout=120) as srv:
        client = TritonClient(f"127.0.0.1:{srv.grpc_port}")
        stop, wrong, failures, answered = threading.Event(), [], [], []

        def ask(k: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                x = np.array([[k * 1e6 + n], [k * 1e6 + n + 0.5]], np.float32)
                try:
                    y = client.infer("echo", {"X": x}, ["Y"])["Y"]
                except (ModelUnhealthy, TritonUnavailable) as exc:
                    failures.append(exc)
                    time.sleep(0.05)
                    continue
                (answered if np.array_equal(y, x) else wrong).append((x.ravel().tolist(), y.ravel().tolist()))

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(1)
        [pid] = stubs(srv, "echo")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(STALL_S)
        os.kill(pid, signal.SIGCONT)
        time.sleep(6)  # the abort comes within ~5 s, if it comes
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not wrong, wrong[:3]
        assert answered and all("'echo'" in str(e) or "Triton is not reachable" in str(e) for e in failures), failures[:3]
        assert serving(srv).is_ready()


def test_a_request_the_ensemble_itself_refuses_is_not_taken_for_a_stall():
    plain = "[request id: <id_unknown>] input 'TEXT' batch size does not match other inputs for 'bge_m3'"
    assert TritonClient("127.0.0.1:1")._error("bge_m3", InferenceServerException(plain, "StatusCode.INVALID_ARGUMENT")) is None
