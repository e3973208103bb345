"""The embedded store (Qdrant's engine, qdrant-edge) against qdrant-client's local mode, both
through the project's Store class with the real schemas: photos (512-d CLIP-sized vectors, EXIF-like
payload) or documents (--kind documents: 384-d MiniLM-sized vectors, passages of ~700 characters;
the collection as an ingest with MiniLM alone creates it, without BGE-M3's vectors), or --kind real:
the documents collection with real MiniLM vectors of real sentences (bench/store_data.py), where
recall@10 is what the product's search parameters (its HNSW beam for the collection's size) keep.

Data shaped like real embeddings: 200 clusters, each a 32-dimensional manifold around its centre,
all offset along one shared direction (a cone, as CLIP's are), plus isotropic noise, normalised;
photo-like payload on every point,
with `camera_terms` taking 10 values (a filtered query keeps 10 %). Queries are fresh points from
the same distribution; recall@10 is against exact search (numpy brute force, same filter). Beside
the camera filter: a folder (one year of 15: 6.7 %) and a date range (10 % of the points).

Each (backend, size) runs in two fresh processes, so each figure is measured alone:
  build:  upsert in batches of 256 (the ingest pipeline's write batch), then optimize (edge: merge
          segments + build HNSW; local mode has nothing to build); points/s with and without it.
  query:  reopen (open + first query, in a fresh process), RSS the store added, top-10 and filtered
          top-10 latency p50/p99 and recall@10, disk size.
  upkeep: (--phases build,query,upkeep) what a watch does to the built store: one changed file's
          point written until a search finds it, the optimize after it; a batch of 2,000 files'
          points and the optimize after that; segments and search latency after.

A backend "edge+scalar" or "edge+binary" is the embedded store with the vectors quantized (int8 or
one bit a dimension). edge+scalar is SEARCH_STORE_QUANTIZATION=scalar, whose searches rescore 2x the
hits asked with the original vectors (before 2026-12-05's second 300k run: the engine's default,
the quantized top-k rescored); edge+binary the engine's default. Both then with 2x and 4x as many
candidates rescored (oversampling).

    python bench/bench_store.py --sizes 10000,100000 --backends edge,local [--workdir DIR] [--json FILE]
    python bench/bench_store.py --sizes 300000 --backends edge,edge+scalar,edge+binary   # quantization
    SEARCH_TEST_MODELS=DIR python bench/bench_store.py --sizes 100000 --backends edge --kind real --workdir W
    python bench/bench_store.py --report FILE          # print the table of recorded results

Run it under the exclusive CPU lock (flock -x /tmp/cpu.lock ...). Local mode is slow at 300k
(~15 min to upsert): --local-queries keeps its query count small.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from qdrant_client import models  # noqa: E402

from bench.common import DIM, SEED, pid, sample  # noqa: E402
from bench.store_data import CHUNK, KINDS, OVERSAMPLING, dataset, filters, point, query_vectors, unit  # noqa: E402
from bench.store_report import report  # noqa: E402
from search import owner  # noqa: E402
from search.store import documents_schema, image_vector, images_schema, open_location  # noqa: E402
from search.store.util import disk_usage  # noqa: E402
from search.triton.local import free_port  # noqa: E402

BATCH = 256


def rss_mb(field: str = "VmRSS") -> float:
    """The process's resident memory (VmRSS), or its anonymous part (RssAnon: not the store's
    memory-mapped files, which the kernel can drop)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class AnonPeak:
    """The largest RssAnon seen, sampled twice a second on a thread while the block runs."""

    def __enter__(self):
        import threading  # noqa: PLC0415

        self.peak, self._stop = rss_mb("RssAnon"), threading.Event()

        def sample():
            while not self._stop.wait(0.5):
                self.peak = max(self.peak, rss_mb("RssAnon"))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb("RssAnon"))


def store_dir(workdir: Path, backend: str, n: int, kind: str = "photos") -> Path:
    return workdir / (f"{backend}-{n}" if kind == "photos" else f"{backend}-{kind}-{n}")


BINARY = models.BinaryQuantization(binary=models.BinaryQuantizationConfig())



def open_store(backend: str, path: Path):
    """``backend`` is edge, local or edge+<quantization>; edge+scalar is SEARCH_STORE_QUANTIZATION=scalar
    (its searches rescored as the product's are), edge+binary this bench's own schema."""
    base, _, quant = backend.partition("+")
    return open_location(base, str(path), quantization="scalar" if quant == "scalar" else None)


def ensure(store, kind: str, backend: str = "edge") -> None:
    schema = images_schema({image_vector(): DIM}) if kind == "photos" else documents_schema()  # what MiniLM alone creates
    if backend.partition("+")[2] == "binary":
        schema = replace(schema, vectors={name: p.model_copy(update={"quantization_config": BINARY})
                                          for name, p in schema.vectors.items()})
    store.ensure(schema)


def disk_parts(path: Path) -> dict[str, float]:
    """MB on disk by part (a segment's vector_storage-<name>, vector_index-<name>, payload_index, ...,
    summed over segments; the write-ahead log)."""
    parts: dict[str, float] = {}
    for seg in path.glob("*/segments/*"):
        for part in seg.iterdir():
            parts[part.name] = parts.get(part.name, 0.0) + disk_usage(part) / 2**20
    for wal in path.glob("*/wal"):
        parts["wal"] = parts.get("wal", 0.0) + disk_usage(wal) / 2**20
    return {k: round(v, 1) for k, v in sorted(parts.items()) if v >= 0.1}


def build(backend: str, n: int, workdir: Path, kind: str = "photos") -> dict:
    path = store_dir(workdir, backend, n, kind)
    shutil.rmtree(path, ignore_errors=True)
    data = dataset(n, kind, workdir)
    collection = KINDS[kind][0]
    store = open_store(backend, path)
    ensure(store, kind, backend)
    spent = 0.0
    for start in range(0, n, BATCH):
        points = [point(i, data[i], kind) for i in range(start, min(n, start + BATCH))]
        t = time.perf_counter()
        store.upsert(collection, points)
        spent += time.perf_counter() - t
    data_mb = data.nbytes / 2**20
    del data  # the bench's own copy: not the store's memory
    t, cpu = time.perf_counter(), time.process_time()
    with AnonPeak() as peak:
        store.optimize(collection)
    optimize, optimize_cpu = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    store.close()
    close = time.perf_counter() - t
    return {"upsert_pts_s": n / spent, "upsert_s": spent, "optimize_s": optimize, "close_s": close,
            "optimize_cpu_s": optimize_cpu, "optimize_cores_used": optimize_cpu / max(optimize, 1e-9),
            "ingest_pts_s": n / (spent + optimize + close), "peak_rss_build_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_anon_optimize_mb": peak.peak, "bench_data_mb": data_mb}


def exact_top(data: np.ndarray, queries: np.ndarray, keep: np.ndarray | None, k: int = 10) -> list[list[int]]:
    out = []
    for q in queries:
        s = data @ q
        if keep is not None:
            s = np.where(keep, s, -np.inf)
        top = np.argpartition(-s, k)[:k]
        out.append(top[np.argsort(-s[top])].tolist())
    return out


def latencies(store, collection: str, vector: str, queries: np.ndarray, flt=None, want=None, ids=None, params=None) -> dict:
    lat, hits = [], 0
    for k, q in enumerate(queries):
        t = time.perf_counter()
        res = store.search(collection, vector, q.tolist(), limit=10, query_filter=flt, params=params)
        lat.append(time.perf_counter() - t)
        if want is not None:
            hits += len({ids[p.id] for p in res} & set(want[k]))
    ms = np.array(lat) * 1000
    out = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}
    if want is not None:
        out["recall"] = hits / (10 * len(want))
    return out


def query(backend: str, n: int, workdir: Path, n_queries: int, kind: str = "photos") -> dict:
    path = store_dir(workdir, backend, n, kind)
    collection, vector, width = KINDS[kind]
    data = dataset(n, kind, workdir)
    queries = query_vectors(n_queries, kind, n, workdir)
    ids = {pid(i): i for i in range(n)}
    before, before_anon = rss_mb(), rss_mb("RssAnon")
    t = time.perf_counter()
    store = open_store(backend, path)
    store.search(collection, vector, queries[0].tolist(), limit=10)
    reopen = time.perf_counter() - t
    result = {"reopen_s": reopen, "points": store.count(collection),
              "hnsw_ef": store.search_params(collection, 10, None).hnsw_ef}
    plain = latencies(store, collection, vector, queries, None, exact_top(data, queries, None), ids)
    result["top10_p50_ms"], result["top10_p99_ms"], result["recall"] = plain["p50_ms"], plain["p99_ms"], plain["recall"]
    if "+" in backend:  # quantized: the rescored candidates oversampled, as a caller would have to ask
        ef = store.search_params(collection, 10, None)
        for over in OVERSAMPLING:
            params = ef.model_copy(update={"quantization": models.QuantizationSearchParams(rescore=True, oversampling=over)})
            got = latencies(store, collection, vector, queries, None, exact_top(data, queries, None), ids, params)
            result[f"oversampling{over:g}_top10_p50_ms"], result[f"oversampling{over:g}_top10_p99_ms"] = got["p50_ms"], got["p99_ms"]
            result[f"oversampling{over:g}_recall"] = got["recall"]
    for name, (flt, keep) in filters(kind, n).items():
        got = latencies(store, collection, vector, queries, flt, exact_top(data, queries, keep), ids)
        prefix = "filtered" if name == "camera" else f"{name}_filtered"  # "filtered": the camera filter, as before
        result[f"{prefix}_p50_ms"], result[f"{prefix}_p99_ms"], result[f"{prefix}_recall"] = got["p50_ms"], got["p99_ms"], got["recall"]
    if kind != "photos":  # per-document results (8 passages a file): the first page, and past the first 100
        for offset in (0, 100):
            lat = []
            for q in queries[:100]:
                t = time.perf_counter()
                store.search_groups(collection, vector, q.tolist(), group_by="sha256", limit=10, offset=offset)
                lat.append(time.perf_counter() - t)
            result[f"grouped_offset{offset}_p50_ms"] = float(np.percentile(np.array(lat) * 1000, 50))
            result[f"grouped_offset{offset}_p99_ms"] = float(np.percentile(np.array(lat) * 1000, 99))
    result["queries"] = n_queries
    result["rss_mb"] = rss_mb() - before
    result["anon_mb"] = rss_mb("RssAnon") - before_anon
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = store.stats(collection)
    result["segments"], result["status"] = stats.segments, stats.status
    store.close()
    result["disk_mb"] = disk_usage(path) / 2**20
    if backend.startswith("edge"):
        result["disk_mb_by_part"] = disk_parts(path)
    return result


def upkeep(backend: str, n: int, workdir: Path, n_queries: int, kind: str = "photos") -> dict:
    """What a watch does to a built store of n points: one changed file, then a batch of 2,000."""
    path = store_dir(workdir, backend, n, kind)
    collection, vector, width = KINDS[kind]
    store = open_store(backend, path)
    queries = unit(sample(n_queries, SEED + 999)[:, :width])
    fresh = unit(sample(CHUNK, SEED + 5000)[:, :width])  # not in the dataset: new files' points
    out = {"segments_before": store.stats(collection).segments}
    t = time.perf_counter()
    store.upsert(collection, [point(n, fresh[0], kind)])  # one new file
    while not any(p.id == pid(n) for p in store.search(collection, vector, fresh[0].tolist(), limit=1)):
        time.sleep(0.01)
    out["one_change_searchable_s"] = time.perf_counter() - t
    t = time.perf_counter()
    store.optimize(collection)
    out["optimize_after_one_s"] = time.perf_counter() - t
    out["segments_after_one"] = store.stats(collection).segments
    t = time.perf_counter()
    for start in range(0, 2000, BATCH):
        store.upsert(collection, [point(n + 1 + i, fresh[1 + i], kind) for i in range(start, min(2000, start + BATCH))])
    out["batch_2000_upsert_s"] = time.perf_counter() - t
    searched = latencies(store, collection, vector, queries)
    out["before_optimize_p50_ms"], out["before_optimize_p99_ms"] = searched["p50_ms"], searched["p99_ms"]
    t = time.perf_counter()
    store.optimize(collection)
    out["optimize_after_2000_s"] = time.perf_counter() - t
    stats = store.stats(collection)
    out["segments_after_2000"], out["status_after"] = stats.segments, stats.status
    searched = latencies(store, collection, vector, queries)
    out["after_optimize_p50_ms"], out["after_optimize_p99_ms"] = searched["p50_ms"], searched["p99_ms"]
    store.close()
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


FACES = {"search_status": ["-m", "search", "status", "--json"], "store_stats": ["-m", "search", "store", "stats", "--json"],
         "indexer_jobs": ["-m", "indexer", "jobs"]}


def faces(backend: str, n: int, workdir: Path, n_queries: int, kind: str = "photos") -> dict:
    """The status commands on the built store, each in a fresh process as a user runs them, against
    the same process's start alone (`search --help`): seconds, best of three. Then the same commands
    while a `search serve` holds the store open (they ask it: `<name>_served_s`), and that server's
    start until it owns the store (`serve_start_s`)."""
    data = workdir / "faces-data"
    env = {**os.environ, "SEARCH_DATA_DIR": str(data), "SEARCH_QDRANT_PATH": str(store_dir(workdir, backend, n, kind)),
           "SEARCH_STORE": backend, "SEARCH_TRITON_URL": "127.0.0.1:1", "HF_HUB_OFFLINE": "1"}
    out = {"process_start_s": timed(["-m", "search", "--help"], env)}
    out.update({f"{name}_s": timed(argv, env) for name, argv in FACES.items()})
    t = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "search", "serve", "--host", "127.0.0.1", "--port", str(free_port())],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while owner.find(data) is None:
            if server.poll() is not None or time.perf_counter() - t > 600:
                raise RuntimeError(f"search serve did not start: {server.stderr.read()[-500:]}")
            time.sleep(0.05)
        out["serve_start_s"] = time.perf_counter() - t
        out.update({f"{name}_served_s": timed(argv, env) for name, argv in FACES.items()})
    finally:
        server.terminate()
        server.wait(timeout=60)
    return out


def timed(argv: list[str], env: dict) -> float:
    """Seconds of a command in a fresh process, best of three."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=600)
        best = min(best, time.perf_counter() - t)
        if done.returncode not in (0, 1):  # status exits 1 while Triton is down; the store's part is measured
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr[-500:]}")
    return best


def child(args) -> None:
    if args.phase == "build":
        out = build(args.backend, args.size, Path(args.workdir), args.kind)
    else:
        out = {"query": query, "upkeep": upkeep, "faces": faces}[args.phase](args.backend, args.size, Path(args.workdir), args.n_queries, args.kind)
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,300000")
    ap.add_argument("--backends", default="edge,local")
    ap.add_argument("--phases", default="build,query", help="build,query[,upkeep][,faces]")
    ap.add_argument("--kind", default="photos", choices=sorted(KINDS), help="the collection's schema and payloads")
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
                row = {"backend": backend, "n": n, "kind": args.kind, "machine": machine_line(), "load_start": loadavg(),
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                for phase in args.phases.split(","):
                    nq = args.local_queries if backend == "local" else args.queries
                    cmd = [sys.executable, __file__, "--phase", phase, "--backend", backend, "--size", str(n),
                           "--workdir", str(workdir), "--n-queries", str(nq), "--kind", args.kind]
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
                    shutil.rmtree(store_dir(workdir, backend, n, args.kind), ignore_errors=True)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    report(rows)
    if rows:  # one line for the run, its rows by backend and size (edge_1000000.top10_p50_ms)
        keys = ("backend", "n") if args.kind == "photos" else ("backend", "kind", "n")
        record("bench_store", {"phases": args.phases, "kind": args.kind, "queries": args.queries,
                               "local_queries": args.local_queries, **keyed(rows, *keys)}, load_before=load_before)


if __name__ == "__main__":
    main()
