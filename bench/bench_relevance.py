"""Does calibrated relevance tell "no good match" better than the raw score? MS MARCO, MiniLM, the
embedded store, the real service code (docs/relevance.md records the figures).

    python bench/bench_relevance.py [--repo triton_repo] [--work DIR] [--json FILE]

The corpus (../shared/data/beir-msmarco-mini: 5,000 passages, one file each) is ingested with the
indexer into an embedded store under --work (kept: a second run only searches). For each query with
relevant passages (grade >= 2 in the qrels):
  answerable    the full index;
  unanswerable  the same query after deleting the passages its qrels list (every grade, so nothing
                judged on topic is left: "all listed removed"), and in a second, harder setting only
                those graded relevant (>= 2: passages judged "related" stay).
Deleted points are put back (same ids, vectors and payloads) before the next query. Reported: the
AUROC of "has a good match" from the top hit's raw score and from its relevance; precision / recall
of the kept hits (top 10 per query; a good hit is one graded >= 2) at the default threshold, next to
the best flat cut-off on the raw score chosen on these same data (the most favourable case for it).
Also computed from the same background scores: two alternatives that were tried (per-query scale,
normal tail), for the record.
"""

from __future__ import annotations

import argparse
import collections
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

from bench.common import load as load_average  # noqa: E402  (load() here reads the data)
from bench.common import record  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM, minilm  # noqa: E402
from search.services import DEFAULT_MIN_RELEVANCE, SearchService  # noqa: E402
from search.services import relevance as rel  # noqa: E402
from search.store import DOCUMENTS  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

DATA = PROJECT_ROOT.parent / "shared" / "data" / "beir-msmarco-mini"
TOP_K = 10


def load() -> tuple[dict, dict, dict]:
    def jsonl(path: Path) -> list[dict]:  # split on "\n" only: the passages hold other line separators
        return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]

    corpus = {d["_id"]: d["text"] for d in jsonl(DATA / "corpus.jsonl")}
    queries = {q["_id"]: q["text"] for q in jsonl(DATA / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, pid, grade = line.split("\t")
        qrels[qid][pid] = int(grade)
    return corpus, queries, qrels


def auroc(pos, neg) -> float:
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    return float(np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))


def auroc_difference_ci(answerable: list[dict], unanswerable: list[dict], a: str, b: str, n: int = 2000) -> list[float]:
    """95 % bootstrap interval (queries resampled, paired) of AUROC(a) - AUROC(b)."""
    rng = np.random.default_rng(0)
    k = len(answerable)
    diffs = []
    for _ in range(n):
        idx = rng.integers(0, k, k)
        pos = [answerable[i] for i in idx]
        neg = [unanswerable[i] for i in idx]
        diffs.append(auroc([r[a][0] for r in pos], [r[a][0] for r in neg]) - auroc([r[b][0] for r in pos], [r[b][0] for r in neg]))
    return [round(float(q), 3) for q in np.quantile(diffs, [0.025, 0.975])]


def kept_pr(runs: list[dict], key: str, threshold: float) -> dict:
    kept = np.concatenate([np.asarray(r[key]) >= threshold for r in runs])
    good = np.concatenate([np.asarray(r["good"]) for r in runs])
    tp = int((kept & good).sum())
    p, r = tp / max(int(kept.sum()), 1), tp / max(int(good.sum()), 1)
    return {"threshold": round(float(threshold), 4), "precision": round(p, 3), "recall": round(r, 3),
            "f1": round(2 * p * r / max(p + r, 1e-9), 3), "kept": int(kept.sum())}


def best_cut(runs: list[dict], key: str) -> dict:
    values = np.unique(np.concatenate([np.asarray(r[key]) for r in runs]))
    return max((kept_pr(runs, key, v) for v in values), key=lambda x: x["f1"])


class Remover:
    """Delete some passages from the store for one query, and put them back exactly."""

    def __init__(self, svc: SearchService, docs: Path) -> None:
        self.svc, self.docs = svc, docs

    def __call__(self, pids: list[str]):
        store = self.svc.store
        flt = models.Filter(must=[models.FieldCondition(key="paths", match=models.MatchAny(
            any=[str(self.docs / f"{p}.txt") for p in pids]))])
        saved, offset = [], None
        while True:
            points, offset = store.scroll(DOCUMENTS.name, flt, limit=512, offset=offset, with_payload=True, with_vectors=True)
            saved += points
            if offset is None:
                break
        store.delete(DOCUMENTS.name, flt)
        return lambda: store.upsert(DOCUMENTS.name, [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                                                     for p in saved])


def fresh_background(svc: SearchService) -> None:
    """Forget the background sample, so the next search draws it from the index as it is now (the
    service keeps a sample until the collection's size moves by 10 %: deleting one query's passages
    would otherwise leave them in the background)."""
    rel._CACHE.clear()  # noqa: SLF001  (the bench looks inside on purpose)
    folder = svc.settings.data_dir / "relevance"
    for f in folder.glob("*") if folder.is_dir() else ():
        f.unlink()


def search(svc: SearchService, text: str, good_ids: set[str]) -> dict:
    fresh_background(svc)
    started = time.perf_counter()
    hits = svc.search_documents(text, top_k=TOP_K, mode="semantic")
    seconds = time.perf_counter() - started
    started = time.perf_counter()  # the same search without relevance: embed + store search
    svc.store.search(DOCUMENTS.name, "minilm", minilm.embed(svc.triton, [text])[0][0].tolist(), limit=TOP_K)
    plain = time.perf_counter() - started
    return {"raw": [h.score for h in hits], "relevance": [h.relevance for h in hits],
            "good": [Path(h.path).stem in good_ids for h in hits], "seconds": seconds, "plain_seconds": plain}


def alternatives(svc: SearchService, text: str, raw: list[float], count: int) -> dict:
    """Two calibrations tried before the shipped one, from the same background sample."""
    space = rel.DOCUMENT_SPACES["minilm"]
    bg = svc._background(space, count)  # noqa: SLF001  (the bench looks inside on purpose)
    vector = minilm.embed(svc.triton, [text])[0][0].tolist()
    scores = svc._background_scores(space, vector, bg)  # noqa: SLF001
    centre = float(np.median(scores))
    per_query = rel.relevance(raw, centre, rel.laplace_scale(scores), count)
    sd = float(np.std(scores))
    z = (np.asarray(raw) - float(np.mean(scores))) / sd
    from scipy.special import log_ndtr  # the bench's own dependency (scipy comes with scikit-image)

    normal = np.exp(count * log_ndtr(z))
    return {"per_query_scale": per_query.tolist(), "normal_tail": normal.tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Settings().triton_repo, help="model repository with MiniLM built")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-relevance",
                    help="where the corpus files and the store live (kept between runs)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    load_before = load_average()
    if not MiniLM().is_built(args.repo):
        sys.exit(f"MiniLM is not built in {args.repo}: search models build")
    corpus, queries, qrels = load()
    docs = args.work / "corpus"
    if not docs.is_dir():
        docs.mkdir(parents=True)
        for pid, text in corpus.items():
            (docs / f"{pid}.txt").write_text(text, encoding="utf-8")
    with LocalTriton(args.repo, args.work / "triton", models=list(MiniLM().triton_models)) as server:
        settings = Settings(data_dir=args.work / "data", triton_repo=args.repo, search_mode="semantic",
                            triton_url=f"127.0.0.1:{server.grpc_port}")
        svc = SearchService(settings)
        try:
            started = time.perf_counter()
            report = IngestService(settings, svc.resources).ingest([docs])
            print(f"ingest: {sum(o.status == 'indexed' for o in report.outcomes)} indexed, "
                  f"{sum(o.status == 'unchanged' for o in report.outcomes)} unchanged in {time.perf_counter() - started:.0f} s")
            count = svc.store.count(DOCUMENTS.name)
            remove = Remover(svc, docs)
            results: dict[str, list[dict]] = {"answerable": [], "all listed removed": [], "grade >= 2 removed": []}
            asked = [q for q in queries if any(g >= 2 for g in qrels.get(q, {}).values())]
            for qid in asked:
                graded = qrels[qid]
                good = {p for p, g in graded.items() if g >= 2}
                run = search(svc, queries[qid], good)
                run.update(alternatives(svc, queries[qid], run["raw"], count))
                results["answerable"].append(run)
                for setting, pids in (("all listed removed", list(graded)), ("grade >= 2 removed", sorted(good))):
                    restore = remove(pids)
                    try:
                        run = search(svc, queries[qid], good)
                        run.update(alternatives(svc, queries[qid], run["raw"], svc.store.count(DOCUMENTS.name)))
                        results[setting].append(run)
                    finally:
                        restore()
            assert svc.store.count(DOCUMENTS.name) == count, "the store was not restored"
            timed, plain = [], []  # with the sample kept (the usual case), next to the same search without relevance
            for qid in asked * 3:
                started = time.perf_counter()
                svc.search_documents(queries[qid], top_k=TOP_K, mode="semantic")
                timed.append(time.perf_counter() - started)
                started = time.perf_counter()
                svc.store.search(DOCUMENTS.name, "minilm", minilm.embed(svc.triton, [queries[qid]])[0][0].tolist(), limit=TOP_K)
                plain.append(time.perf_counter() - started)
            latency = {"with_relevance": round(float(np.median(timed)), 4), "without": round(float(np.median(plain)), 4)}
        finally:
            svc.close()
    out = {"queries": len(asked), "points": count, "default_min_relevance": DEFAULT_MIN_RELEVANCE,
           "sample": rel.SAMPLE, "settings": {}}
    answerable = results["answerable"]
    for setting in ("all listed removed", "grade >= 2 removed"):
        unanswerable = results[setting]
        both = answerable + unanswerable
        row = {"auroc": {k: round(auroc([r[k][0] for r in answerable], [r[k][0] for r in unanswerable]), 3)
                         for k in ("raw", "relevance", "per_query_scale", "normal_tail")},
               "auroc_relevance_minus_raw_95ci": auroc_difference_ci(answerable, unanswerable, "relevance", "raw"),
               "good_hits": int(sum(np.sum(r["good"]) for r in both)),
               "relevance_at_default": kept_pr(both, "relevance", DEFAULT_MIN_RELEVANCE),
               "best_flat_raw_cut": best_cut(both, "raw"),
               "best_relevance_cut": best_cut(both, "relevance"),
               "no_match_at_default": {
                   "answerable": round(float(np.mean([r["relevance"][0] < DEFAULT_MIN_RELEVANCE for r in answerable])), 3),
                   "unanswerable": round(float(np.mean([r["relevance"][0] < DEFAULT_MIN_RELEVANCE for r in unanswerable])), 3)},
               "median_top_relevance": {"answerable": round(float(np.median([r["relevance"][0] for r in answerable])), 3),
                                        "unanswerable": round(float(np.median([r["relevance"][0] for r in unanswerable])), 3)}}
        out["settings"][setting] = row
    out["latency_p50_s"] = latency
    out["first_search_with_a_new_sample_p50_s"] = round(float(np.median([r["seconds"] for rs in results.values() for r in rs])), 4)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    record("bench_relevance", out, load_before=load_before)


if __name__ == "__main__":
    main()
