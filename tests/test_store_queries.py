"""The store contract's queries on every backend (dense, payload fields, filters, sparse IDF, MAX_SIM, RRF prefetch, photo filters)."""

from __future__ import annotations

import math

import numpy as np
from qdrant_client import models
from store_helpers import (
    COLBERT,
    DENSE,
    IDS,
    MINILM,
    PAYLOAD,
    RNG,
    SPARSE,
    SPARSE_W,
    N,
    fill,
    unit,
)

from search.store import DOCUMENTS, image_vector, images_schema, point_id


def ranked(scores: np.ndarray, k: int, keep=None) -> list[tuple[str, float]]:
    order = [i for i in np.argsort(-scores, kind="stable") if keep is None or keep(i)]
    return [(IDS[i], float(scores[i])) for i in order[:k]]


def same(got: list[models.ScoredPoint], want: list[tuple[str, float]], tol=1e-4):
    assert [p.id for p in got] == [i for i, _ in want]
    assert np.allclose([p.score for p in got], [s for _, s in want], atol=tol)


def sparse_scores(q: dict[int, float]) -> np.ndarray:
    """Qdrant's IDF modifier: idf(t) = ln((N - n_t + 0.5) / (n_t + 0.5) + 1), score = sum q_t * idf_t * d_t."""
    df = {t: sum(t in s for s in SPARSE) for t in q}
    idf = {t: math.log((N - n + 0.5) / (n + 0.5) + 1) for t, n in df.items()}
    return np.array([sum(q[t] * idf[t] * w for t, w in zip(s, ws) if t in q) for s, ws in zip(SPARSE, SPARSE_W)])


def maxsim(q: np.ndarray) -> np.ndarray:
    return np.array([(q @ d.T).max(axis=1).sum() for d in COLBERT])


# -- queries
def test_dense_search_matches_exact_cosine(store):
    fill(store)
    q = unit(MINILM[5] + 0.2 * RNG.normal(size=384))
    same(store.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10), ranked(MINILM @ q, 10))
    cut = float(np.mean([s for _, s in ranked(MINILM @ q, 10)][4:6]))  # between the 5th and 6th score
    got = store.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10, score_threshold=cut)
    same(got, ranked(MINILM @ q, 5))
    assert got[0].payload["sha256"] == PAYLOAD[int(IDS.index(got[0].id))]["sha256"]


def test_a_search_returns_the_payload_fields_asked_and_payloads_come_by_id(store):
    fill(store)
    q = unit(MINILM[5] + 0.2 * RNG.normal(size=384))
    got = store.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10, with_payload=["sha256"])
    same(got, ranked(MINILM @ q, 10))
    assert all(p.payload == {"sha256": PAYLOAD[IDS.index(p.id)]["sha256"]} for p in got)
    gone = point_id("nothing-here", "c1", 0)
    assert store.payloads(DOCUMENTS.name, [got[3].id, gone, got[0].id]) == {
        got[3].id: PAYLOAD[IDS.index(got[3].id)], got[0].id: PAYLOAD[IDS.index(got[0].id)]}


def test_filters_keyword_any_range_must_not_and_count(store):
    fill(store)
    q = unit(RNG.normal(size=384))
    flt = models.Filter(
        must=[models.FieldCondition(key="folders", match=models.MatchValue(value="/kb/a")),
              models.FieldCondition(key="suffix", match=models.MatchAny(any=[".md", ".txt"])),
              models.FieldCondition(key="mtime", range=models.Range(gte=10.0, lt=100.0))],
        must_not=[models.FieldCondition(key="page", match=models.MatchValue(value=3))])

    def keep(i):
        return i % 2 == 0 and i % 3 in (0, 2) and 10 <= i < 100 and i % 7 != 3

    same(store.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10, query_filter=flt), ranked(MINILM @ q, 10, keep))
    assert store.count(DOCUMENTS.name, flt) == sum(map(keep, range(N)))
    assert store.count(DOCUMENTS.name, models.Filter(must=[models.HasIdCondition(has_id=IDS[:5])])) == 5


def test_sparse_search_uses_idf(store):
    fill(store)
    q = {SPARSE[0][0]: 0.7, SPARSE[1][0]: 0.4, 59: 0.2}
    got = store.search(DOCUMENTS.name, "bge_sparse", models.SparseVector(indices=list(q), values=list(q.values())), limit=8)
    scores = sparse_scores(q)
    assert np.allclose([p.score for p in got], sorted(scores, reverse=True)[:8], atol=1e-4)
    assert all(abs(scores[IDS.index(p.id)] - p.score) < 1e-4 for p in got)
    # Only points that share a token are hits (as on a server), however many are asked for.
    rare = {59: 1.0}
    got = store.search(DOCUMENTS.name, "bge_sparse", models.SparseVector(indices=[59], values=[1.0]), limit=N)
    assert sorted(p.id for p in got) == sorted(IDS[i] for i, s in enumerate(sparse_scores(rare)) if s > 0)


def test_multivector_max_sim(store):
    fill(store)
    q = unit(RNG.normal(size=(3, 1024)))
    same(store.search(DOCUMENTS.name, "bge_colbert", q.tolist(), limit=5), ranked(maxsim(q), 5))


def test_prefetch_rrf_fusion_and_colbert_rerank(store):
    """The hybrid mode's query: dense + sparse candidates, fused by RRF, re-ranked by ColBERT MAX_SIM."""
    fill(store)
    qd, qc = unit(DENSE[9] + 0.1 * RNG.normal(size=1024)), unit(RNG.normal(size=(2, 1024)))
    qs = {SPARSE[9][0]: 1.0, SPARSE[9][1]: 0.5}
    flt = models.Filter(must=[models.FieldCondition(key="suffix", match=models.MatchAny(any=[".md", ".pdf"]))])

    def keep(i):
        return i % 3 != 2

    candidates = [models.Prefetch(query=qd.tolist(), using="bge_dense", limit=10, filter=flt),
                  models.Prefetch(query=models.SparseVector(indices=list(qs), values=list(qs.values())), using="bge_sparse",
                                  limit=10, filter=flt)]
    dense_top = [i for i, _ in ranked(DENSE @ qd, 10, keep)]
    sparse_top = [i for i, s in ranked(sparse_scores(qs), 10, keep) if s > 0]
    rrf: dict[str, float] = {}
    for lst in (dense_top, sparse_top):
        for rank, pid in enumerate(lst):
            rrf[pid] = rrf.get(pid, 0.0) + 1.0 / (2 + rank)  # Qdrant's RRF, k = 2
    fused = store.search(DOCUMENTS.name, None, models.FusionQuery(fusion=models.Fusion.RRF), limit=40, prefetch=candidates)
    assert {p.id: round(p.score, 6) for p in fused} == {k: round(v, 6) for k, v in rrf.items()}
    rerank = store.search(DOCUMENTS.name, "bge_colbert", qc.tolist(), limit=5, prefetch=[
        models.Prefetch(prefetch=candidates, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=40)])
    ms = maxsim(qc)
    same(rerank, sorted(((pid, float(ms[IDS.index(pid)])) for pid in rrf), key=lambda x: -x[1])[:5])


def test_photo_filters_geo_radius_float_range_and_camera(opener):
    s = opener()
    schema = images_schema({image_vector(): 8})
    s.ensure(schema)
    rng = np.random.default_rng(3)
    vecs = unit(rng.normal(size=(60, 8)))
    places = [(45.83 + 0.5 * (i % 5), 6.86 + 0.5 * (i % 4)) for i in range(60)]  # 0..2 deg away from Chamonix
    s.upsert("images", [models.PointStruct(id=point_id(f"p{i}", "clip", 0), vector={"clip": vecs[i].tolist()}, payload={
        "sha256": f"p{i}", "chunk": 0, "taken_at": 1.6e9 + i * 86400.0, "camera_terms": ["canon", "eos"] if i % 2 else ["fujifilm"],
        "location": {"lat": places[i][0], "lon": places[i][1]}}) for i in range(60)])
    st = s.stats("images")
    assert st.points == 60

    def km(a, b):
        la1, lo1, la2, lo2 = map(math.radians, (*a, *b))
        h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
        return 2 * 6371.0088 * math.asin(math.sqrt(h))

    centre = (45.83, 6.86)
    dists = sorted({round(km(centre, p), 3) for p in places})
    radius = next((a + b) / 2 for a, b in zip(dists, dists[1:]) if a > 50 and b - a > 10)  # nothing on the border
    flt = models.Filter(must=[
        models.FieldCondition(key="location", geo_radius=models.GeoRadius(center=models.GeoPoint(lat=centre[0], lon=centre[1]), radius=radius * 1000)),
        models.FieldCondition(key="taken_at", range=models.Range(gte=1.6e9 + 5 * 86400, lt=1.6e9 + 50 * 86400)),
        models.FieldCondition(key="camera_terms", match=models.MatchValue(value="canon"))])
    want = [i for i in range(60) if km(centre, places[i]) <= radius and 5 <= i < 50 and i % 2]
    assert want and len(want) < 20
    q = unit(rng.normal(size=8))
    got = s.search("images", "clip", q.tolist(), limit=60, query_filter=flt)
    order = [i for i in np.argsort(-(vecs @ q)) if i in want]
    assert [p.id for p in got] == [point_id(f"p{i}", "clip", 0) for i in order]
    assert s.count("images", flt) == len(want)
