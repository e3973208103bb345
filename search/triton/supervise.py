"""Keep a local Triton running: ``python supervise.py --ready-url URL --shm-prefix P -- tritonserver ...``.

Triton 2.51 aborts when a Python-backend step shows no life for a second with requests in flight
(a suspended laptop is enough; docs/reliability.md). Compose restarts the container; this does the
same for `search triton up`. Standard library and search.process only; it leads the process
group, so `search triton down` stops everything. SIGTERM/SIGINT pass on to Triton. When Triton exits by itself after being
ready, the supervisor cleans up (stubs, shared memory) and restarts it, at most MAX_RESTARTS times
in WINDOW_S, also when a restarted one dies again while loading (Triton once aborted that way right
after a crash, and the ingest waiting for it waited for ever), then after a pause that doubles from
LOAD_RETRY_PAUSE_S (the machine may be too loaded for its Python steps to start); a first start that never got ready is
not restarted, its exit status becomes the supervisor's (``LocalTriton.start`` decides).

Triton waits for ever on a hung Python-backend process during a load: when a loading model's
processes stay idle (under IDLE_CPU) for ``--hung-after`` seconds, the supervisor names it and
restarts Triton (same budget); a load hanging every try ends it with an error. It also stops
stubs left idle after a stalled step's reload (``Replaced``). With ``--stop-with PID`` it stops
Triton and cleans up when that process ends (a test worker killed for memory leaves no server).

The server's shared memory carries queries, documents and OCR text: Triton runs under umask 077, and
since its Python backend creates each region 0644 whatever the umask (boost.interprocess sets the
mode after creating it), the supervisor makes them 0600 as they appear (``private_shm``)."""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from search.process import alive

MAX_RESTARTS, WINDOW_S = 5, 600.0
# A restart that dies again while loading waits this long before the next (doubling up to the
# most): on a machine too loaded for Triton's Python steps to start, five tries at once all failed.
LOAD_RETRY_PAUSE_S, LOAD_RETRY_PAUSE_MAX_S = 5.0, 60.0
HUNG_AFTER_S = 30.0  # idle this long while loading: a hung load (a real load reads and computes)
HUNG_TRIES = 2  # starts in a row whose load hung before the supervisor gives up
IDLE_CPU = 0.01  # under 1 % of a core: idle
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
REPLACED_IDLE_S = 120.0  # a stub that a newer one of its instance replaced, idle this long: let go of
LOAD_ENDED = re.compile(r"(?:successfully loaded|failed to load) '([^']+)'")  # Triton's log: a model's load is over
IN_ATTRIB, IN_CREATE = 0x4, 0x100  # inotify events: a file's mode changed, a file was created
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
        _kill(pid)
    for region in Path("/dev/shm").glob(f"{shm_prefix}*"):
        region.unlink(missing_ok=True)


def private_shm(shm_prefix: str) -> None:
    """Make the server's shared-memory regions readable by their owner only."""
    for region in Path("/dev/shm").glob(f"{shm_prefix}*"):
        try:
            if region.stat().st_mode & 0o077:
                region.chmod(0o600)
        except OSError:  # gone meanwhile
            continue


def watch_shm(shm_prefix: str) -> None:
    """``private_shm`` at each region created or chmodded in /dev/shm (inotify, in a thread), so that a
    region is 0644 for as short a time as can be; without inotify, the main loop's sweep does it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0 or libc.inotify_add_watch(fd, b"/dev/shm", IN_CREATE | IN_ATTRIB) < 0:
            return
    except (OSError, AttributeError):
        return

    def run() -> None:
        while True:
            try:
                os.read(fd, 64 * 1024)
            except OSError:
                return
            private_shm(shm_prefix)

    threading.Thread(target=run, name="private-shm", daemon=True).start()


class Idleness:
    """Since when each process has been idle: under IDLE_CPU of a core since then (plus a clock
    tick). Not "no CPU at all": a stub's health thread wakes a few times a second, now and then
    costing a tick, waiting or not."""

    def __init__(self) -> None:
        self.marks: dict[int, tuple[int, float]] = {}  # pid -> (CPU ticks, since when)

    def since(self, pid: int, ticks: int, now: float) -> float:
        mark = self.marks.get(pid)
        if mark is None or ticks - mark[0] > 1 + (now - mark[1]) * TICKS_PER_S * IDLE_CPU:
            self.marks[pid] = mark = (ticks, now)
        return mark[1]

    def keep(self, pids) -> None:
        """Forget the processes gone (a pid used again is a new process)."""
        self.marks = {pid: mark for pid, mark in self.marks.items() if pid in pids}


class LoadWatch:
    """Finds a hung model load in a Triton that is starting: a child process of the server (a
    Python-backend stub whose model has not loaded yet, or a fork that never became a stub) idle
    for ``hung_after`` seconds. Reads Triton's log for the models loaded."""

    def __init__(self, server_pid: int, log: Path | None, hung_after: float) -> None:
        self.server_pid, self.log, self.hung_after = server_pid, log, hung_after
        self.log_start = log.stat().st_size if log is not None and log.exists() else 0
        self.idle = Idleness()
        self.done: set[str] = set()

    def hung(self) -> str | None:
        """What hangs ("the load of 'MODEL' was idle for 30 s"), or None.
        A model's instances start side by side, and one that is done waits idle for the others: a
        model hangs when all of its processes are idle."""
        done = self._models_done()
        now = time.monotonic()
        groups: dict[str, list[float]] = {}
        for pid, args, ticks in _children(self.server_pid):
            model = step[0] if (step := _step(args)) else None
            if model in done:
                continue
            groups.setdefault(f"the load of '{model}'" if model else f"a process Triton forked for a step (pid {pid})",
                              []).append(self.idle.since(pid, ticks, now))
        for what, since in groups.items():
            if now - max(since) >= self.hung_after:
                return f"{what} was idle for {now - max(since):.0f} s"
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
        self.done |= set(LOAD_ENDED.findall(text))
        return self.done


class Replaced:
    """Finds the stubs that Triton let go of: after a stalled step's reload, Triton 2.51 sometimes
    never finalizes the old stub, which then waits for a message for ever with its model in
    memory (docs/reliability.md, "A stalled step"). Such a stub shares its instance's name
    (``echo_0``) with the newer stub that replaced it, and is idle; during a reload the two also
    coexist, but the old one serves until the new one is loaded, and loads take seconds."""

    def __init__(self, server_pid: int, idle_after: float) -> None:
        self.server_pid, self.idle_after = server_pid, idle_after
        self.idle = Idleness()
        self.first_seen: dict[int, float] = {}

    def let_go(self) -> list[tuple[int, str]]:
        """(pid, instance) of each stub replaced by a newer one of its instance, both seen for
        ``idle_after`` seconds and the older idle all that time."""
        now = time.monotonic()
        instances: dict[str, list[tuple[int, int]]] = {}  # instance -> [(start time, pid)]
        idle_since: dict[int, float] = {}
        for pid, args, ticks, started in _children(self.server_pid, with_start=True):
            if step := _step(args):
                instances.setdefault(step[1], []).append((started, pid))
                idle_since[pid] = self.idle.since(pid, ticks, now)
                self.first_seen.setdefault(pid, now)
        self.idle.keep(idle_since)
        self.first_seen = {pid: t for pid, t in self.first_seen.items() if pid in idle_since}
        old = []
        for instance, stubs in instances.items():
            newest = max(stubs)[1]
            for _, pid in sorted(stubs)[:-1]:
                if now - self.first_seen[newest] >= self.idle_after and now - idle_since[pid] >= self.idle_after:
                    old.append((pid, instance))
        return old


def _step(args: list[str]) -> tuple[str, str] | None:
    """(model, instance) from a Python-backend stub's command line (<stub> <repo>/<model>/<version>/<file>
    … <instance> <kind>); None for any other process."""
    if len(args) > 8 and Path(args[0]).name == "triton_python_backend_stub":
        return Path(args[1]).parent.parent.name, args[8]
    return None


def _children(pid: int, with_start: bool = False) -> list[tuple]:
    """(pid, command line, CPU ticks) of each live child of ``pid``, and with ``with_start`` its
    start time (clock ticks after boot)."""
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
        row = (int(proc.name), args, int(fields[11]) + int(fields[12]))  # utime + stime
        found.append((*row, int(fields[19])) if with_start else row)
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready-url", required=True)
    parser.add_argument("--shm-prefix", required=True)
    parser.add_argument("--log", type=Path, help="Triton's log (this process's output), for the models it has loaded")
    parser.add_argument("--hung-after", type=float, default=HUNG_AFTER_S)
    parser.add_argument("--replaced-idle", type=float, default=REPLACED_IDLE_S)
    parser.add_argument("--stop-with", type=int, help="stop Triton when the process with this pid ends")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def _load_retry_pause(failed_loads: int) -> float:
    """Seconds before the next start after this many restarts in a row died while loading."""
    return min(LOAD_RETRY_PAUSE_MAX_S, LOAD_RETRY_PAUSE_S * 2 ** (failed_loads - 1)) if failed_loads else 0.0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.umask(0o077)  # what Triton and its steps write is the user's alone
    watch_shm(args.shm_prefix)
    stopping = orphaned = False
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
    ever_ready = False  # a restart that dies while loading is tried again; only a first start that does is the caller's
    failed_loads = 0  # restarts in a row that died while loading
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        if stopping:  # a stop that came while it was being started again: forward() saw the old one
            child.terminate()
        was_ready, hung, watch = False, None, LoadWatch(child.pid, args.log, args.hung_after)
        replaced, next_look = Replaced(child.pid, args.replaced_idle), 0.0
        while (code := child.poll()) is None:
            private_shm(args.shm_prefix)
            if args.stop_with and not stopping and not alive(args.stop_with):
                print(f"[supervise] process {args.stop_with} ended: stopping Triton", flush=True)
                forward(signal.SIGTERM, None)
                orphaned = True  # nobody is left to clean up after it: this process does
            if not was_ready and (was_ready := _ready(args.ready_url)):
                ever_ready = True
                print(READY_LINE, flush=True)
            if not was_ready and not stopping and (hung := watch.hung()):
                child.kill()  # a hung load also holds Triton's orderly exit
                code = child.wait()
                break
            if was_ready and time.monotonic() >= next_look:
                next_look = time.monotonic() + min(5.0, args.replaced_idle / 4)
                for pid, instance in replaced.let_go():
                    _kill(pid)
                    print(f"[supervise] stopped the old process of '{instance}' (pid {pid}): a reload replaced it, "
                          f"and Triton had let it go", flush=True)
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
        if stopping or not ever_ready or len(restarts) >= MAX_RESTARTS:
            if not stopping and ever_ready:
                print(f"[supervise] Triton exited ({_describe(code)}) after {now - started:.0f} s, its "
                      f"{len(restarts) + 1}th exit in {WINDOW_S / 60:.0f} min: not starting it again", flush=True)
            if orphaned:
                clean(args.shm_prefix)
            return 128 - code if code < 0 else code
        restarts.append(now)
        failed_loads = 0 if was_ready else failed_loads + 1
        pause = _load_retry_pause(failed_loads)
        print(f"[supervise] Triton exited ({_describe(code)}) after {now - started:.0f} s; starting it again"
              f"{f' in {pause:.0f} s' if pause else ''} (restart {len(restarts)} in the last {WINDOW_S / 60:.0f} min)",
              flush=True)
        clean(args.shm_prefix)
        resume = time.monotonic() + pause
        while not stopping and time.monotonic() < resume:
            time.sleep(0.25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
