"""Does "no good match" hold on corpora of different kinds? Three corpora, MiniLM's real weights,
the indexer's ingest, the embedded store, the service's own search (docs/relevance.md has the figures).

    python bench/bench_relevance.py [--repo triton_repo] [--work DIR] [--json FILE]

Corpora (each ingested once into its own store under --work, kept between runs):
  msmarco      ../shared/data/beir-msmarco-mini: 5,000 web passages, one file each; on-topic: the 43
               queries with a passage graded relevant (>= 2); off-topic: everyday sentences, and the
               on-topic queries after deleting every passage their qrels list (put back after each).
  sample-docs  samples/docs: an IT help desk's 17 articles; on-topic: 32 help-desk questions, each
               with the article that answers it; off-topic: everyday sentences.
  stsb         ../shared/data/stsb/dev.tsv: its 1,467 distinct second sentences (captions, news,
               forums), one file each; on-topic: each first sentence of a pair scored >= 4 (whose
               second is its answer); off-topic: everyday sentences, and the MS MARCO queries.
Per corpus and off-topic set, at the default threshold: the share of on-topic queries that keep a
relevant hit (top 10), the share of off-topic queries answered "no good match", the AUROC of the top
hit's relevance and of its raw score (on- against off-topic), kept hits' precision and recall.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
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
from qdrant_client import models  # noqa: E402

from bench.common import load as load_average  # noqa: E402
from bench.common import record  # noqa: E402
from bench.relevance_data import OFF_TOPIC, SAMPLE_QUERIES  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM  # noqa: E402
from search.services import DEFAULT_MIN_RELEVANCE, SearchService  # noqa: E402
from search.services import relevance as rel  # noqa: E402
from search.store import DOCUMENTS  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

DATA = PROJECT_ROOT.parent / "shared" / "data"
TOP_K = 10


def jsonl(path: Path) -> list[dict]:  # split on "\n" only: the passages hold other line separators
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def msmarco() -> dict:
    root = DATA / "beir-msmarco-mini"
    corpus = {d["_id"]: d["text"] for d in jsonl(root / "corpus.jsonl")}
    queries = {q["_id"]: q["text"] for q in jsonl(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, pid, grade = line.split("\t")
        qrels[qid][pid] = int(grade)
    on = [(queries[q], {f"{p}.txt" for p, g in r.items() if g >= 2}, [f"{p}.txt" for p in r])
          for q, r in qrels.items() if any(g >= 2 for g in r.values())]
    return {"files": {f"{pid}.txt": text for pid, text in corpus.items()}, "on": on,
            "off": {"everyday": list(OFF_TOPIC)}, "queries": list(queries.values())}


def sample_docs() -> dict:
    folder = PROJECT_ROOT / "samples" / "docs"
    return {"files": {f.name: f.read_text(encoding="utf-8") for f in sorted(folder.iterdir())},
            "on": [(q, {name}, None) for q, name in SAMPLE_QUERIES], "off": {"everyday": list(OFF_TOPIC)}}


def stsb(ms_queries: list[str]) -> dict:
    with open(DATA / "stsb" / "dev.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    seconds = sorted({r[7] for r in rows})
    name = {s: f"s{i:04}.txt" for i, s in enumerate(seconds)}
    on = [(r[6], {name[r[7]]}, None) for r in rows if float(r[5]) >= 4.0 and r[6] not in name]
    return {"files": {name[s]: s for s in seconds}, "on": on,
            "off": {"everyday": list(OFF_TOPIC), "msmarco queries": ms_queries}}


def auroc(pos, neg) -> float:
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    return float(np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))


def search(svc: SearchService, text: str, good: set[str] | None = None) -> dict:
    hits = svc.search_documents(text, top_k=TOP_K, mode="semantic")
    names = [Path(h.path).name for h in hits]
    return {"raw": [h.score for h in hits], "relevance": [h.relevance for h in hits],
            "good": [n in good for n in names] if good else [False] * len(hits)}


THRESHOLDS = (0.8, 0.9, 0.95, 0.97, 0.99)  # beside the default: what another min_relevance would do


def kept(run: dict, threshold: float = DEFAULT_MIN_RELEVANCE) -> np.ndarray:
    return np.asarray(run["relevance"], float) >= threshold


class Remover:
    """Delete some files' passages from the store for one query, and put them back exactly."""

    def __init__(self, svc: SearchService, docs: Path) -> None:
        self.svc, self.docs = svc, docs

    def __call__(self, names: list[str]):
        store = self.svc.store
        flt = models.Filter(must=[models.FieldCondition(key="paths", match=models.MatchAny(
            any=[str(self.docs / n) for n in names]))])
        saved, offset = [], None
        while True:
            points, offset = store.scroll(DOCUMENTS.name, flt, limit=512, offset=offset, with_payload=True, with_vectors=True)
            saved += points
            if offset is None:
                break
        store.delete(DOCUMENTS.name, flt)
        return lambda: store.upsert(DOCUMENTS.name, [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                                                     for p in saved])


def fit_cost(svc: SearchService, query: str) -> dict:
    """A search that makes the collection's fit (probes encoded and searched), and the same search after."""
    rel._CACHE.clear()  # noqa: SLF001  (the bench looks inside on purpose)
    for f in (svc.settings.data_dir / "relevance").glob("*"):
        f.unlink()
    times = []
    for _ in range(6):
        started = time.perf_counter()
        svc.search_documents(query, top_k=TOP_K, mode="semantic")
        times.append(time.perf_counter() - started)
    return {"first_search_s": round(times[0], 3), "later_searches_p50_s": round(float(np.median(times[1:])), 4)}


def measure(svc: SearchService, docs: Path, corpus: dict) -> dict:
    cost = fit_cost(svc, corpus["on"][0][0])
    on = [search(svc, q, good) for q, good, _ in corpus["on"]]
    off = {name: [search(svc, q) for q in texts] for name, texts in corpus["off"].items()}
    if corpus["on"][0][2] is not None:  # judged passages known: the same queries with every one of them deleted
        remove, runs = Remover(svc, docs), []
        for q, _, listed in corpus["on"]:
            restore = remove(listed)
            try:
                runs.append(search(svc, q))
            finally:
                restore()
        off["on-topic, judged passages deleted"] = runs
    good = np.concatenate([r["good"] for r in on])
    hits_kept = np.concatenate([kept(r) for r in on])
    tp = int((good & hits_kept).sum())
    row = {"points": svc.store.count(DOCUMENTS.name), "on_topic_queries": len(on),
           "on_topic_keep_a_relevant_hit": round(float(np.mean([bool((kept(r) & np.asarray(r["good"])).any()) for r in on])), 3),
           "on_topic_relevant_in_top10": round(float(np.mean([any(r["good"]) for r in on])), 3),
           "kept_hits_precision": round(tp / max(int(hits_kept.sum()), 1), 3),
           "kept_hits_recall": round(tp / max(int(good.sum()), 1), 3), "fit_cost": cost, "off_topic": {}}
    for name, runs in off.items():
        row["off_topic"][name] = {
            "queries": len(runs),
            "refused": round(float(np.mean([not kept(r).any() for r in runs])), 3),
            "auroc_relevance": round(auroc([r["relevance"][0] for r in on], [r["relevance"][0] for r in runs]), 4),
            "auroc_raw": round(auroc([r["raw"][0] for r in on], [r["raw"][0] for r in runs]), 4)}
    row["by_threshold"] = {str(t): {
        "on_topic_keep_a_relevant_hit": round(float(np.mean([bool((kept(r, t) & np.asarray(r["good"])).any()) for r in on])), 3),
        "off_topic_refused": {name: round(float(np.mean([not kept(r, t).any() for r in runs])), 3) for name, runs in off.items()}}
        for t in THRESHOLDS}
    bg = rel._CACHE[svc._background_key(rel.DOCUMENT_SPACES["minilm"])]  # noqa: SLF001  (the bench looks inside)
    _, mu, beta = bg.fits["text"][0]
    row["fit"] = {"mu": round(mu, 4), "beta": round(beta, 4),
                  "raw_score_at_default": round(mu - beta * float(np.log(-np.log(DEFAULT_MIN_RELEVANCE))), 4)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Settings().triton_repo, help="model repository with MiniLM built")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-relevance",
                    help="where the corpus files and the stores live (kept between runs)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    load_before = load_average()
    if not MiniLM().is_built(args.repo):
        sys.exit(f"MiniLM is not built in {args.repo}: search models build")
    marco = msmarco()
    corpora = {"msmarco": marco, "sample-docs": sample_docs(), "stsb": stsb(marco["queries"])}
    out = {"default_min_relevance": DEFAULT_MIN_RELEVANCE, "probes": len(rel.relevance_probes.TEXTS), "corpora": {}}
    with LocalTriton(args.repo, args.work / "triton", models=list(MiniLM().triton_models)) as server:
        for name, corpus in corpora.items():
            docs = args.work / name / "corpus"
            if not docs.is_dir():
                docs.mkdir(parents=True)
                for file, text in corpus["files"].items():
                    (docs / file).write_text(text, encoding="utf-8")
            settings = Settings(data_dir=args.work / name / "data", triton_repo=args.repo, search_mode="semantic",
                                triton_url=f"127.0.0.1:{server.grpc_port}")
            svc = SearchService(settings)
            try:
                started = time.perf_counter()
                IngestService(settings, svc.resources).ingest([docs])
                ingest_s = time.perf_counter() - started
                started = time.perf_counter()
                row = measure(svc, docs, corpus)
                row["ingest_s"], row["measure_s"] = round(ingest_s, 1), round(time.perf_counter() - started, 1)
            finally:
                svc.close()
            out["corpora"][name] = row
            print(name, json.dumps(row, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    record("bench_relevance", out, load_before=load_before)


if __name__ == "__main__":
    main()
