"""MiniLM throughput: Triton `minilm` over gRPC vs in-process onnxruntime (same ONNX file) vs
in-process sentence-transformers, and the ingest rate of `indexer ingest`, in one run.

    python bench/bench_minilm.py [--quick]

Needs `search models build` first. Starts its own Triton on free ports. Sentences come from
../shared/data/stsb (real STS-B sentences) when present, else from samples/docs.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM, built_triton_models, minilm  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

SHARED = PROJECT_ROOT.parent / "shared" / "data"


def load_sentences(n: int) -> list[str]:
    stsb = SHARED / "stsb" / "dev.tsv"
    out: list[str] = []
    if stsb.exists():
        for line in stsb.read_text().splitlines()[1:]:
            cols = line.rstrip("\r").split("\t")  # split genre dataset year sid score sentence1 sentence2
            if len(cols) >= 8:
                out += [cols[6], cols[7]]
    else:
        for f in sorted((PROJECT_ROOT / "samples" / "docs").iterdir()):
            out += [s.strip() for s in f.read_text().replace("\n", " ").split(". ") if s.strip()]
    return (out * (n // max(len(out), 1) + 1))[:n]


def rate(fn, batches: list[list[str]], concurrency: int = 1) -> float:
    """Sentences per second for running fn over every batch with `concurrency` threads."""
    fn(batches[0])  # warm-up
    n = sum(len(b) for b in batches)
    start = time.perf_counter()
    if concurrency == 1:
        for b in batches:
            fn(b)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(fn, batches))
    return n / (time.perf_counter() - start)


def chunks(xs: list[str], size: int) -> list[list[str]]:
    return [xs[i:i + size] for i in range(0, len(xs), size)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sentences (a smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    settings = Settings()
    repo = settings.triton_repo
    if not MiniLM().is_built(repo):
        sys.exit("build the model first: search models build")
    n32, n1 = (256, 64) if args.quick else (2048, 256)
    sentences = load_sentences(n32)

    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MiniLM().tokenizer_path(repo)))
    tok.no_padding()
    tok.enable_truncation(minilm.MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    sess = ort.InferenceSession(str(repo / "minilm_onnx/1/model.onnx"), providers=["CPUExecutionProvider"])

    def ort_embed(batch: list[str]) -> np.ndarray:
        enc = tok.encode_batch(batch)
        feed = {"input_ids": np.array([e.ids for e in enc], np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}
        return sess.run(None, feed)[0]

    st = SentenceTransformer(str(minilm.package_weights()), device="cpu")

    def st_embed(batch: list[str]) -> np.ndarray:
        return st.encode(batch, batch_size=len(batch), normalize_embeddings=True)

    results: dict = {"machine": machine(), "sentences": n32, "rows": []}
    run_dir = Path(tempfile.mkdtemp(prefix="bench-triton-"))
    server = LocalTriton(repo, run_dir, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                         models=built_triton_models(repo)).start()
    try:
        url = f"127.0.0.1:{server.grpc_port}"
        clients = {}

        def served(batch: list[str]) -> np.ndarray:
            import threading

            c = clients.setdefault(threading.get_ident(), TritonClient(url))
            return minilm.embed(c, batch)[0]

        rows = results["rows"]
        for per_req, n in ((1, n1), (32, n32)):
            batches = chunks(sentences[:n], per_req)
            rows.append(("in-process onnxruntime", per_req, 1, rate(ort_embed, batches)))
            rows.append(("in-process sentence-transformers", per_req, 1, rate(st_embed, batches)))
            for conc in (1, 8, 32):
                rows.append(("Triton minilm (gRPC)", per_req, conc, rate(served, batches, conc)))
        ingest = measure_ingest(settings, url, quick=args.quick, ort_embed=ort_embed)
        results["ingest"] = ingest
    finally:
        server.stop()
        shutil.rmtree(run_dir, ignore_errors=True)

    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def measure_ingest(settings: Settings, url: str, quick: bool, ort_embed) -> dict:
    """`indexer ingest` end to end on MS MARCO passages written as .txt files, fresh store."""
    corpus = SHARED / "beir-msmarco-mini" / "corpus.jsonl"
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    docs = tmp / "docs"
    docs.mkdir()
    n_files = 300 if quick else 2000
    if corpus.exists():
        with corpus.open() as f:
            for _, line in zip(range(n_files), f):
                d = json.loads(line)
                (docs / f"{d['_id']}.txt").write_text(f"{d.get('title', '')}\n\n{d['text']}")
    else:
        for i, s in enumerate(load_sentences(n_files)):
            (docs / f"{i}.txt").write_text(s)
    s = settings.model_copy(update={"data_dir": tmp / "data", "triton_url": url, "qdrant_url": None})
    svc = SearchService(s)
    try:
        start = time.perf_counter()
        rep = IngestService(svc.settings, svc.resources).ingest([docs])
        seconds = time.perf_counter() - start
        again = time.perf_counter()
        IngestService(svc.settings, svc.resources).ingest([docs])
        rerun = time.perf_counter() - again
        texts = [p.payload["text"] for p in svc.store.scroll("documents", limit=100_000, with_payload=["text"])[0]]
    finally:
        svc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    # Baseline: the same chunks through in-process onnxruntime, batched and length-sorted like ingest.
    window = s.embed_batch_size * 4
    ordered = [t for i in range(0, len(texts), window) for t in sorted(texts[i:i + window], key=len)]
    raw = rate(ort_embed, chunks(ordered, s.embed_batch_size))
    return {"files": n_files, "chunks": rep.embedded_chunks, "seconds": round(seconds, 2),
            "chunks_per_s": round(rep.embedded_chunks / seconds, 1), "files_per_s": round(n_files / seconds, 1),
            "unchanged_rerun_s": round(rerun, 2), "inprocess_ort_chunks_per_s": round(raw, 1),
            "batch_size": s.embed_batch_size, "concurrency": s.embed_concurrency}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, no GPU"


def report(results: dict) -> None:
    rows = results["rows"]
    print(f"machine: {results['machine']}")
    print(f"{'path':36} {'sent/req':>8} {'clients':>7} {'sent/s':>9}")
    for name, per_req, conc, r in rows:
        print(f"{name:36} {per_req:>8} {conc:>7} {r:>9.1f}")
    for per_req in (1, 32):
        ort_r = next(r for n, p, c, r in rows if n.startswith("in-process onnx") and p == per_req)
        st_r = next(r for n, p, c, r in rows if n.startswith("in-process sentence") and p == per_req)
        served = [(c, r) for n, p, c, r in rows if n.startswith("Triton") and p == per_req]
        best_c, best = max(served, key=lambda x: x[1])
        single = next(r for c, r in served if c == 1)
        print(f"{per_req} sent/req: served (1 client) / onnxruntime = {single / ort_r:.2f}x, "
              f"best served ({best_c} clients) / onnxruntime = {best / ort_r:.2f}x, "
              f"best served / sentence-transformers = {best / st_r:.2f}x")
    ing = results["ingest"]
    print(f"ingest: {ing['files']} files, {ing['chunks']} chunks in {ing['seconds']} s = {ing['chunks_per_s']} chunks/s "
          f"({ing['files_per_s']} files/s; batch {ing['batch_size']}, {ing['concurrency']} in flight); "
          f"unchanged re-run {ing['unchanged_rerun_s']} s")
    print(f"ingest / in-process onnxruntime on the same chunks ({ing['inprocess_ort_chunks_per_s']} chunks/s) = "
          f"{ing['chunks_per_s'] / ing['inprocess_ort_chunks_per_s']:.2f}x")


if __name__ == "__main__":
    main()
