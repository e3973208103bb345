"""Real processes the tests start: `search serve` owning a data dir (search/owner.py), and the CLIs;
and the stub processes of a local Triton."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from search.config import PROJECT_ROOT
from search.triton.local import LocalTriton, free_port
from search.triton.supervise import pids_with_arg


def leftovers(shm_prefix: str, within: float = 0.0) -> tuple[list[int], list[Path]]:
    """Processes and shm regions still carrying a server's ``shm_prefix``: none once it has stopped.
    ``within``: seconds to wait for them to go (a stub killed a moment ago may still be exiting)."""
    deadline = time.monotonic() + within
    while (found := (pids_with_arg(shm_prefix), list(Path("/dev/shm").glob(f"{shm_prefix}*")))) != ([], []) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    return found

sys.path.insert(0, str(PROJECT_ROOT))
from bench.common import busy  # noqa: E402  (the benches' CPU burners: a test that must pass on a loaded machine loads it)

__all__ = ["SearchServer", "busy", "env_for", "run_cli", "serving", "stubs"]


def stubs(server: LocalTriton, model: str) -> list[int]:
    """Live Python-backend stub processes serving ``model``: argv[1] is <repo>/<model>/<version>/<file>."""
    pids = []
    for pid in leftovers(server.state.shm_prefix)[0]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
        except OSError:
            continue
        if argv[0].endswith(b"triton_python_backend_stub") and Path(argv[1].decode()).parent.parent.name == model and state != "Z":
            pids.append(pid)
    return pids


def serving(server: LocalTriton, timeout: float = 120) -> LocalTriton:
    """``server``, ready. After Triton 2.51 aborts (docs/reliability.md, "A stalled step") its
    supervisor starts it again in seconds: the test that saw the abort fails, the next ones wait."""
    deadline = time.monotonic() + timeout
    while not server.is_ready() and server.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    return server


def stop(proc: subprocess.Popen, grace_s: float = 120) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace_s``: on a machine busy with other work
    a server's orderly exit has taken over 20 s (a test's outcome is not how fast it exits)."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def env_for(settings, **extra: str) -> dict[str, str]:
    """The environment a child process reads the test's settings from."""
    env = {k: v for k, v in os.environ.items() if k not in ("QDRANT_URL", "SEARCH_QDRANT_URL")}
    env.update(SEARCH_DATA_DIR=str(settings.data_dir), SEARCH_TRITON_URL=settings.triton_url,
               SEARCH_TRITON_REPO=str(settings.triton_repo), SEARCH_SEARCH_MODE=settings.search_mode,
               HF_HUB_OFFLINE="1", **extra)
    return env


def run_cli(module: str, *args: str, settings, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m search|indexer ARGS` on the test's settings."""
    return subprocess.run([sys.executable, "-m", module, *args], env=env_for(settings), cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)


class SearchServer:
    """`search serve` on a free port, waited for until it owns the data dir."""

    def __init__(self, settings, log: Path, *, port: int | None = None, wait: bool = True, **env: str) -> None:
        self.settings, self.port = settings, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--port", str(self.port)],
                                     env=env_for(settings, **env), cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                                     stderr=log.open("ab"), start_new_session=True)
        if wait:
            self.wait()

    def record(self) -> dict | None:
        try:
            return json.loads((self.settings.data_dir / "server.json").read_text())
        except (OSError, ValueError):
            return None

    def wait(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"search serve exited with {self.proc.returncode}: {self.log.read_text()[-800:]}")
            rec = self.record()
            if rec and rec.get("pid") == self.proc.pid:
                try:
                    with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"search serve did not own {self.settings.data_dir} within {timeout}s")

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def api(server: SearchServer, method: str, path: str, body: dict | None = None) -> dict:
    """A request with the owner's local token, as the CLI sends it."""
    token = server.record()["token"]
    req = urllib.request.Request(server.url + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"X-API-Key": token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())
