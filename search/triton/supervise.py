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
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MAX_RESTARTS, WINDOW_S = 5, 600.0
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
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        if stopping:  # a stop that came while it was being started again: forward() saw the old one
            child.terminate()
        was_ready = False
        while (code := child.poll()) is None:
            if not was_ready and (was_ready := _ready(args.ready_url)):
                print(READY_LINE, flush=True)
            time.sleep(0.5 if was_ready else 0.25)
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < WINDOW_S]
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
