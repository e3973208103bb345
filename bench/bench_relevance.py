"""Does "no good match" hold on corpora of different kinds? Six corpora, MiniLM's real weights,
the indexer's ingest, the embedded store, the service's own search (docs/relevance.md has the figures).

    python bench/bench_relevance.py [--repo triton_repo] [--work DIR] [--json FILE] [--data DIR] [--only NAME...]

Corpora (each ingested once into its own store under --work, kept between runs):
  msmarco      ../shared/data/beir-msmarco-mini: 5,000 web passages, one file each; on-topic: the 43
               queries with a passage graded relevant (>= 2); off-topic: everyday sentences, and the
               on-topic queries after deleting every passage their qrels list (put back after each).
  sample-docs  samples/docs: an IT help desk's 17 articles; on-topic: 32 help-desk questions, each
               with the article that answers it; off-topic: everyday sentences.
  stsb         ../shared/data/stsb/dev.tsv: its 1,467 distinct second sentences (captions, news,
               forums), one file each; on-topic: each first sentence of a pair scored >= 4 (whose
               second is its answer); off-topic: everyday sentences, and the MS MARCO queries.
  encyclopedia  bench/relevance_encyclopedia.py: 50 short articles on subjects from every walk of
               life; on-topic: one question per article; off-topic: everyday sentences (some are on
               topic here), 300 STS-B captions, and each question with its article deleted.
  python-reference  Python's own language reference (pydoc_data.topics, 79 topics): one subject;
               on-topic: 40 questions with the topics that answer them; off-topic: everyday
               sentences, 300 STS-B captions, the MS MARCO queries.
  wordnet-encyclopedia  bench/relevance_wordnet.py: 739 short articles from WordNet's nouns (people,
               places, foods, animals, plants, sports, things; where WordNet is installed:
               apt-get install wordnet-base); on-topic: 100 "Who was / Where is / What is X?"
               questions, each also with its article deleted; off-topic: everyday sentences,
               captions, the MS MARCO queries.
(bench/relevance_corpora.py builds them.)
Per corpus and off-topic set, at the default threshold: the share of on-topic queries that keep a
relevant hit (top 10), the share of off-topic queries answered "no good match", the AUROC of the top
hit's relevance and of its raw score (on- against off-topic), kept hits' precision and recall; what
`search relevance check` says, and where it warns, the same figures at the threshold it names.
None of the off-topic sets is asked by the check (its questions: relevance_probes.HELD_OUT and
relevance_probes.asked()), so the check is measured on questions it never saw.
"""

from __future__ import annotations

import argparse
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
from bench.relevance_corpora import DATA, all_corpora  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import Settings  # noqa: E402
from search.models import MiniLM  # noqa: E402
from search.services import DEFAULT_MIN_RELEVANCE, SearchService  # noqa: E402
from search.services import relevance as rel  # noqa: E402
from search.store import DOCUMENTS  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

TOP_K = 10


def auroc(pos, neg) -> float:
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    return float(np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))


def search(svc: SearchService, text: str, good: set[str] | None = None) -> dict:
    hits = svc.search_documents(text, top_k=TOP_K, mode="semantic")
    names = [Path(h.path).name for h in hits]
    return {"raw": [h.score for h in hits], "relevance": [h.relevance for h in hits],
            "good": [n in good for n in names] if good else [False] * len(hits), "text": hits[0].text if hits else ""}


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
        if subjects := corpus.get("subjects"):  # an encyclopedia: "Sweet orange is an orange: ..." answers "What is orange?"
            off["judged deleted, best hit not naming the subject"] = [
                r for r, s in zip(runs, subjects) if not rel.names(r["text"], s)]
    good = np.concatenate([r["good"] for r in on])
    hits_kept = np.concatenate([kept(r) for r in on])
    tp = int((good & hits_kept).sum())
    row = {"kind": corpus["kind"], "points": svc.store.count(DOCUMENTS.name), "on_topic_queries": len(on),
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
    report = svc.relevance_check()  # what `search relevance check` says of this collection
    row["check"] = {"own_kept": report["own"]["kept"], "own_threshold_keeping": report["own"]["threshold_keeping"],
                    "everyday_answered": report["everyday"]["answered"],
                    "other_subjects_answered": report["other_subjects"]["answered"],
                    "other_subjects_counted": report["other_subjects"]["questions"], "refusing": report["refusing"],
                    "warnings": report["warnings"]}
    if (t := report.get("suggested")) is not None:  # a user who follows its advice: the threshold it names
        row["check"]["suggested"] = t
        row["check"]["at_suggested"] = {
            "on_topic_keep_a_relevant_hit": round(float(np.mean([bool((kept(r, t) & np.asarray(r["good"])).any()) for r in on])), 3),
            "off_topic_refused": {name: round(float(np.mean([not kept(r, t).any() for r in runs])), 3) for name, runs in off.items()}}
    bg = rel._CACHE[svc._background_key(rel.DOCUMENT_SPACES["minilm"])]  # noqa: SLF001  (the bench looks inside)
    laws = {kind: bg.fits[kind][0][1:] for kind in ("text", "asked") if bg.fits.get(kind)}
    row["fit"] = {"mu": round(laws["text"][0], 4), "beta": round(laws["text"][1], 4),
                  "asked": {"mu": round(laws["asked"][0], 4), "beta": round(laws["asked"][1], 4)} if "asked" in laws else None,
                  "raw_score_at_default": round(max(mu - beta * float(np.log(-np.log(DEFAULT_MIN_RELEVANCE)))
                                                    for mu, beta in laws.values()), 4)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Settings().triton_repo, help="model repository with MiniLM built")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-relevance",
                    help="where the corpus files and the stores live (kept between runs)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--data", type=Path, default=DATA, help="the shared reference data (msmarco, stsb)")
    ap.add_argument("--only", nargs="*", help="measure only these corpora")
    args = ap.parse_args()
    load_before = load_average()
    if not MiniLM().is_built(args.repo):
        sys.exit(f"MiniLM is not built in {args.repo}: search models build")
    corpora = {n: c for n, c in all_corpora(args.data).items() if not args.only or n in args.only}
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
