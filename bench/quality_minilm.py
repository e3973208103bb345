"""Quality check of the served MiniLM, fp32 and int8, against in-process sentence-transformers on
the same weights, in one run:

- STS-B dev (1,500 pairs): Spearman of the cosine similarity with the gold scores, x100;
- MS MARCO subset (50 queries over 5,000 passages, graded qrels): nDCG@10 of a dense search, x100.

    python bench/quality_minilm.py [--json FILE] [--no-int8]

Builds both precisions with the project's own `MiniLM().build` (int8 with allow_unmeasured: this
is the measurement) into temporary copies of triton_repo, serves each with its own Triton on free
ports, and reads ../shared/data (stsb, beir-msmarco-mini). int8 counts as measured when it stays
within INT8_TOLERANCE of fp32 (0.5 point STS-B, 1 point nDCG@10); the script prints the
`Int8Quality(...)` to record in search/models/minilm.py.
"""

from __future__ import annotations

import argparse
import json
import os
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
from scipy.stats import spearmanr  # noqa: E402

from bench.common import load, machine_line, record  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models import MiniLM, minilm  # noqa: E402
from search.models.base import INT8_TOLERANCE  # noqa: E402
from search.models.export.common import sha256  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

DATA = PROJECT_ROOT.parent / "shared" / "data"
STSB = DATA / "stsb" / "dev.tsv"
MARCO = DATA / "beir-msmarco-mini"


def pairs() -> tuple[list[str], list[str], np.ndarray]:
    a, b, gold = [], [], []
    for line in STSB.read_text().splitlines()[1:]:
        cols = line.rstrip("\r").split("\t")  # split genre dataset year sid score sentence1 sentence2
        if len(cols) >= 8:
            gold.append(float(cols[5]))
            a.append(cols[6])
            b.append(cols[7])
    return a, b, np.array(gold)


def marco() -> tuple[list[str], list[str], list[str], dict[str, dict[str, int]]]:
    """Passage ids, passage texts (title + text, as BEIR), query texts, graded qrels by query id."""
    docs = [json.loads(line) for line in (MARCO / "corpus.jsonl").read_text().split("\n") if line.strip()]
    queries = [json.loads(line) for line in (MARCO / "queries.jsonl").read_text().split("\n") if line.strip()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (MARCO / "qrels" / "test.tsv").read_text().splitlines():
        cols = line.split("\t")
        if len(cols) == 3 and cols[2].strip().lstrip("-").isdigit():  # skips a "query-id corpus-id score" header
            qrels.setdefault(cols[0], {})[cols[1]] = int(cols[2])
    queries = [q for q in queries if qrels.get(q["_id"])]
    return ([d["_id"] for d in docs], [f"{d.get('title', '')} {d['text']}".strip() for d in docs],
            [q["text"] for q in queries], [qrels[q["_id"]] for q in queries])


def spearman(va: np.ndarray, vb: np.ndarray, gold: np.ndarray) -> float:
    cos = (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
    return float(spearmanr(cos, gold).statistic) * 100


def ndcg10(query_vectors: np.ndarray, doc_vectors: np.ndarray, doc_ids: list[str], qrels: list[dict[str, int]]) -> float:
    """Mean nDCG@10 with linear gains (trec_eval's, as BEIR reports it), x100."""
    scores = query_vectors @ doc_vectors.T
    out = []
    for q, rel in enumerate(qrels):
        top = np.argsort(-scores[q], kind="stable")[:10]
        dcg = sum(rel.get(doc_ids[j], 0) / np.log2(rank + 2) for rank, j in enumerate(top))
        ideal = sorted(rel.values(), reverse=True)[:10]
        out.append(dcg / sum(g / np.log2(rank + 2) for rank, g in enumerate(ideal)))
    return float(np.mean(out)) * 100


def measure(embed, data: dict) -> dict:
    start = time.perf_counter()
    a, b, gold = data["stsb"]
    ids, docs, queries, qrels = data["marco"]
    out = {"stsb_spearman": spearman(embed(a), embed(b), gold),
           "msmarco_ndcg10": ndcg10(embed(queries), embed(docs), ids, qrels)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


ALONE = 300  # STS-B sentences also sent one per request: the same vector as in a batch of 32?


def served(repo: Path, data: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """The served model's figures, its vectors of every STS-B sentence (batches of 32) and of the
    first ALONE sent one per request."""
    with LocalTriton(repo, Path(tempfile.mkdtemp(prefix="quality-run-")), models=list(MiniLM().triton_models)) as server:
        client = TritonClient(f"127.0.0.1:{server.grpc_port}")

        def embed(texts: list[str]) -> np.ndarray:
            return np.concatenate([minilm.embed(client, texts[i:i + 32])[0] for i in range(0, len(texts), 32)])

        out = measure(embed, data)
        sentences = data["stsb"][0] + data["stsb"][1]
        start = time.perf_counter()
        batched = embed(sentences)
        out["stsb_sentences_per_s"] = round(len(sentences) / (time.perf_counter() - start), 1)
        alone = np.concatenate([minilm.embed(client, [t])[0] for t in sentences[:ALONE]])
        return out, batched, alone


def paired_speed(graphs: dict[str, Path], texts: list[str], rounds: int = 3) -> dict:
    """Texts/s of each CPU graph in-process (onnxruntime, 2 threads, batches of 32), rounds interleaved
    so both see the same machine; best round each."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm.package_weights() / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()
    batches = []
    for i in range(0, len(texts), 32):
        enc = tok.encode_batch(texts[i:i + 32])
        ids = np.array([e.ids for e in enc], np.int64)
        batches.append({"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                        "token_type_ids": np.zeros_like(ids)})
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sessions = {k: ort.InferenceSession(str(g), opts, providers=["CPUExecutionProvider"]) for k, g in graphs.items()}
    best = dict.fromkeys(sessions, float("inf"))
    for _ in range(rounds):
        for k, sess in sessions.items():
            names = {i.name for i in sess.get_inputs()}
            start = time.perf_counter()
            for b in batches:
                sess.run(None, {n: v for n, v in b.items() if n in names})
            best[k] = min(best[k], time.perf_counter() - start)
    out = {f"{k}_texts_per_s": round(len(texts) / t, 1) for k, t in best.items()}
    out["int8_vs_fp32"] = round(best["fp32"] / best["int8"], 3)
    return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--no-int8", action="store_true", help="fp32 only (the served vs in-process check)")
    args = ap.parse_args()
    load_before = load()
    if not STSB.exists() or not (MARCO / "corpus.jsonl").exists():
        sys.exit(f"needs the reference data in {DATA} (stsb/dev.tsv, beir-msmarco-mini/)")
    data = {"stsb": pairs(), "marco": marco()}
    weights = minilm.package_weights()
    results: dict = {"machine": machine_line(), "load_start": os.getloadavg(), "weights": str(weights),
                     "weights_sha256": sha256(weights / "model.safetensors"), "rows": {}}
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(weights), device="cpu")
    results["rows"]["sentence-transformers (in-process)"] = measure(
        lambda texts: st.encode(texts, batch_size=32, normalize_embeddings=True), data)
    tmp = Path(tempfile.mkdtemp(prefix="quality-"))
    try:
        vectors = {}
        for precision in ("fp32",) if args.no_int8 else ("fp32", "int8"):
            repo = tmp / precision / "triton_repo"
            shutil.copytree(PROJECT_ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data", "*.json"))
            report = MiniLM().build(repo, "package", precision=precision, allow_unmeasured=True)
            assert report.status == "built", report.detail
            row, batched, alone = served(repo, data)
            row["one_vs_batch_min_cosine"] = round(float(cosines(alone, batched[:ALONE]).min()), 7)
            results["rows"][f"Triton minilm {precision} (served)"] = row
            vectors[precision] = batched
            print(f"{precision}: {report.detail}", flush=True)
        if "int8" in vectors:
            graphs = {k: tmp / k / "triton_repo" / "minilm_onnx" / "1" / "model.cpu.onnx" for k in vectors}
            results["cpu_graph_speed"] = paired_speed(graphs, data["stsb"][0][:640])
        if "int8" in vectors:  # every STS-B dev sentence, served int8 against served fp32
            cos = cosines(vectors["int8"], vectors["fp32"])
            rows = results["rows"]
            results["int8_vs_fp32"] = {
                "stsb_sentences": len(cos), "min_cosine": round(float(cos.min()), 5),
                "below_0.98": int((cos < 0.98).sum()),
                "served_speed_ratio_unpaired": round(rows["Triton minilm int8 (served)"]["stsb_sentences_per_s"]
                                                     / rows["Triton minilm fp32 (served)"]["stsb_sentences_per_s"], 3)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_end"] = os.getloadavg()
    report_results(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("quality_minilm", results, load_before=load_before)


def report_results(results: dict) -> None:
    rows = results["rows"]
    print(f"machine: {results['machine']}; load average {results['load_start']} -> {results['load_end']}")
    print(f"{'path':40} {'STS-B dev Spearman':>19} {'MS MARCO nDCG@10':>17}")
    for name, r in rows.items():
        print(f"{name:40} {r['stsb_spearman']:>19.2f} {r['msmarco_ndcg10']:>17.2f}")
    fp32, int8 = rows.get("Triton minilm fp32 (served)"), rows.get("Triton minilm int8 (served)")
    ref = rows["sentence-transformers (in-process)"]
    print(f"served fp32 - in-process: STS-B {fp32['stsb_spearman'] - ref['stsb_spearman']:+.4f}, "
          f"nDCG@10 {fp32['msmarco_ndcg10'] - ref['msmarco_ndcg10']:+.4f}")
    if "int8_vs_fp32" in results:
        print(f"int8 vs fp32 (served) on every STS-B dev sentence: {results['int8_vs_fp32']}; "
              f"CPU graphs in-process, paired: {results.get('cpu_graph_speed')}; one vs batch: "
              f"fp32 {fp32['one_vs_batch_min_cosine']}, int8 {int8['one_vs_batch_min_cosine']}")
    if int8:
        ok = all(fp32[m] - int8[m] <= tol for m, tol in INT8_TOLERANCE.items())
        print("int8 - fp32 (served): " + ", ".join(f"{m} {int8[m] - fp32[m]:+.2f} (tolerance -{tol})"
                                                   for m, tol in INT8_TOLERANCE.items())
              + (": within tolerance" if ok else ": OUT OF TOLERANCE, int8 stays unmeasured"))
        figures = {m: (round(fp32[m], 2), round(int8[m], 2)) for m in INT8_TOLERANCE}
        print(f'record in search/models/minilm.py: Int8Quality(weights_sha256="{results["weights_sha256"]}", '
              f'figures={figures}, measured_by="bench/quality_minilm.py, {time.strftime("%Y-%m-%d")}")')


if __name__ == "__main__":
    main()
