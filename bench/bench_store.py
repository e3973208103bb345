"""The embedded store (Qdrant's engine, qdrant-edge) against qdrant-client's local mode, both
through the project's Store class with the real photo schema (512-d CLIP vector, payload indexes).

Data shaped like real embeddings: 200 clusters, each a 32-dimensional manifold around its centre,
all offset along one shared direction (a cone, as CLIP's are), plus isotropic noise, normalised;
photo-like payload on every point,
with `camera_terms` taking 10 values (a filtered query keeps 10 %). Queries are fresh points from
the same distribution; recall@10 is against exact search (numpy brute force, same filter).

Each (backend, size) runs in two fresh processes, so each figure is measured alone:
  build:  upsert in batches of 256 (the ingest pipeline's write batch), then optimize (edge: merge
          segments + build HNSW; local mode has nothing to build); points/s with and without it.
  query:  reopen (open + first query, in a fresh process), RSS the store added, top-10 and filtered
          top-10 latency p50/p99 and recall@10, disk size.

    python bench/bench_store.py --sizes 10000,100000 --backends edge,local [--workdir DIR] [--json FILE]
    python bench/bench_store.py --report FILE          # print the table of recorded results

Run it under the exclusive CPU lock (flock -x /tmp/cpu.lock ...). Local mode is slow at 300k
(~15 min to upsert): --local-queries keeps its query count small.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from qdrant_client import models  # noqa: E402

from bench.common import DIM, SEED, payload, pid, sample  # noqa: E402
from search.store import images_schema, open_location  # noqa: E402
from search.store.util import disk_usage  # noqa: E402

CHUNK, BATCH = 10_000, 256


def dataset(n: int) -> np.ndarray:
    """The first n points (the same points at every size): fixed 10k chunks, each with its own seed."""
    return np.concatenate([sample(CHUNK, SEED + 1 + k) for k in range(n // CHUNK)])


FILTER = models.Filter(must=[models.FieldCondition(key="camera_terms", match=models.MatchValue(value="cam3"))])
FILTER_KEEP = 3  # i % 10 == 3


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def store_dir(workdir: Path, backend: str, n: int) -> Path:
    return workdir / f"{backend}-{n}"


def build(backend: str, n: int, workdir: Path) -> dict:
    path = store_dir(workdir, backend, n)
    shutil.rmtree(path, ignore_errors=True)
    data = dataset(n)
    store = open_location(backend, str(path))
    store.ensure(images_schema(DIM))
    spent = 0.0
    for start in range(0, n, BATCH):
        points = [models.PointStruct(id=pid(i), vector={"clip": data[i].tolist()}, payload=payload(i))
                  for i in range(start, min(n, start + BATCH))]
        t = time.perf_counter()
        store.upsert("images", points)
        spent += time.perf_counter() - t
    t = time.perf_counter()
    store.optimize("images")
    optimize = time.perf_counter() - t
    t = time.perf_counter()
    store.close()
    close = time.perf_counter() - t
    return {"upsert_pts_s": n / spent, "upsert_s": spent, "optimize_s": optimize, "close_s": close,
            "ingest_pts_s": n / (spent + optimize + close)}


def exact_top(data: np.ndarray, queries: np.ndarray, keep: np.ndarray | None, k: int = 10) -> list[list[int]]:
    out = []
    for q in queries:
        s = data @ q
        if keep is not None:
            s = np.where(keep, s, -np.inf)
        top = np.argpartition(-s, k)[:k]
        out.append(top[np.argsort(-s[top])].tolist())
    return out


def query(backend: str, n: int, workdir: Path, n_queries: int) -> dict:
    path = store_dir(workdir, backend, n)
    data = dataset(n)
    queries = sample(n_queries, SEED + 999)
    ids = {pid(i): i for i in range(n)}
    keep = (np.arange(n) % 10) == FILTER_KEEP
    truth = exact_top(data, queries, None)
    truth_f = exact_top(data, queries, keep)
    before = rss_mb()
    t = time.perf_counter()
    store = open_location(backend, str(path))
    store.search("images", "clip", queries[0].tolist(), limit=10)
    reopen = time.perf_counter() - t
    result = {"reopen_s": reopen, "points": store.count("images")}

    def run(flt, want):
        lat, hits = [], 0
        for q, w in zip(queries, want):
            t = time.perf_counter()
            res = store.search("images", "clip", q.tolist(), limit=10, query_filter=flt)
            lat.append(time.perf_counter() - t)
            hits += len({ids[p.id] for p in res} & set(w))
        ms = np.array(lat) * 1000
        return float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), hits / (10 * len(want))

    result["top10_p50_ms"], result["top10_p99_ms"], result["recall"] = run(None, truth)
    result["filtered_p50_ms"], result["filtered_p99_ms"], result["filtered_recall"] = run(FILTER, truth_f)
    result["queries"] = n_queries
    result["rss_mb"] = rss_mb() - before
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = store.stats("images")
    result["segments"], result["status"] = stats.segments, stats.status
    store.close()
    result["disk_mb"] = disk_usage(path) / 2**20
    return result


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def child(args) -> None:
    fn = build if args.phase == "build" else query
    extra = () if args.phase == "build" else (args.n_queries,)
    print(json.dumps(fn(args.backend, args.size, Path(args.workdir), *extra)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,300000")
    ap.add_argument("--backends", default="edge,local")
    ap.add_argument("--phases", default="build,query")
    ap.add_argument("--queries", type=int, default=300, help="queries per measurement (edge)")
    ap.add_argument("--local-queries", type=int, default=30, help="queries per measurement (local mode)")
    ap.add_argument("--workdir", default=None, help="where the stores are built (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (to run --phases query later)")
    ap.add_argument("--json", default=None, help="append results to this JSON-lines file")
    ap.add_argument("--report", default=None, help="print the table from a JSON-lines file and exit")
    # internal: one measurement in a fresh process
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n-queries", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return child(args)
    if args.report:
        return report([json.loads(line) for line in Path(args.report).read_text().splitlines() if line.strip()])
    from bench.common import keyed, load, machine_line, record  # noqa: PLC0415

    load_before = load()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-store-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            for backend in args.backends.split(","):
                row = {"backend": backend, "n": n, "machine": machine_line(), "load_start": loadavg(),
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                for phase in args.phases.split(","):
                    nq = args.queries if backend == "edge" else args.local_queries
                    cmd = [sys.executable, __file__, "--phase", phase, "--backend", backend, "--size", str(n),
                           "--workdir", str(workdir), "--n-queries", str(nq)]
                    proc = subprocess.run(cmd, capture_output=True, text=True)
                    if proc.returncode != 0:
                        sys.exit(f"{backend} {n} {phase} failed:\n{proc.stderr[-3000:]}")
                    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                row["load_end"] = loadavg()
                print(json.dumps(row), flush=True)
                rows.append(row)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")
                if not args.keep:
                    shutil.rmtree(store_dir(workdir, backend, n), ignore_errors=True)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    report(rows)
    if rows:  # one line for the run, its rows by backend and size (edge_1000000.top10_p50_ms)
        record("bench_store", {"phases": args.phases, "queries": args.queries, "local_queries": args.local_queries,
                               **keyed(rows, "backend", "n")}, load_before=load_before)


def report(rows: list[dict]) -> None:
    def f(x, spec):
        return format(x, spec) if isinstance(x, int | float) else "-"

    if rows:
        print(f"machine: {rows[0].get('machine')}")
    print("| backend | points | upsert pts/s | + index build s | top-10 p50 / p99 ms | recall@10 | filtered p50 / p99 ms "
          "| filtered recall@10 | reopen s | RSS MB | disk MB | queries | load |")
    print("| --- " * 13 + "|")
    for r in sorted(rows, key=lambda r: (r["n"], r["backend"])):
        print(f"| {r['backend']} | {r['n']:,} | {f(r.get('upsert_pts_s'), ',.0f')} | {f(r.get('optimize_s'), '.1f')} "
              f"| {f(r.get('top10_p50_ms'), '.1f')} / {f(r.get('top10_p99_ms'), '.1f')} | {f(r.get('recall'), '.3f')} "
              f"| {f(r.get('filtered_p50_ms'), '.1f')} / {f(r.get('filtered_p99_ms'), '.1f')} | {f(r.get('filtered_recall'), '.3f')} "
              f"| {f(r.get('reopen_s'), '.2f')} | {f(r.get('rss_mb'), ',.0f')} | {f(r.get('disk_mb'), ',.0f')} "
              f"| {r.get('queries', '-')} | {r.get('load_start')} → {r.get('load_end')} |")
    for n in sorted({r["n"] for r in rows}):
        e = next((r for r in rows if r["n"] == n and r["backend"] == "edge"), None)
        lo = next((r for r in rows if r["n"] == n and r["backend"] == "local"), None)
        if e and lo and "top10_p50_ms" in e and "top10_p50_ms" in lo:
            print(f"{n:,}: edge vs local mode — upsert ×{e['upsert_pts_s'] / lo['upsert_pts_s']:.0f}, top-10 p50 "
                  f"×{lo['top10_p50_ms'] / e['top10_p50_ms']:.0f} faster, filtered ×{lo['filtered_p50_ms'] / e['filtered_p50_ms']:.0f}, "
                  f"reopen ×{lo['reopen_s'] / e['reopen_s']:.0f}")


if __name__ == "__main__":
    main()
