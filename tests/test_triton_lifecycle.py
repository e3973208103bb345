"""Start, ready, stop with nothing left behind; a broken repository gives a clear error."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from processes import leftovers
from python_models import python_model

from search.config import Settings
from search.errors import ModelNotReady, TritonUnavailable
from search.resources import Resources
from search.triton import local, supervise
from search.triton.client import START_HINT, TritonClient
from search.triton.local import LocalTriton, TritonError, free_ports
from search.triton.startlog import failure_summary
from search.triton.supervise import LoadWatch, Replaced


def server(repo: Path, run_dir: Path, models: list[str]) -> LocalTriton:
    return LocalTriton(repo, run_dir, models=models)  # free ports, picked at start


def test_start_ready_stop_leaves_nothing(tmp_path):
    python_model(tmp_path / "repo", "echo")
    srv = server(tmp_path / "repo", tmp_path / "run", ["echo"]).start()
    prefix = srv.state.shm_prefix
    assert srv.is_ready()
    pids, regions = leftovers(prefix)
    assert pids and regions, "a running python model has a stub process and shm regions"
    srv.stop()
    assert not srv.is_ready()
    assert leftovers(prefix) == ([], [])
    assert not (tmp_path / "run" / "server.json").exists()
    srv.stop()  # idempotent
    ports = (srv.http_port, srv.grpc_port, srv.metrics_port)
    with srv.start():  # a restart serves on the ports its clients know
        assert srv.is_ready() and (srv.http_port, srv.grpc_port, srv.metrics_port) == ports


def test_a_server_tied_to_a_process_stops_and_cleans_up_when_it_ends(tmp_path, monkeypatch):
    """``stop_with``: when the owner dies without a word (a test worker killed for memory), its
    Triton, the steps' processes and their shared memory go too, and nothing is restarted."""
    python_model(tmp_path / "repo", "echo")
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    monkeypatch.setattr(LocalTriton, "stop_with", owner.pid)
    srv = server(tmp_path / "repo", tmp_path / "run", ["echo"]).start()
    prefix = srv.state.shm_prefix
    assert srv.is_ready() and leftovers(prefix) != ([], [])
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 300  # a hang guard: the supervisor looks twice a second
    while srv._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert srv._proc.poll() is not None and not srv.is_ready()
    assert leftovers(prefix) == ([], [])
    assert f"process {owner.pid} ended: stopping Triton" in (tmp_path / "run" / local.LOG_NAME).read_text()
    srv.stop()


def test_a_server_that_exits_is_started_again_on_its_ports_and_callers_are_told_to_wait(tmp_path):
    """The supervisor's restart (Triton 2.51 aborts after a stalled step: docs/reliability.md). A
    model that takes 3 s to load holds the restarted server unready long enough to ask it."""
    python_model(tmp_path / "repo", "echo", init="import time; time.sleep(3)")
    settings = Settings(data_dir=tmp_path / "data", triton_url=None)
    srv = server(tmp_path / "repo", settings.triton_run_dir, ["echo"]).start()
    prefix, ports = srv.state.shm_prefix, (srv.http_port, srv.grpc_port, srv.metrics_port)
    x = np.ones((2, 1), np.float32)
    try:
        resources = Resources(settings)
        assert resources.triton_hint() == START_HINT and srv.restarts() == []
        [child] = [pid for pid, args in local._tritonserver_processes()
                   if pid != srv.state.pid and f"--backend-directory={settings.triton_run_dir / 'backends'}" in args]
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "being started again" not in (hint := resources.triton_hint()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert re.fullmatch(r"it is being started again \(Triton exited \(signal 9 \(SIGKILL\)\) after \d+ s\): "
                            r"try again in a few seconds", hint), hint
        with pytest.raises(TritonUnavailable, match=re.escape(f"): {hint}")):  # what a search says meanwhile
            resources.triton.infer("echo", {"X": x}, ["Y"])
        deadline = time.monotonic() + 60
        while not srv.is_ready() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert (srv.http_port, srv.grpc_port, srv.metrics_port) == ports
        deadline = time.monotonic() + 10  # the same client reconnects by itself (within its backoff's 1 s)
        while (y := _answer(resources.triton, x)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        np.testing.assert_array_equal(y, x)
        assert resources.triton_hint() == START_HINT
        assert [r.split(" after")[0] for r in srv.restarts()] == ["Triton exited (signal 9 (SIGKILL))"]
    finally:
        srv.stop()
    assert leftovers(prefix) == ([], [])


def _answer(client, x, model: str = "echo"):
    try:
        return client.infer(model, {"X": x}, ["Y"])["Y"]
    except (TritonUnavailable, ModelNotReady):
        return None


def test_broken_model_is_a_clear_error_and_cleans_up(tmp_path):
    repo = tmp_path / "repo"
    python_model(repo, "good")
    python_model(repo, "broken", init='raise RuntimeError("tokenizer.json is missing")')
    srv = server(repo, tmp_path / "run", ["good", "broken"])
    prefixes = []  # this server's shm prefix: other tests' servers make regions in /dev/shm meanwhile
    srv.command = lambda backends, shm_prefix: prefixes.append(shm_prefix) or LocalTriton.command(srv, backends, shm_prefix)
    with pytest.raises(TritonError) as exc:
        srv.start(timeout=60)
    message = str(exc.value)
    assert "broken" in message and "tokenizer.json is missing" in message
    # Triton exits but leaves the stub of the model that did load: stop() must have killed it.
    assert srv.state is None
    assert _pids_running_in(repo) == []
    assert leftovers(prefixes[0]) == ([], [])


def test_a_start_whose_load_hangs_is_tried_again_and_a_load_that_always_hangs_is_named(tmp_path):
    """Triton waits without limit for a step's process to answer its first message: a process that
    hangs there held a whole start until its timeout (seen once in a full run, for minilm_query_onnx).
    The supervisor starts Triton again when a loading model's processes are idle for a while."""
    repo = tmp_path / "repo"
    python_model(repo, "echo")
    tried = 'tried = os.path.join(args["model_repository"], "tried"); first = not os.path.exists(tried)'
    python_model(repo, "hangs_once", init=f'{tried}; open(tried, "a").close(); time.sleep(3600 if first else 0)')
    t = 'started = time.monotonic(); [None for _ in iter(lambda: time.monotonic() - started < 6, False)]'
    python_model(repo, "slow", init=t)  # 6 s of CPU: slow, not hung
    with LocalTriton(repo, tmp_path / "run", models=["echo", "hangs_once", "slow"], hung_after_s=3).start() as srv:
        said = [ln for ln in Path(srv.state.log).read_text().splitlines() if ln.startswith("[supervise]")]
        assert said[0] == ("[supervise] Triton's start hung (the load of 'hangs_once' was idle for 3 s); "
                           "starting it again"), said
        assert len(said) == 2 and said[1] == local.READY_LINE, said
        assert srv.restarting() is None
        x = np.ones((2, 1), np.float32)
        for model in ("echo", "hangs_once", "slow"):
            assert np.array_equal(TritonClient(f"127.0.0.1:{srv.grpc_port}").infer(model, {"X": x}, ["Y"])["Y"], x)

    python_model(repo, "stuck", init="time.sleep(3600)")
    srv = LocalTriton(repo, tmp_path / "run2", models=["echo", "stuck"], hung_after_s=3)
    prefixes = []
    srv.command = lambda backends, shm_prefix: prefixes.append(shm_prefix) or LocalTriton.command(srv, backends, shm_prefix)
    started = time.monotonic()
    with pytest.raises(TritonError) as exc:
        srv.start(timeout=60)
    assert time.monotonic() - started < 30  # not the start's whole timeout
    assert str(exc.value) == ("Triton exited during start (code 1): Triton's start hung again "
                              "(the load of 'stuck' was idle for 3 s): giving up")
    assert leftovers(prefixes[0]) == ([], [])


def test_a_fork_that_never_became_a_step_is_a_hung_load():
    """The other place a load can hang: the process Triton forks to start a step, before it runs
    the stub (a fork of a many-threaded server can block on a lock another thread held)."""
    fake_server = subprocess.Popen(["bash", "-c", "sleep 60 & wait"])
    try:
        watch, deadline, hung = LoadWatch(fake_server.pid, None, 0.3), time.monotonic() + 10, None
        while not hung and time.monotonic() < deadline:
            hung = watch.hung()
            time.sleep(0.1)
        assert hung and re.fullmatch(r"a process Triton forked for a step \(pid \d+\) was idle for 0 s", hung), hung
    finally:
        _kill_with_children(fake_server)


def test_a_stub_that_a_reload_replaced_and_triton_let_go_is_found(tmp_path):
    """After a stalled step's reload, Triton 2.51 left the old stub alive in 4 of 19 survived
    stalls (waiting for a message, 41 MB for an echo; a model's memory for an encoder) beside the
    new one of the same instance. Killing it left Triton serving. Stand-ins here: processes with a
    stub's command line under a fake server, two for instance echo_0 and one for echo_1."""
    script = tmp_path / "repo" / "echo" / "1" / "model.py"
    script.parent.mkdir(parents=True)
    script.write_text("import time\ntime.sleep(60)\n")

    def stub(instance: str) -> str:
        return f"(exec -a /x/triton_python_backend_stub {sys.executable} {script} shm 1 1 1 lib 336 {instance} DEFAULT) &"

    fake_server = subprocess.Popen(["bash", "-c", f"{stub('echo_0')} {stub('echo_1')} sleep 0.3; {stub('echo_0')} wait"])
    try:
        watch, deadline, found = Replaced(fake_server.pid, 0.5), time.monotonic() + 10, []
        while not found and time.monotonic() < deadline:
            found = watch.let_go()
            time.sleep(0.1)
        stubs = {pid: (args[8], started) for pid, args, _, started in supervise._children(fake_server.pid, with_start=True)}
        assert len(stubs) == 3
        [(pid, instance)] = found
        assert instance == "echo_0"
        assert stubs[pid][1] == min(started for name, started in stubs.values() if name == "echo_0")  # the older one
    finally:
        _kill_with_children(fake_server)


def _kill_with_children(proc: subprocess.Popen) -> None:
    """``proc`` and its children (killed first: once it is gone they are init's)."""
    for child in supervise._children(proc.pid):
        os.kill(child[0], signal.SIGKILL)
    proc.kill()
    proc.wait()


def test_missing_repository_and_busy_port(tmp_path):
    with pytest.raises(TritonError, match="not found"):
        server(tmp_path / "nope", tmp_path / "run", []).start()
    python_model(tmp_path / "repo", "echo")
    http, grpc, metrics = free_ports(3)
    srv = LocalTriton(tmp_path / "repo", tmp_path / "run", http_port=http, grpc_port=grpc, metrics_port=metrics,
                      models=["echo"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", srv.grpc_port))
        s.listen()
        with pytest.raises(TritonError, match="already in use"):  # a port given is used as is, or not at all
            srv.start()


def test_a_start_that_triton_aborts_while_loading_is_tried_once_more(tmp_path):
    """On a machine loaded far past its cores Triton once aborted (SIGABRT, exit 134) while its python
    steps were loading: the start goes on with a second Triton; one that aborts again is an error."""
    repo = tmp_path / "repo"
    python_model(repo, "echo")
    tried = 'tried = os.path.join(args["model_repository"], "tried"); first = not os.path.exists(tried)'
    python_model(repo, "aborts_once", init=f'{tried}; open(tried, "a").close(); first and os.kill(os.getppid(), 6)')
    with server(repo, tmp_path / "run", ["echo", "aborts_once"]).start(timeout=120) as srv:
        x = np.ones((2, 1), np.float32)
        assert np.array_equal(TritonClient(f"127.0.0.1:{srv.grpc_port}").infer("aborts_once", {"X": x}, ["Y"])["Y"], x)

    python_model(repo, "aborts", init="os.kill(os.getppid(), 6)")
    srv = server(repo, tmp_path / "run2", ["echo", "aborts"])
    prefixes = []
    srv.command = lambda backends, shm_prefix: prefixes.append(shm_prefix) or LocalTriton.command(srv, backends, shm_prefix)
    with pytest.raises(TritonError) as exc:
        srv.start(timeout=120)
    assert str(exc.value).startswith("Triton exited during start (code 134)"), exc.value
    assert len(prefixes) == 2  # tried once more, not forever
    assert all(leftovers(p, within=10) == ([], []) for p in prefixes)


def test_a_restart_that_aborts_while_loading_is_started_again(tmp_path):
    """A server that was ready, crashed, and whose restart then aborted while loading (seen once under
    load, right after a crash): the supervisor starts it again within its budget rather than giving up,
    which left an ingest waiting for a server that would never come back."""
    repo = tmp_path / "repo"
    loads = 'loads = os.path.join(args["model_repository"], "loads"); n = os.path.getsize(loads) if os.path.exists(loads) else 0'
    python_model(repo, "aborts_on_restart", init=f'{loads}; open(loads, "a").write("x"); n == 1 and os.kill(os.getppid(), 6)')
    srv = server(repo, tmp_path / "run", ["aborts_on_restart"]).start(timeout=120)
    prefix, x = srv.state.shm_prefix, np.ones((2, 1), np.float32)
    try:
        [child] = [pid for pid, args in local._tritonserver_processes()
                   if pid != srv.state.pid and f"--backend-directory={tmp_path / 'run' / 'backends'}" in args]
        os.kill(child, signal.SIGKILL)  # the crash; the restart's load aborts (n == 1); the next one loads
        deadline = time.monotonic() + 120
        while (y := _answer(TritonClient(f"127.0.0.1:{srv.grpc_port}"), x, "aborts_on_restart")) is None \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        np.testing.assert_array_equal(y, x)
        assert [r.split(" after")[0] for r in srv.restarts()] == ["Triton exited (signal 9 (SIGKILL))",
                                                                  "Triton exited (signal 6 (SIGABRT))"]
        assert "starting it again in 5 s" in srv.restarts()[1]  # a load that died waits before the next try
        assert (repo / "aborts_on_restart" / "loads").read_text() == "xxx"
    finally:
        srv.stop()
    assert leftovers(prefix) == ([], [])


def test_picked_ports_taken_before_triton_binds_are_picked_again(tmp_path, monkeypatch):
    """Another process (here: a bound socket that does not listen, so the pre-check cannot see it)
    takes a picked port before Triton binds it: Triton exits, and the start goes on new ports."""
    python_model(tmp_path / "repo", "echo")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        picked: list[int] = []
        real = local.free_ports

        def pick(count: int, given=()) -> list[int]:
            ports = real(count, given) if picked else [taken.getsockname()[1], *real(count - 1, given)]
            picked.extend(ports)
            return ports

        monkeypatch.setattr(local, "free_ports", pick)
        with server(tmp_path / "repo", tmp_path / "run", ["echo"]) as srv:
            assert srv.is_ready()
            assert len(picked) == 6, picked  # two starts, three ports each
            assert (srv.http_port, srv.grpc_port, srv.metrics_port) == tuple(picked[3:])


def test_cli_up_status_down(tmp_path, model_repo):
    http, grpc, metrics = free_ports(3)
    env = {**os.environ, "SEARCH_DATA_DIR": str(tmp_path / "data"), "SEARCH_TRITON_REPO": str(model_repo),
           "SEARCH_TRITON_HTTP_PORT": str(http), "SEARCH_TRITON_GRPC_PORT": str(grpc),
           "SEARCH_TRITON_METRICS_PORT": str(metrics)}
    env.pop("SEARCH_TRITON_URL", None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "search", *args], env=env, capture_output=True, text=True, timeout=180)

    up = cli("triton", "up")
    assert up.returncode == 0, up.stderr
    assert "minilm" in up.stdout
    try:
        st = cli("triton", "status")
        assert st.returncode == 0 and "minilm" in st.stdout and "READY" in st.stdout, st.stdout + st.stderr
        again = cli("triton", "up")
        assert "already running" in again.stdout
    finally:
        down = cli("triton", "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    gone = cli("triton", "status")
    assert gone.returncode == 1 and "not running" in gone.stdout
    assert "Traceback" not in up.stderr + down.stderr + gone.stderr


def _pids_running_in(repo: Path) -> list[int]:
    needle = str(repo).encode()
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def test_python_stub_uses_this_environment(tmp_path):
    """The stub must import this venv's packages (tokenizers), not the system's."""
    init = textwrap.dedent("import tokenizers, numpy; assert numpy.__version__.startswith('1.')")
    python_model(tmp_path / "repo", "env_check", init=init)
    with server(tmp_path / "repo", tmp_path / "run", ["env_check"]) as srv:
        assert srv.is_ready()


def test_start_failure_summary_names_the_cause_not_the_cuda_noise(tmp_path):
    noise = 'E1127 18:26:45.262006 1 ensemble_scheduler.cc:1468] "unable to create stream for minilm: CUDA driver version is insufficient for CUDA runtime version"'
    log = tmp_path / "tritonserver.log"
    log.write_text(f'{noise}\nE1127 18:26:45.381447 1 main.cc:293] "failed to start Metrics service: Unavailable - '
                   "Socket '127.0.0.1:55003' already in use \"\nmalloc(): unaligned fastbin chunk detected\n")
    assert failure_summary(log) == "\"failed to start Metrics service: Unavailable - Socket '127.0.0.1:55003' already in use \""
    log.write_text(f'{noise}\nE1127 18:26:45.5 1 model_lifecycle.cc:654] "failed to load \'broken\' version 1: boom"\n')
    assert failure_summary(log) == "\"failed to load 'broken' version 1: boom\""
    log.write_text('E1128 18:58:53.314031 1 server.cc:241] "CudaDriverHelper has not been initialized."\n'
                   'I1128 18:58:53.318708 1 model_lifecycle.cc:472] "loading: a:1"\n'
                   'I1128 18:58:53.318708 1 model_lifecycle.cc:472] "loading: b_c:1"\n'
                   "I1128 18:58:54.825609 1 model_lifecycle.cc:839] \"successfully loaded 'a'\"\n")
    assert failure_summary(log) == "the load of 'b_c' never ended"
    # A refused command line: Triton prints its usage, then the reason, then a blank line.
    log.write_text("Usage: tritonserver [options]\n  --log-verbose <integer>\n\n"
                   "The server cannot listen to HTTP requests and metrics requests at the same address and port "
                   "127.0.0.1:34797\n\n")
    assert failure_summary(log).startswith("The server cannot listen to HTTP requests and metrics requests")


def test_picked_ports_are_distinct_and_avoid_the_given_ones():
    """One at a time the OS can hand out a port twice; a CI start failed with HTTP and metrics on one port."""
    for _ in range(200):
        ports = free_ports(3, taken={8000})
        assert len(set(ports)) == 3 and 8000 not in ports
