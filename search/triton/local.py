"""Run the real ``tritonserver`` binary shipped in the ``nvidia-pytriton`` wheel, without Docker.

The server runs in its own process group with its own python-backend shared-memory prefix, so
stopping it (even after a failed start that left stubs running) kills everything it spawned and
removes its ``/dev/shm`` regions. A supervisor (``supervise.py``) leads the group and restarts
Triton when it exits by itself after being ready. ``wheel.py``, ``ports.py`` and ``startlog.py``
(a failed start's log) live beside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from search.errors import TritonError
from search.process import alive
from search.triton.client import TritonClient
from search.triton.ports import free_port, free_ports, port_in_use
from search.triton.startlog import failure_summary
from search.triton.supervise import HUNG_AFTER_S, READY_LINE, clean
from search.triton.wheel import prepare_backends, pytriton_dir, server_env

# Callers import these from here, where the server's code lived in one module.
__all__ = ["LocalTriton", "ServerState", "TritonError", "free_port", "free_ports", "prepare_backends"]

SUPERVISOR = Path(__file__).with_name("supervise.py")
LOG_NAME = "tritonserver.log"  # in the run dir: Triton's output and the supervisor's


@dataclass
class ServerState:
    pid: int
    shm_prefix: str
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    log: str
    models: list[str] = field(default_factory=list)


class LocalTriton:
    """Start/stop one local Triton server.

    ``models``: the models to load (explicit model control); the caller passes only models whose
    generated files exist, so a missing model never stops the others from serving.
    A port of 0 (the default) is a free one picked at the first start and kept by later ones; if
    another process binds it before Triton does, the start is tried again on new ports. A port
    given is used as is.
    """

    _PORTS = ("http_port", "grpc_port", "metrics_port")
    _PORT_TRIES = 3
    _CRASH_TRIES = 1
    # A process whose end stops the server too (None: it runs until stopped, as `search triton up`
    # wants). The test suite sets its worker's pid: a worker killed for memory leaves no Triton behind.
    stop_with: int | None = None

    def __init__(
        self,
        repo: Path,
        run_dir: Path,
        *,
        host: str = "127.0.0.1",
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        models: list[str] | None = None,
        extra_args: list[str] | None = None,
        hung_after_s: float = HUNG_AFTER_S,
    ) -> None:
        self.repo = Path(repo).resolve()
        self.run_dir = Path(run_dir)
        self.host, self.http_port, self.grpc_port, self.metrics_port = host, http_port, grpc_port, metrics_port
        self._any_port = [name for name in self._PORTS if getattr(self, name) == 0]
        self.models = list(models or [])
        self.extra_args = list(extra_args or [])
        self.hung_after_s = hung_after_s
        self.state: ServerState | None = None

    # -- state file, so `search triton down` in another process can stop what `up` started
    @property
    def state_file(self) -> Path:
        return self.run_dir / "server.json"

    def _save_state(self) -> None:
        assert self.state is not None
        self.state_file.write_text(json.dumps(asdict(self.state), indent=2))

    @classmethod
    def attach(cls, run_dir: Path) -> LocalTriton | None:
        """The server described by ``run_dir/server.json``, if any."""
        path = Path(run_dir) / "server.json"
        if not path.exists():
            return None
        st = ServerState(**json.loads(path.read_text()))
        inst = cls(Path("."), run_dir, host=st.host, http_port=st.http_port,
                   grpc_port=st.grpc_port, metrics_port=st.metrics_port, models=st.models)
        inst.state = st
        return inst

    @classmethod
    def running(cls) -> list[LocalTriton]:
        """Every live server this project started, whatever its data dir: found by its process
        (its command line names ``<run dir>/backends``) and confirmed by that run dir's state file."""
        found = []
        for pid, args in _tritonserver_processes():
            for arg in args:
                if arg.startswith("--backend-directory="):
                    run_dir = Path(arg.split("=", 1)[1]).parent
                    try:
                        server = cls.attach(run_dir)
                    except (OSError, ValueError, TypeError):  # an unreadable or foreign state file
                        server = None
                    if server is not None and server.state.pid == pid:
                        found.append(server)
        return found

    # -- lifecycle
    def command(self, backends: Path, shm_prefix: str) -> list[str]:
        cmd = [
            str(pytriton_dir() / "bin" / "tritonserver"),
            f"--model-repository={self.repo}",
            f"--backend-directory={backends}",
            "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in self.models],
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0",
            "--cuda-memory-pool-byte-size=0:0",
            "--disable-auto-complete-config",
            "--exit-timeout-secs=10",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
            *self.extra_args,
        ]
        return cmd

    def supervised(self, command: list[str], shm_prefix: str) -> list[str]:
        """``command`` under the supervisor, which starts Triton again after a crash (``supervise.py``)."""
        return [sys.executable, "-I", str(SUPERVISOR), f"--ready-url={self.url('/v2/health/ready')}",
                f"--shm-prefix={shm_prefix}", f"--log={self.run_dir / LOG_NAME}", f"--hung-after={self.hung_after_s:g}",
                *([f"--stop-with={self.stop_with}"] if self.stop_with else []), "--", *command]

    def start(self, timeout: float = 120.0) -> LocalTriton:
        if not self.repo.is_dir():
            raise TritonError(f"model repository not found: {self.repo}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tries = self._PORT_TRIES if self._any_port else 1
        crashes = 0
        attempt = 0
        while True:
            attempt += 1
            if attempt > 1 or any(getattr(self, name) == 0 for name in self._any_port):  # a restart keeps its ports
                given = {getattr(self, name) for name in self._PORTS if name not in self._any_port}
                for name, port in zip(self._any_port, free_ports(len(self._any_port), given), strict=True):
                    setattr(self, name, port)
            try:
                return self._start(timeout)
            except _PortTaken:
                if attempt >= tries + crashes:
                    raise
            except _StartCrashed:
                # On a machine loaded far past its cores, Triton itself has aborted while its python
                # steps were still loading; a second start is the cure a user would try.
                crashes += 1
                if crashes > self._CRASH_TRIES:
                    raise

    def _start(self, timeout: float) -> LocalTriton:
        for port in (self.http_port, self.grpc_port, self.metrics_port):
            if port_in_use(self.host, port):
                raise _PortTaken(f"port {port} on {self.host} is already in use (is a server running? `search triton status`)")
        backends = prepare_backends(self.run_dir / "backends")
        shm_prefix = f"triton_{uuid.uuid4().hex[:10]}_"
        log = self.run_dir / LOG_NAME
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                self.supervised(self.command(backends, shm_prefix), shm_prefix), stdout=logf,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=server_env(), start_new_session=True,
            )
        self._proc = proc
        self.state = ServerState(proc.pid, shm_prefix, self.host, self.http_port, self.grpc_port,
                                 self.metrics_port, str(log), self.models)
        self._save_state()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                self.stop()
                summary = failure_summary(log)
                error = (_PortTaken if "already in use" in summary
                         else _StartCrashed if _crashed(code, summary) else TritonError)
                raise error(f"Triton exited during start (code {code}): {summary}")
            if self.is_ready() and self._supervisor_saw_ready(log):
                return self
            time.sleep(0.25)
        self.stop()
        raise TritonError(f"Triton was not ready after {timeout:.0f} s: {failure_summary(log)} (log: {log})")

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.http_port}{path}"

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("/v2/health/ready"), timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def is_running(self) -> bool:
        return self.state is not None and _alive(self.state.pid)

    def restarts(self) -> list[str]:
        """What the supervisor wrote each time it started Triton again since this server's start."""
        try:
            lines = Path(self.state.log).read_text(errors="replace").splitlines() if self.state else []
        except OSError:
            return []
        return [ln.removeprefix("[supervise] ") for ln in lines if ln.startswith("[supervise]") and "starting it again" in ln]

    @staticmethod
    def _supervisor_saw_ready(log: Path) -> bool:
        """Whether the supervisor has seen this start's Triton ready (from then on it restarts a crash)."""
        try:
            return READY_LINE in log.read_text(errors="replace")
        except OSError:
            return False

    def restarting(self) -> str | None:
        """While the supervisor is starting Triton again after it exited by itself: why it exited
        ("Triton exited (signal 6 (SIGABRT)) after 5 s"); else None."""
        if not self.is_running() or self.is_ready():
            return None
        said = self.restarts()
        return said[-1].split(";")[0] if said else None

    def model_status(self) -> list[dict]:
        req = urllib.request.Request(self.url("/v2/repository/index"), data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def health(self, timeout_s: float = 10.0) -> dict:
        """Model name -> ``Health`` from a tiny inference per served ensemble: a model whose
        backend process died still reads READY in ``model_status``."""
        return TritonClient(f"{self.host}:{self.grpc_port}", heal=False).health(timeout_s=timeout_s)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Triton drains and unloads), then SIGKILL the whole process group, then any
        stub still holding our shm prefix, then the shm regions themselves. Safe to call twice."""
        st = self.state
        if st is None:
            return
        proc = getattr(self, "_proc", None)
        if _alive(st.pid):
            try:
                os.kill(st.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and _alive(st.pid, proc):
                time.sleep(0.1)
        try:
            os.killpg(st.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc is not None:
            proc.wait(timeout=5)
        clean(st.shm_prefix)
        self.state_file.unlink(missing_ok=True)
        self.state = None

    def __enter__(self) -> LocalTriton:
        return self.start() if self.state is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _PortTaken(TritonError):
    """A port was bound by another process: on picked ports, worth another try."""


class _StartCrashed(TritonError):
    """Triton died by a signal (an abort) while its models loaded, with no load error: worth one more try."""


def _crashed(code: int, summary: str) -> bool:
    by_signal = code < 0 or code >= 128  # the supervisor exits 128 + N when Triton dies by signal N
    return (by_signal or "never ended" in summary) and "failed to load" not in summary


def _alive(pid: int, proc: subprocess.Popen | None = None) -> bool:
    return proc.poll() is None if proc is not None else alive(pid)


def _tritonserver_processes() -> list[tuple[int, list[str]]]:
    """(pid, the server's command line) of each tritonserver and each supervisor of one: the state
    file records the supervisor's pid."""
    procs = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                args = [os.fsdecode(a) for a in (p / "cmdline").read_bytes().split(b"\0") if a]
            except OSError:
                continue
            if str(SUPERVISOR) in args and "--" in args:
                args = args[args.index("--") + 1:]
            if args and Path(args[0]).name == "tritonserver":
                procs.append((int(p.name), args))
    return procs
