"""How the benches time and count: the machine's CPU ticks (steal and busy cores), the CPU seconds of
a process, a process tree or a session from /proc, paths timed in turns, Triton's own statistics."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple


class Ticks(NamedTuple):
    idle: int
    steal: int  # taken by the VM's host for its other guests: slow rounds no code here controls
    total: int  # all of the machine's CPU ticks, steal included


def machine_ticks() -> Ticks:
    """The machine's CPU ticks since boot, from /proc/stat's first line (user .. steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return Ticks(idle=fields[3], steal=fields[7], total=sum(fields))


def steal_pct(before: Ticks) -> float:
    """The share of the machine's CPU time stolen since ``before`` (machine_ticks()), in %."""
    now = machine_ticks()
    return round(100 * (now.steal - before.steal) / max(now.total - before.total, 1), 1)


def busy_cores(before: Ticks) -> float:
    """How many of this process's usable cores were busy on average since ``before`` (steal aside)."""
    idle, steal, total = (a - b for a, b in zip(machine_ticks(), before))
    return len(os.sched_getaffinity(0)) * (1 - idle / max(total - steal, 1))


def cpu_list(text: str) -> set[int]:
    """'0,2' or '0-3' -> {0, 2} / {0, 1, 2, 3}"""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def proc_stat(path: Path) -> tuple[int, int]:
    """A process's session id and CPU clock ticks (user + system, all threads), from /proc/PID/stat."""
    fields = path.read_text().rsplit(")", 1)[1].split()
    return int(fields[3]), int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) of a process: this one when ``pid`` is None."""
    if pid is None:
        return time.process_time()
    return proc_stat(Path(f"/proc/{pid}/stat"))[1] / os.sysconf("SC_CLK_TCK")


def session_cpu(session: int | None) -> float:
    """CPU seconds of every process of a session (a local Triton's: the server and its Python-backend stubs)."""
    total = 0
    for entry in Path("/proc").iterdir():
        try:
            sid, ticks = proc_stat(entry / "stat")
        except (OSError, IndexError):  # not a process, or one that just exited
            continue
        if sid == session:
            total += ticks
    return total / os.sysconf("SC_CLK_TCK")


def process_tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, from /proc."""
    stats = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(p.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    tree, total = {root}, 0.0
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                changed = True
    return sum(stats[p][1] for p in tree if p in stats) + total


# -- timing
def timed(fn) -> float:
    """Milliseconds ``fn()`` took."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(fn, batches: list[list[str]], concurrency: int = 1, server_pid: int | None = None) -> tuple[float, float]:
    """(sentences per second, CPU milliseconds per sentence) for running fn over every batch with
    `concurrency` threads. CPU time is this process's (all threads) plus, for a served path, the
    Triton server's and its backend processes': the work done, which other load on the machine
    slows down less than the wall clock (spinning thread pools count while they spin)."""
    n = sum(len(b) for b in batches)
    cpu = process_tree_cpu(server_pid) + time.process_time() if server_pid else time.process_time()
    start = time.perf_counter()
    if concurrency == 1:
        for b in batches:
            fn(b)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(fn, batches))
    seconds = time.perf_counter() - start
    cpu = (process_tree_cpu(server_pid) + time.process_time() if server_pid else time.process_time()) - cpu
    return n / seconds, cpu * 1000 / n


def paired(fns: dict, batches: list[list[str]], block: int = 8) -> dict[str, float]:
    """Seconds each path took for all `batches`, the paths taking turns in blocks of `block` requests
    (the order rotates and reverses from block to block): all see the same phases of the machine's
    speed, which on a shared 2-core VM drifts by tens of percent within minutes and moves the ratios
    of whole rounds (one path's round can fall in a slow phase and another's in a fast one)."""
    names = list(fns)
    spent = dict.fromkeys(names, 0.0)
    for j, i in enumerate(range(0, len(batches), block)):
        order = names[j % len(names):] + names[:j % len(names)]
        for name in order[::-1] if j % 2 else order:
            start = time.perf_counter()
            for b in batches[i:i + block]:
                fns[name](b)
            spent[name] += time.perf_counter() - start
    return spent


def take_turns(svc, batcher: str, single, rounds: int, run) -> tuple[dict[str, list], float]:
    """Concurrent queries as served (those that wait on one in flight share a request of the
    coalescing ``svc.resources.batchers[batcher]``) against ``single`` (one request per query),
    taking turns ``rounds`` times: ``run(round, way)`` each time, its results per way, and the
    mean queries per coalesced request."""
    coalesced = svc.resources.batchers[batcher]
    ways = {"coalesced": coalesced, "one request per query": single}
    runs: dict[str, list] = {way: [] for way in ways}
    requests, items = coalesced.requests, coalesced.items
    try:
        for r in range(rounds):
            for way, encode in ways.items():
                svc.resources.batchers[batcher] = encode
                runs[way].append(run(r, way))
    finally:
        svc.resources.batchers[batcher] = coalesced
    return runs, round((coalesced.items - items) / max(1, coalesced.requests - requests), 2)


STAGES = ("queue", "compute_input", "compute_infer", "compute_output", "success")


def triton_stats(url: str) -> dict[str, dict[str, float]]:
    """Per model: Triton's cumulative milliseconds in each stage and its successful request count."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415

    client = grpcclient.InferenceServerClient(url)
    try:
        out = {}
        for m in client.get_inference_statistics(as_json=True)["model_stats"]:
            st = m["inference_stats"]
            out[m["name"]] = {k: int(st[k].get("ns", 0) or 0) / 1e6 for k in STAGES} | \
                {"requests": int(st["success"].get("count", 0) or 0)}
        return out
    finally:
        client.close()


def stats_delta(before: dict, after: dict) -> dict[str, dict[str, float]]:
    return {m: {k: after[m][k] - before.get(m, {}).get(k, 0) for k in after[m]} for m in after}
