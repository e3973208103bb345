"""Keep a local Triton running: ``python supervise.py --ready-url URL --shm-prefix P -- tritonserver ...``.

Triton 2.51 aborts (boost lock_exception) when one of its Python-backend steps gives no sign of
life for a second while requests are in flight: a suspended laptop or a paused VM is enough
(docs/reliability.md, "A stalled step"). The container deployment restarts it (compose's
``restart: unless-stopped``); this does the same for the server `search triton up` starts.

Run by path with the standard library alone (the server's environment has no PYTHONPATH). It is
the process group's leader, so `search triton down` stops it and everything it started. On SIGTERM
or SIGINT it passes the signal on to Triton and exits with it. When Triton exits by itself after
it was ready, the supervisor removes what the dead server left (stubs, shared memory) and starts
it again with the same command, at most MAX_RESTARTS times in WINDOW_S; a server that never got
ready is not restarted (a model that cannot load would only fail again), and its exit status
becomes the supervisor's.

A load that hangs is the exception: Triton waits without limit for a Python-backend process to
answer its first message (the python backend's ``StubLauncher`` pops the reply with no timeout), so
a process that hangs there, before or after it becomes the stub, holds the start for ever. When a
model's process used no CPU for ``--hung-after`` seconds while its model loads, the supervisor
says which and starts Triton again (within the same restart budget); a load that hangs on every
try ends the supervisor with an error.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MAX_RESTARTS, WINDOW_S = 5, 600.0
HUNG_AFTER_S = 30.0  # no CPU for this long while loading: a hung load (a real load reads and computes)
HUNG_TRIES = 2  # starts in a row whose load hung before the supervisor gives up
READY_LINE = "[supervise] Triton is ready"  # LocalTriton.start waits for it: a crash after it is restarted


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def pids_with_arg(needle: str) -> list[int]:
    """Processes other than this one whose command line holds ``needle``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def clean(shm_prefix: str) -> None:
    """Kill the processes still carrying a server's shm prefix (its stubs) and remove its shared
    memory: after a crash here, after a stop in ``LocalTriton.stop``."""
    for pid in pids_with_arg(shm_prefix):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for region in Path("/dev/shm").glob(f"{shm_prefix}*"):
        region.unlink(missing_ok=True)


class LoadWatch:
    """Finds a hung model load in a Triton that is starting: a child process of the server (a
    Python-backend stub whose model has not loaded yet, or a fork that never became a stub) whose
    CPU time stayed the same for ``hung_after`` seconds. Reads Triton's log for the models loaded."""

    def __init__(self, server_pid: int, log: Path | None, hung_after: float) -> None:
        self.server_pid, self.log, self.hung_after = server_pid, log, hung_after
        self.log_start = log.stat().st_size if log is not None and log.exists() else 0
        self.seen: dict[int, tuple[int, float]] = {}  # pid -> (CPU ticks, when they last moved)
        self.done: set[str] = set()

    def hung(self) -> str | None:
        """What hangs ("the load of 'minilm_query_onnx' used no CPU for 30 s"), or None.
        A model's instances start side by side, and one that is done waits idle for the others: a
        model hangs when none of its processes moved."""
        done = self._models_done()
        now = time.monotonic()
        groups: dict[str, list[float]] = {}
        for pid, args, ticks in _children(self.server_pid):
            stub = len(args) > 1 and Path(args[0]).name == "triton_python_backend_stub"
            model = Path(args[1]).parent.parent.name if stub else None
            if model in done:
                continue
            last = self.seen.get(pid)
            if last is None or last[0] != ticks:
                self.seen[pid] = last = (ticks, now)
            groups.setdefault(f"the load of '{model}'" if model else f"a process Triton forked for a step (pid {pid})",
                              []).append(last[1])
        for what, moved in groups.items():
            if now - max(moved) >= self.hung_after:
                return f"{what} used no CPU for {now - max(moved):.0f} s"
        return None

    def _models_done(self) -> set[str]:
        """The models whose load ended (loaded or failed), from the log lines written since the
        server started (read on from where the last call stopped)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_start)
                data = f.read()
        except (OSError, TypeError):
            return self.done
        complete = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.log_start += complete
        text = data[:complete].decode(errors="replace")
        self.done |= set(re.findall(r"(?:successfully loaded|failed to load) '([^']+)'", text))
        return self.done


def _children(pid: int) -> list[tuple[int, list[str], int]]:
    """(pid, command line, CPU ticks) of each live child of ``pid``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(") ", 1)[1].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            args = [os.fsdecode(a) for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except (OSError, IndexError, ValueError):
            continue
        found.append((int(proc.name), args, int(fields[11]) + int(fields[12])))  # utime + stime
    return found


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready-url", required=True)
    parser.add_argument("--shm-prefix", required=True)
    parser.add_argument("--log", type=Path, help="Triton's log (this process's output), for the models it has loaded")
    parser.add_argument("--hung-after", type=float, default=HUNG_AFTER_S)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    stopping = False
    child: subprocess.Popen | None = None

    def forward(signum, _frame):
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    restarts: list[float] = []
    hung_tries = 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        if stopping:  # a stop that came while it was being started again: forward() saw the old one
            child.terminate()
        was_ready, hung, watch = False, None, LoadWatch(child.pid, args.log, args.hung_after)
        while (code := child.poll()) is None:
            if not was_ready and (was_ready := _ready(args.ready_url)):
                print(READY_LINE, flush=True)
            if not was_ready and not stopping and (hung := watch.hung()):
                child.kill()  # a hung load also holds Triton's orderly exit
                code = child.wait()
                break
            time.sleep(0.5 if was_ready else 0.25)
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < WINDOW_S]
        if hung:
            hung_tries += 1
            if hung_tries >= HUNG_TRIES or len(restarts) >= MAX_RESTARTS:
                print(f"[supervise] Triton's start hung again ({hung}): giving up", flush=True)
                clean(args.shm_prefix)
                return 1
            restarts.append(now)
            print(f"[supervise] Triton's start hung ({hung}); starting it again", flush=True)
            clean(args.shm_prefix)
            continue
        hung_tries = 0
        if stopping or not was_ready or len(restarts) >= MAX_RESTARTS:
            if not stopping and was_ready:
                print(f"[supervise] Triton exited ({_describe(code)}) after {now - started:.0f} s, its "
                      f"{len(restarts) + 1}th exit in {WINDOW_S / 60:.0f} min: not starting it again", flush=True)
            return 128 - code if code < 0 else code
        restarts.append(now)
        print(f"[supervise] Triton exited ({_describe(code)}) after {now - started:.0f} s; starting it again "
              f"(restart {len(restarts)} in the last {WINDOW_S / 60:.0f} min)", flush=True)
        clean(args.shm_prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
