"""An ingest and queries on an overloaded machine (issue 69): `search serve` (a real uvicorn in a
subprocess) ingests a folder of documents as a REST job while query clients search it for a while,
once on a quiet machine and once with busy processes (Python CPU burners this bench starts) on its
cores. What an overloaded machine may cost is time, never work:

- jobs failed (the ingest job's state), files missing and points missing or twice in the store
  (counted per file after the run: every chunk of every file once),
- queries failed (any answer but 200, or none within 120 s), by cause,
- the ingest's files/s, the queries' p50/p99, and how often the job paused waiting for Triton.

    python bench/bench_overload.py [--files 2000] [--clients 32] [--seconds 60] [--burners 8]
                                   [--repo TRITON_REPO] [--quick] [--json FILE]

Needs MiniLM built (`search models build`). Starts its own Triton on free ports; documents are
synthetic notes of a few paragraphs; samples/docs is indexed first, so searches have something to
find from the start. Appends its run to bench/results/bench_overload.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import busy, fmt_load, load, machine_line, record, start_api  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM  # noqa: E402
from search.store import DOCUMENTS, open_store  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

QUERIES = [q["query"] for q in json.loads((PROJECT_ROOT / "samples" / "queries.json").read_text())]
TOPICS = ["printer toner", "VPN profile", "badge reader", "password reset", "laptop docking station", "meeting room booking",
          "phishing report", "backup restore", "monitor cable", "expense claim"]
QUERY_TIMEOUT_S = 120.0
JOB_LIMIT_S = 3600.0


def library(folder: Path, n: int) -> Path:
    """``n`` notes of two or three paragraphs (one to three chunks each)."""
    for i in range(n):
        sub = folder / f"{i // 200:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [f"Note {i} about the {topic} on floor {i % 9}. " * (3 + i % 5),
                      f"Ask the help desk (ticket {i * 7919 % 10007}) before day {i % 28 + 1}; the {topic} is shared. " * (2 + i % 7),
                      *([f"Appendix {i}: steps for the {TOPICS[(i + 3) % len(TOPICS)]}. " * 12] if i % 3 == 0 else [])]
        (sub / f"note-{i:05d}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(paragraphs) + "\n")
    return folder


async def _queries(base: str, clients: int, seconds: float) -> tuple[list[float], Counter]:
    """``clients`` searching for ``seconds``: the latencies of the answered ones, the failures by cause."""
    latencies: list[float] = []
    failed: Counter = Counter()
    end = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=base, timeout=QUERY_TIMEOUT_S,
                                 limits=httpx.Limits(max_connections=clients)) as client:

        async def worker(w: int) -> None:
            i = w
            while time.monotonic() < end:
                start = time.perf_counter()
                try:
                    r = await client.post("/search/documents", json={"query": QUERIES[i % len(QUERIES)]})
                except httpx.HTTPError as exc:
                    failed[type(exc).__name__] += 1
                else:
                    if r.status_code == 200:
                        latencies.append(time.perf_counter() - start)
                    else:
                        failed[str(r.status_code)] += 1
                i += clients

        await asyncio.gather(*(worker(w) for w in range(clients)))
    return latencies, failed


def _job(base: str, job_id: str, seen_waiting: list[str]) -> dict:
    job = httpx.get(f"{base}/ingest/jobs/{job_id}", timeout=60).json()
    if job.get("waiting") and (not seen_waiting or seen_waiting[-1] != job["waiting"]):
        seen_waiting.append(job["waiting"])
    return job


def _wait_job(base: str, job_id: str, seen_waiting: list[str], limit_s: float = JOB_LIMIT_S) -> dict:
    deadline = time.monotonic() + limit_s
    while (job := _job(base, job_id, seen_waiting))["state"] not in ("done", "failed", "cancelled"):
        if time.monotonic() > deadline:
            return job
        time.sleep(0.5)
    return job


def store_check(settings: Settings, files: list[Path]) -> dict:
    """Every file's chunks in the store once: files missing, points missing (chunks short of the
    file's n_chunks) and points twice (a file's chunk on more than one point)."""
    store = open_store(settings)
    try:
        chunks: dict[str, Counter] = {}
        n_chunks: dict[str, int] = {}
        for p in store.all_points(DOCUMENTS.name):
            path = p.payload["path"]
            chunks.setdefault(path, Counter())[p.payload["chunk"]] += 1
            n_chunks[path] = p.payload["n_chunks"]
    finally:
        store.close()
    wanted = [str(f) for f in files]
    return {"files_missing": sum(f not in chunks for f in wanted),
            "points_missing": sum(n_chunks[f] - len(chunks[f]) for f in wanted if f in chunks),
            "points_duplicated": sum(n - 1 for f in wanted if f in chunks for n in chunks[f].values() if n > 1),
            "points": sum(sum(c.values()) for f, c in chunks.items() if f in set(wanted))}


def phase(name: str, repo: Path, tmp: Path, lib: Path, files: list[Path], *, clients: int, seconds: float,
          burners: int) -> dict:
    """One run: a fresh data dir and Triton; samples/docs indexed; then, with ``burners`` busy
    processes, the library's ingest job and ``clients`` searching for ``seconds``."""
    work = tmp / name
    with LocalTriton(repo, work / "triton", models=list(MiniLM().triton_models)).start(timeout=300) as server:
        settings = Settings(data_dir=work / "data", triton_repo=repo, triton_url=f"127.0.0.1:{server.grpc_port}",
                            search_mode="semantic", qdrant_url=None)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        api = start_api(settings, port, work / "api.log",
                        SEARCH_API_ROOTS=json.dumps([str(lib), str(PROJECT_ROOT / "samples" / "docs")]))
        try:
            seen: list[str] = []
            seed = httpx.post(f"{base}/ingest", json={"paths": [str(PROJECT_ROOT / "samples" / "docs")]}, timeout=60).json()
            seeded = _wait_job(base, seed["job_id"], seen)
            load_before = load()
            with busy(burners):
                started = time.monotonic()
                job_id = httpx.post(f"{base}/ingest", json={"paths": [str(lib)]}, timeout=60).json()["job_id"]

                async def queries_and_job() -> tuple[list[float], Counter]:
                    async def follow() -> None:
                        while (await asyncio.to_thread(_job, base, job_id, seen))["state"] == "running":
                            await asyncio.sleep(1)

                    follower = asyncio.create_task(follow())
                    got = await _queries(base, clients, seconds)
                    follower.cancel()
                    return got

                latencies, failed = asyncio.run(queries_and_job())
                job = _wait_job(base, job_id, seen)
                job_s = time.monotonic() - started
                load_during = load()
        finally:
            api.terminate()
            api.wait(timeout=120)
    stored = store_check(settings, files)
    lat = sorted(latencies)
    row = {"phase": name, "burners": burners, "load_before": load_before, "load_end": load_during,
           "seed_job": seeded["state"], "job_state": job["state"], "job_error": job.get("error"),
           "jobs_failed": int(job["state"] != "done") + int(seeded["state"] != "done"),
           "files": len(files), "files_done": job.get("files_done"), "job_seconds": round(job_s, 1),
           "ingest_files_per_s": round(len(files) / job_s, 2) if job["state"] == "done" else None,
           "job_waits": seen, **stored,
           "queries": len(lat) + sum(failed.values()), "queries_failed": sum(failed.values()), "query_failures": dict(failed),
           "query_p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
           "query_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1) if lat else None}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the clients search (from the ingest's start)")
    ap.add_argument("--burners", type=int, default=8, help="busy processes in the loaded phase")
    ap.add_argument("--repo", type=Path, help="Triton model repository [default: the setting triton_repo]")
    ap.add_argument("--quick", action="store_true", help="200 files, 8 clients, 15 s (a smoke run; not for the record)")
    ap.add_argument("--json", type=Path, help="also write the results to this file")
    args = ap.parse_args()
    if args.quick:
        args.files, args.clients, args.seconds = 200, 8, 15.0
    repo = (args.repo or Settings().triton_repo).resolve()
    if not MiniLM().is_built(repo):
        sys.exit(f"build the model first: search models build (no MiniLM in {repo})")
    load_before = load()
    print(f"{machine_line()}; load {fmt_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-overload-") as tmp_:
        tmp = Path(tmp_)
        lib = library(tmp / "lib", args.files)
        files = sorted(lib.rglob("*.md"))
        rows = {name: phase(name, repo, tmp, lib, files, clients=args.clients, seconds=args.seconds, burners=n)
                for name, n in (("quiet", 0), ("loaded", args.burners))}
    results = {"machine": machine_line(), "files": args.files, "clients": args.clients, "query_seconds": args.seconds,
               "burners": args.burners, **rows,
               "ok": all(r["jobs_failed"] == 0 and r["files_missing"] == r["points_missing"] == r["points_duplicated"] == 0
                         and r["queries_failed"] == 0 for r in rows.values())}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("bench_overload", results, load_before=load_before, quick=args.quick)


if __name__ == "__main__":
    main()
