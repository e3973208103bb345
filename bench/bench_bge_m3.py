"""BGE-M3 (issue 4): tokens/s through the Triton `bge_m3` ensemble versus in-process onnxruntime on
the same ONNX file, for documents of 128, 512 and 2048 tokens, and hybrid query latency, in one run.

    python bench/bench_bge_m3.py [--layers N] [--quick] [--json FILE]

Real BGE-M3 weights cannot be had offline, so this builds a randomly initialised XLM-RoBERTa of
BGE-M3's size (xlm-roberta-large: 250,002-token embedding table, 1024 hidden, 24 layers, 16 heads,
4096 intermediate, 8194 positions; ~568M parameters, ~2.3 GB fp32) with random sparse and ColBERT
heads, and exports it with the project's own `BGEM3().build`: the costs are real, the vectors
meaningless. The tokenizer is a SentencePiece-style Unigram vocabulary (~8,000 pieces, XLM-R's
special tokens at ids 0-3) trained here on MS MARCO passages (../shared/data/beir-msmarco-mini,
else samples/docs); documents are cut from the same real text so that each is exactly N tokens
*including* <s> and </s> (the sequence length the encoder runs on).

The exported model repository (BGE-M3 and MiniLM in a copy of triton_repo/) is cached under
.data/bench/bge_m3-L<layers>/ so a re-run skips the export; --rebuild forces it.

In one run:
- per length: docs/s and tokens/s of `bge_m3.encode(client, docs, colbert=True, max_length=N)`
  through Triton (tokenize -> ONNX -> post, gRPC) versus `InferenceSession.run` in this process on
  the same bge_m3_onnx/1/model.onnx, same tokenization (`export.bge_m3.tokenize`), same batches; one
  warm-up batch per path and length first, then the two paths alternate batch by batch (so load
  from other work on a shared machine falls on both alike);
- query latency p50/p99 of `SearchService.search_documents(q, top_k=5, mode=m)` for the modes
  semantic (MiniLM), dense, sparse and hybrid over samples/queries.json, after ingesting samples/docs;
- hybrid searches from 8 threads at once: as served (the queries that wait on the one in flight
  share a bge_m3 request) against one bge_m3 request per query, taking turns (2 rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import numpy as np  # noqa: E402

from bench.common import keyed, load, machine_line, record, save_random_bge_m3  # noqa: E402
from bench.timing import take_turns  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import BGEM3, MiniLM, bge_m3  # noqa: E402
from search.models.export.bge_m3 import tokenize  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

SHARED = PROJECT_ROOT.parent / "shared" / "data"
CACHE = PROJECT_ROOT / ".data" / "bench"
LENGTHS = (128, 512, 2048)
MODES = ("semantic", "dense", "sparse", "hybrid")
# (docs per batch, batches) per length: full run sized for ~15 minutes on 2 cores at 24 layers.
PLAN = {128: (8, 4), 512: (4, 4), 2048: (1, 4)}
PLAN_QUICK = {128: (4, 1), 512: (2, 1), 2048: (1, 1)}


# -- text
def real_texts() -> list[str]:
    corpus = SHARED / "beir-msmarco-mini" / "corpus.jsonl"
    if corpus.exists():
        with corpus.open(encoding="utf-8") as f:
            return [" ".join(filter(None, (d.get("title"), d["text"]))) for d in map(json.loads, f)]
    return [p.read_text(encoding="utf-8") for p in sorted((PROJECT_ROOT / "samples" / "docs").rglob("*.md"))]


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model_repo(layers: int, texts: list[str], rebuild: bool) -> tuple[Path, dict]:
    """The cached model repository for `layers` (built on first use), and what the export took."""
    root = CACHE / f"bge_m3-L{layers}"
    repo = root / "triton_repo"
    info_file = root / "export.json"
    if not rebuild and BGEM3().is_built(repo) and MiniLM().is_built(repo) and info_file.exists():
        info = json.loads(info_file.read_text())
        print(f"model repository cached at {repo} (exported earlier in {info['export_s']} s; --rebuild to redo)", flush=True)
        return repo, {**info, "cached": True}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(PROJECT_ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("clip*"))
    rep = MiniLM().build(repo, "package")
    assert rep.status in ("built", "up to date"), rep.detail
    weights = Path(tempfile.mkdtemp(prefix="bench-bge-m3-weights-"))
    try:
        print(f"saving a random {layers}-layer BGE-M3-sized model…", flush=True)
        start = time.perf_counter()
        save_random_bge_m3(weights, layers, texts)
        save_s = time.perf_counter() - start
        params_bytes = sum(p.stat().st_size for p in weights.glob("*.safetensors"))
        print(f"  saved in {save_s:.0f} s ({params_bytes / 1e9:.2f} GB of safetensors); exporting with BGEM3().build…",
              flush=True)
        start = time.perf_counter()
        try:
            rep = BGEM3().build(repo, str(weights), force=True)
        except Exception as exc:
            onnx_dir = repo / "bge_m3_onnx" / "1"
            leftovers = sorted(p.name for p in onnx_dir.iterdir()) if onnx_dir.exists() else []
            print(f"EXPORT FAILED after {time.perf_counter() - start:.0f} s: {type(exc).__name__}: {exc}", flush=True)
            print(f"  files left in bge_m3_onnx/1: {len(leftovers)} {leftovers[:8]}", flush=True)
            raise
        export_s = time.perf_counter() - start
        assert rep.status == "built", rep.detail
        print(f"  {rep.status} in {export_s:.0f} s: {rep.detail}", flush=True)
    finally:
        shutil.rmtree(weights, ignore_errors=True)
    onnx_dir = repo / "bge_m3_onnx" / "1"
    files = sorted(p.name for p in onnx_dir.iterdir())
    info = {"layers": layers, "save_s": round(save_s, 1), "export_s": round(export_s, 1),
            "weights_bytes": params_bytes, "onnx_dir_bytes": dir_bytes(onnx_dir),
            "model_onnx_bytes": (onnx_dir / "model.onnx").stat().st_size, "onnx_files": len(files),
            "onnx_file_names": files[:10], "detail": rep.detail}
    info_file.write_text(json.dumps(info, indent=2))
    return repo, {**info, "cached": False}


# -- documents of exactly n tokens
def make_docs(tok, texts: list[str], n: int, count: int, skip: int = 0) -> list[str]:
    """`count` consecutive windows of the real text, each exactly n tokens with <s> and </s>."""
    big = " ".join(texts)
    enc = tok.encode(big, add_special_tokens=False)
    offsets = enc.offsets
    body = n - 2
    docs, start = [], skip
    while len(docs) < count:
        if start + body + 64 >= len(offsets):
            raise SystemExit(f"not enough text for {count} documents of {n} tokens")
        end = start + body  # exclusive token index; the slice is re-tokenised and adjusted until exact
        for _ in range(12):
            text = big[offsets[start][0]:offsets[end - 1][1]].strip()
            got = len(tok.encode(text, add_special_tokens=True).ids)
            if got == n:
                docs.append(text)
                break
            end += n - got
        start = end + 1
    return docs


# -- throughput
def throughput(repo: Path, url: str, texts: list[str], plan: dict[int, tuple[int, int]]) -> list[dict]:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(repo / "bge_m3_tokenize/1/tokenizer.json"))
    text_cfg = json.loads((repo / "bge_m3_tokenize/1/text.json").read_text())
    client = TritonClient(url, timeout_s=3600)
    start = time.perf_counter()
    sess = ort.InferenceSession(str(repo / "bge_m3_onnx/1/model.onnx"), providers=["CPUExecutionProvider"])
    print(f"in-process onnxruntime session loaded in {time.perf_counter() - start:.1f} s", flush=True)

    def served(batch: list[str], n: int) -> None:
        outs = bge_m3.encode(client, batch, colbert=True, max_length=n)
        assert all(o.n_tokens == n and not o.truncated for o in outs), [(o.n_tokens, o.truncated) for o in outs]

    def inprocess(batch: list[str], n: int) -> None:
        ids, mask = tokenize(tok, text_cfg, batch, n)
        assert ids.shape == (len(batch), n) and mask.all(), ids.shape
        sess.run(None, {"input_ids": ids, "attention_mask": mask})  # noqa: F821  (the enclosing function deletes it last)

    rows = []
    skip = 0
    for n in LENGTHS:
        per_batch, batches = plan[n]
        docs = make_docs(tok, texts, n, per_batch * (batches + 1), skip)
        skip += 50  # each length starts its windows elsewhere in the text
        warm, timed = docs[:per_batch], [docs[(i + 1) * per_batch:(i + 2) * per_batch] for i in range(batches)]
        row = {"tokens": n, "docs_per_batch": per_batch, "batches": batches, "docs": per_batch * batches}
        paths = (("served", served), ("inprocess", inprocess))
        warm_s = {}
        for name, fn in paths:
            t = time.perf_counter()
            fn(warm, n)
            warm_s[name] = time.perf_counter() - t
        # The two paths alternate batch by batch, so background load on a shared machine hits both alike.
        secs = {name: 0.0 for name, _ in paths}
        for b in timed:
            for name, fn in paths:
                t = time.perf_counter()
                fn(b, n)
                secs[name] += time.perf_counter() - t
        for name, _ in paths:
            row[name] = {"seconds": round(secs[name], 2), "warmup_s": round(warm_s[name], 2),
                         "docs_per_s": round(row["docs"] / secs[name], 3),
                         "tokens_per_s": round(row["docs"] * n / secs[name], 1)}
            print(f"  {n:>5} tokens, {name:9}: {row['docs']} docs ({batches} x {per_batch}) in {secs[name]:.1f} s = "
                  f"{row[name]['tokens_per_s']:.1f} tokens/s (warm-up {warm_s[name]:.1f} s)", flush=True)
        row["ratio"] = round(row["served"]["tokens_per_s"] / row["inprocess"]["tokens_per_s"], 3)
        rows.append(row)
    del sess
    return rows


# -- hybrid query latency through the service layer
def query_latency(repo: Path, url: str, repeats: int, concurrent: int = 8) -> dict:
    from indexer.service import IngestService
    from search.services import SearchService

    tmp = Path(tempfile.mkdtemp(prefix="bench-bge-m3-data-"))
    queries = [q["query"] for q in json.loads((PROJECT_ROOT / "samples" / "queries.json").read_text())]
    settings = Settings(data_dir=tmp, triton_repo=repo, triton_url=url, qdrant_url=None, qdrant_path=None,
                        triton_timeout_s=3600)
    svc = SearchService(settings)
    out: dict = {"queries": len(queries), "repeats": repeats, "modes": {}}
    try:
        start = time.perf_counter()
        try:
            rep = IngestService(svc.settings, svc.resources).ingest([PROJECT_ROOT / "samples" / "docs"])
        except Exception as exc:  # report it and keep the throughput results
            out["error"] = f"ingest failed: {type(exc).__name__}: {str(exc)[:300]}"
            print(f"  {out['error']}", flush=True)
            return out
        out["ingest_s"] = round(time.perf_counter() - start, 1)
        out["points"] = svc.store.count("documents")
        out["with_bge_m3"] = svc.store.count_where("documents", "models", "bge_m3")
        out["ingest"] = {k: v for k, v in rep.as_dict().items() if isinstance(v, (int, float, str, dict))}
        print(f"ingested samples/docs in {out['ingest_s']} s: {out['points']} points, {out['with_bge_m3']} with BGE-M3 "
              "vectors", flush=True)
        for mode in MODES:
            try:
                svc.search_documents(queries[0], top_k=5, mode=mode)  # warm-up
                lat = []
                for _ in range(repeats):
                    for q in queries:
                        t = time.perf_counter()
                        svc.search_documents(q, top_k=5, mode=mode)
                        lat.append(time.perf_counter() - t)
                p50, p99 = (float(x) for x in np.percentile(lat, [50, 99]) * 1000)
                out["modes"][mode] = {"n": len(lat), "p50_ms": round(p50, 1), "p99_ms": round(p99, 1),
                                      "mean_ms": round(float(np.mean(lat)) * 1000, 1)}
                print(f"  {mode:8}: {len(lat)} queries, p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
            except Exception as exc:  # e.g. a mode still being implemented: keep going, report it
                out["modes"][mode] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(f"  {mode:8}: ERROR {type(exc).__name__}: {exc}", flush=True)
        if concurrent and "error" not in out["modes"].get("hybrid", {}):
            out["concurrent"] = coalesced_or_not(svc, queries, concurrent, rounds=2)
    finally:
        svc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def coalesced_or_not(svc, queries: list[str], clients: int, rounds: int) -> dict:
    """Hybrid searches from ``clients`` threads at once: as served (the queries that wait on the one in
    flight share a bge_m3 request, Resources.batchers["bge_m3"]) against one bge_m3 request per query,
    taking turns; queries/s and p50/p99 of each round, medians."""
    from concurrent.futures import ThreadPoolExecutor

    def one(q: str) -> float:
        t = time.perf_counter()
        svc.search_documents(q, top_k=5, mode="hybrid")
        return time.perf_counter() - t

    def run(r: int, way: str) -> dict:
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            lat = list(pool.map(one, queries * 2))
        wall = time.perf_counter() - start
        p50, p99 = (float(x) for x in np.percentile(lat, [50, 99]) * 1000)
        got = {"qps": round(len(lat) / wall, 2), "p50_ms": round(p50, 1), "p99_ms": round(p99, 1)}
        print(f"  hybrid, {clients} clients, round {r + 1}, {way}: {got}", flush=True)
        return got

    single = lambda q: bge_m3.encode(svc.triton, [q[0]], colbert=q[1])[0]  # noqa: E731
    runs, mean_batch = take_turns(svc, "bge_m3", single, rounds, run)
    med = {way: {k: float(np.median([x[k] for x in rows])) for k in ("qps", "p50_ms", "p99_ms")} | {"rounds": rows}
           for way, rows in runs.items()}
    return {"clients": clients, **med, "mean_batch": mean_batch}


def describe() -> dict:
    import onnxruntime
    import torch

    ram = "unknown"
    try:
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        ram = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return {"machine": machine_line(), "ram": ram, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "loadavg_start": os.getloadavg()}


def report(res: dict) -> None:
    d = res["describe"]
    print()
    print(f"machine: {d['machine']}, {d['ram']} RAM; onnxruntime {d['onnxruntime']}, torch {d['torch']}; "
          f"load average at start {tuple(round(x, 2) for x in d['loadavg_start'])}, "
          f"at end {tuple(round(x, 2) for x in res['loadavg_end'])}")
    ex = res["export"]
    print(f"model: random BGE-M3-sized XLM-RoBERTa, {ex['layers']} layers (24 = real size); ONNX "
          f"{ex['onnx_dir_bytes'] / 1e9:.2f} GB in {ex['onnx_files']} file(s) (model.onnx {ex['model_onnx_bytes'] / 1e6:.1f} MB); "
          f"export {ex['export_s']} s{' (cached)' if ex.get('cached') else ''}")
    if res["throughput"]:
        print_throughput(res["throughput"])
    lat = res.get("latency")
    if lat and lat.get("error"):
        print(f"query latency: {lat['error']}")
    elif lat:
        print(f"query latency (search_documents, top_k 5; {lat.get('points')} points from samples/docs, "
              f"{lat['queries']} queries x {lat['repeats']}):")
        print(f"{'mode':>9} {'n':>4} {'p50 ms':>8} {'p99 ms':>8}")
        for mode, m in lat["modes"].items():
            if "error" in m:
                print(f"{mode:>9}  error: {m['error']}")
            else:
                print(f"{mode:>9} {m['n']:>4} {m['p50_ms']:>8.1f} {m['p99_ms']:>8.1f}")
        if lat.get("concurrent"):
            c = lat["concurrent"]
            each, both = c["one request per query"], c["coalesced"]
            print(f"hybrid, {c['clients']} clients at once (medians of rounds): one bge_m3 request per query "
                  f"{each['qps']:.2f} q/s, p50 {each['p50_ms']:.0f} ms, p99 {each['p99_ms']:.0f} ms; coalesced "
                  f"(mean {c['mean_batch']} queries per request) {both['qps']:.2f} q/s, p50 {both['p50_ms']:.0f} ms, "
                  f"p99 {both['p99_ms']:.0f} ms: {both['qps'] / each['qps']:.2f}x the queries/s")
    print(f"wall time: {res['wall_s']:.0f} s")


def print_throughput(rows: list[dict]) -> None:
    print("tokens: per document, <s> and </s> included; served = bge_m3.encode(colbert=True) through Triton over gRPC, "
          "in-process = InferenceSession.run on the same ONNX file")
    print(f"{'tokens/doc':>10} {'docs':>5} {'batch':>5} {'served tok/s':>13} {'in-proc tok/s':>14} {'served docs/s':>14} "
          f"{'in-proc docs/s':>15} {'ratio':>6}")
    for r in rows:
        print(f"{r['tokens']:>10} {r['docs']:>5} {r['docs_per_batch']:>5} {r['served']['tokens_per_s']:>13.1f} "
              f"{r['inprocess']['tokens_per_s']:>14.1f} {r['served']['docs_per_s']:>14.3f} "
              f"{r['inprocess']['docs_per_s']:>15.3f} {r['ratio']:>5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, help="encoder layers (default 24, the real size; 2 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one timed batch per length, fewer query repeats (a smoke run)")
    ap.add_argument("--rebuild", action="store_true", help="export again even if the cached repository exists")
    ap.add_argument("--no-latency", action="store_true", help="skip the query-latency part")
    ap.add_argument("--no-throughput", action="store_true", help="skip the tokens/s part")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    load_before = load()
    layers = args.layers or (2 if args.quick else 24)
    plan = PLAN_QUICK if args.quick else PLAN
    wall = time.perf_counter()
    res: dict = {"describe": describe(), "plan": {str(k): v for k, v in plan.items()}}
    print(f"machine: {res['describe']['machine']}, {res['describe']['ram']} RAM, load average "
          f"{tuple(round(x, 2) for x in res['describe']['loadavg_start'])}", flush=True)
    print("plan (docs per batch, timed batches) per length: "
          + ", ".join(f"{n}: {plan[n][0]} x {plan[n][1]}" for n in LENGTHS), flush=True)
    texts = real_texts()
    repo, res["export"] = model_repo(layers, texts, args.rebuild)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-bge-m3-triton-"))
    models = [*BGEM3().triton_models, *MiniLM().triton_models]
    start = time.perf_counter()
    server = LocalTriton(repo, run_dir, models=models).start(timeout=900)
    print(f"Triton serving {', '.join(models)} (ready in {time.perf_counter() - start:.0f} s)", flush=True)
    try:
        url = f"127.0.0.1:{server.grpc_port}"
        res["throughput"] = [] if args.no_throughput else throughput(repo, url, texts, plan)
        if not args.no_latency:
            res["latency"] = query_latency(repo, url, repeats=1 if args.quick else 3)
    finally:
        server.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    res["loadavg_end"] = os.getloadavg()
    res["wall_s"] = round(time.perf_counter() - wall, 1)
    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    record("bench_bge_m3", {**res, "throughput": keyed(res["throughput"], "tokens")}, load_before=load_before, quick=args.quick)


if __name__ == "__main__":
    main()
