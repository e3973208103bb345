"""One contract for every store backend: the embedded engine (qdrant-edge), qdrant-client's local
mode (the stand-in for the server's API here) and a real Qdrant server when QDRANT_URL is set.

Every test runs the same calls on each backend and checks them against the same expectation,
computed here with numpy from Qdrant's documented formulas (cosine, IDF, MAX_SIM, RRF with k=2),
so the backends agree with each other by construction."""

from __future__ import annotations

import json
import math
import os
import uuid

import numpy as np
import pytest
from qdrant_client import models
from qdrant_client.conversions.conversion import RestToGrpc

from search.errors import StoreUnavailable
from search.store import DOCUMENTS, CollectionSchema, folders_of, images_schema, match, open_location, point_id
from search.store.util import plain_points

SERVER = os.environ.get("QDRANT_URL")
BACKENDS = [
    pytest.param("edge", id="edge"),
    pytest.param("local", id="local"),
    pytest.param("server", id="server", marks=pytest.mark.skipif(not SERVER, reason="QDRANT_URL is not set: no Qdrant server to test")),
]


def _open(backend: str, tmp_path, prefix: str):
    if backend == "edge":
        return open_location("edge", str(tmp_path / "store-edge"), prefix=prefix)
    if backend == "local":
        return open_location("local", str(tmp_path / "qdrant"), prefix=prefix)
    return open_location("server", SERVER, api_key=os.environ.get("QDRANT_API_KEY"), prefix=prefix)


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def opener(backend, tmp_path):
    """Opens the backend's store (the same folder or server each time) with a test-unique prefix."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    opened = []

    def open_():
        s = _open(backend, tmp_path, prefix)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        if backend == "server":
            for c in s.collections():
                s.client.delete_collection(s.name(c))
        s.close()


@pytest.fixture
def store(opener):
    s = opener()
    s.ensure(DOCUMENTS)
    return s


# -- a small corpus with every vector kind
N = 120
RNG = np.random.default_rng(7)


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


CENTRES = unit(RNG.normal(size=(6, 384)))
MINILM = unit(CENTRES[np.arange(N) % 6] + 0.3 * RNG.normal(size=(N, 384)) / math.sqrt(384) * 10)
DENSE = unit(RNG.normal(size=(N, 1024)))
COLBERT = [unit(RNG.normal(size=(2 + i % 4, 1024))) for i in range(N)]
SPARSE = [sorted(RNG.choice(60, size=4 + i % 5, replace=False).tolist()) for i in range(N)]
SPARSE_W = [RNG.uniform(0.1, 1.0, size=len(s)).round(3).tolist() for s in SPARSE]
IDS = [point_id(f"sha{i}", "c1", 0) for i in range(N)]
PAYLOAD = [{"sha256": f"sha{i}", "chunk": 0, "n_chunks": 1, "chunker": "c1", "suffix": [".md", ".pdf", ".txt"][i % 3],
            "mtime": float(i), "page": i % 7, "paths": [f"/kb/{'ab'[i % 2]}/f{i}.md"], "path": f"/kb/{'ab'[i % 2]}/f{i}.md",
            "folders": folders_of(f"/kb/{'ab'[i % 2]}/f{i}.md"), "size": i} for i in range(N)]


def fill(store):
    store.upsert(DOCUMENTS.name, [
        models.PointStruct(id=IDS[i], payload=PAYLOAD[i], vector={
            "minilm": MINILM[i].tolist(), "bge_dense": DENSE[i].tolist(), "bge_colbert": COLBERT[i].tolist(),
            "bge_sparse": models.SparseVector(indices=SPARSE[i], values=SPARSE_W[i])})
        for i in range(N)])


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


# -- schema
def test_schema_is_created_once_checked_and_indexed(opener, backend):
    s = opener()
    assert not s.exists(DOCUMENTS.name) and s.count(DOCUMENTS.name) == 0 and s.collections() == []
    s.ensure(DOCUMENTS)
    s.ensure(DOCUMENTS)  # idempotent
    assert s.exists(DOCUMENTS.name) and s.collections() == [DOCUMENTS.name]
    st = s.stats(DOCUMENTS.name)
    assert st.points == 0
    if backend != "local":  # local mode ignores payload indexes; the engine and a server keep every one
        assert st.payload_indexes == sorted(DOCUMENTS.payload_indexes)
    s.ensure(CollectionSchema("other", {"minilm": models.VectorParams(size=3, distance=models.Distance.COSINE)}))
    with pytest.raises(StoreUnavailable, match="different vector layout"):
        s.ensure(CollectionSchema("other", DOCUMENTS.vectors, sparse_vectors=DOCUMENTS.sparse_vectors))


# -- writes and content-level operations
def put(store, sha, paths, chunks=2, chunker="c1"):
    store.upsert(DOCUMENTS.name, [
        models.PointStruct(id=point_id(sha, chunker, i), vector={"minilm": [1.0] + [0.0] * 383},
                           payload={"sha256": sha, "paths": paths, "path": paths[0], "chunk": i, "n_chunks": chunks,
                                    "size": 1, "mtime": 1.0, "chunker": chunker})
        for i in range(chunks)])


def test_ids_are_derived_from_content():
    assert point_id("abc", "c1", 0) == point_id("abc", "c1", 0)
    assert len({point_id("abc", "c1", 0), point_id("abc", "c1", 1), point_id("abd", "c1", 0), point_id("abc", "c2", 0)}) == 4


def test_same_content_twice_is_one_set_of_points(store):
    put(store, "s1", ["/a/x.md"])
    put(store, "s1", ["/a/x.md"])
    assert store.count(DOCUMENTS.name) == 2


def test_is_empty_follows_the_points(store):
    # Asked before every query, so the edge store answers from the shard's point count (an exact
    # count costs ~10 ms at 100k points): it must still see every point arrive and leave.
    assert store.is_empty(DOCUMENTS.name) and store.is_empty("no-such-collection")
    put(store, "s1", ["/a/x.md"])
    assert not store.is_empty(DOCUMENTS.name)
    store.delete_content(DOCUMENTS.name, "s1")
    assert store.is_empty(DOCUMENTS.name)


def test_approximate_count_follows_upserts_replacements_and_deletes(store, backend):
    # Relevance asks it on every query (exact=False: the segment counts, not a scan of the points);
    # the embedded store keeps it until its next write, so it is asked between every two writes here.
    assert store.count(DOCUMENTS.name, exact=False) == 0
    put(store, "s1", ["/a/x.md"], chunks=3)
    assert store.count(DOCUMENTS.name, exact=False) == 3
    put(store, "s1", ["/a/x.md", "/b/x.md"], chunks=3)  # the same points again: replaced, not added
    assert store.count(DOCUMENTS.name, exact=False) == 3
    put(store, "s2", ["/a/y.md"])
    assert store.count(DOCUMENTS.name, exact=False) == store.count(DOCUMENTS.name) == 5
    store.optimize(DOCUMENTS.name)
    assert store.count(DOCUMENTS.name, exact=False) == 5
    store.delete_content(DOCUMENTS.name, "s1")
    assert store.count(DOCUMENTS.name, exact=False) == 2
    store.drop(DOCUMENTS.name)
    assert store.count(DOCUMENTS.name, exact=False) == 0
    store.ensure(DOCUMENTS)
    assert store.count(DOCUMENTS.name, exact=False) == 0
    put(store, "s3", ["/c/z.md"])
    assert store.count(DOCUMENTS.name, exact=False) == 2
    assert store.count("no-such-collection", exact=False) == 0
    if backend == "edge":  # the count it keeps goes with the store: a closed one refuses
        store.close()
        with pytest.raises(StoreUnavailable, match="closed"):
            store.count(DOCUMENTS.name, exact=False)


def test_files_and_set_paths_by_filter(store):
    put(store, "s1", ["/a/x.md"])
    put(store, "s2", ["/b/y.md"], chunks=3)
    store.set_paths(DOCUMENTS.name, "s1", ["/a/x.md", "/c/x-copy.md"], mtime=5.0)
    files = {f.sha256: f for f in store.files(DOCUMENTS.name)}
    assert files["s1"].paths == ("/a/x.md", "/c/x-copy.md") and files["s1"].mtime == 5.0 and files["s2"].chunks == 3
    res, _ = store.scroll(DOCUMENTS.name, limit=100)
    assert all(("/c" in p.payload.get("folders", [])) == (p.payload["sha256"] == "s1") for p in res)
    assert store.count_where(DOCUMENTS.name, "folders", "/c") == 2
    assert store.any_where(DOCUMENTS.name, "folders", "/c") and not store.any_where(DOCUMENTS.name, "folders", "/d")
    assert not store.any_where("no_such_collection", "folders", "/c")


def test_delete_content_keeping_one_chunker(store):
    put(store, "s1", ["/a/x.md"], chunker="old")
    put(store, "s1", ["/a/x.md"], chunks=3, chunker="new")
    put(store, "s2", ["/a/y.md"])
    store.delete_content(DOCUMENTS.name, "s1", keep_chunker="new")
    assert store.count(DOCUMENTS.name) == 5
    store.delete_content(DOCUMENTS.name, "s1")
    assert store.count(DOCUMENTS.name) == 2 and {p.payload["sha256"] for p in store.scroll(DOCUMENTS.name)[0]} == {"s2"}


def test_scroll_pages_through_every_point_once_with_vectors(store):
    fill(store)
    seen, offset = [], None
    while True:
        page, offset = store.scroll(DOCUMENTS.name, match("suffix", ".md"), limit=7, offset=offset,
                                    with_payload=["sha256"], with_vectors=True)
        seen += page
        if offset is None:
            break
    want = {IDS[i] for i in range(N) if i % 3 == 0}
    assert len(seen) == len(want) and {p.id for p in seen} == want
    p = next(p for p in seen if p.id == IDS[3])
    assert set(p.payload) == {"sha256"}
    assert np.allclose(p.vector["minilm"], MINILM[3], atol=1e-6) and np.allclose(p.vector["bge_colbert"], COLBERT[3], atol=1e-6)
    assert p.vector["bge_sparse"].indices == SPARSE[3] and np.allclose(p.vector["bge_sparse"].values, SPARSE_W[3])


def test_float32_arrays_are_stored_as_the_lists_of_their_values(store):
    """The ingest hands the store float32 arrays (dense and ColBERT rows), not lists: every backend
    stores exactly what the same values as lists store."""
    def vectors(i: int, as_array: bool) -> dict:
        got = {"minilm": MINILM[i].astype(np.float32), "bge_dense": DENSE[i].astype(np.float32),
               "bge_colbert": COLBERT[i].astype(np.float32)}
        return {**(got if as_array else {k: v.tolist() for k, v in got.items()}),
                "bge_sparse": models.SparseVector(indices=SPARSE[i], values=SPARSE_W[i])}

    store.upsert(DOCUMENTS.name, [models.PointStruct.model_construct(id=IDS[i], payload=PAYLOAD[i], vector=vectors(i % 2, i < 2))
                                  for i in range(4)])
    page, _ = store.scroll(DOCUMENTS.name, limit=10, with_payload=False, with_vectors=True)
    got = {p.id: p.vector for p in page}
    for array_id, list_id in ((IDS[0], IDS[2]), (IDS[1], IDS[3])):
        assert got[array_id] == got[list_id]
    assert np.allclose(got[IDS[1]]["bge_colbert"], COLBERT[1], atol=1e-6)


def test_points_with_arrays_reach_a_server_as_lists():
    """qdrant-client's REST and gRPC paths take lists only (no server here: what each would send)."""
    colbert = COLBERT[0].astype(np.float32)
    point = models.PointStruct.model_construct(id=IDS[0], payload={}, vector={"bge_colbert": colbert, "minilm": MINILM[0].astype(np.float32)})
    with pytest.raises(ValueError):
        RestToGrpc.convert_point_struct(point)
    (plain,) = plain_points([point])
    assert plain.vector["bge_colbert"] == colbert.tolist() and json.loads(plain.model_dump_json())["vector"]["bge_colbert"] == colbert.tolist()
    RestToGrpc.convert_point_struct(plain)
    assert point.vector["bge_colbert"] is colbert  # the caller's point is left as it was


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
    schema = images_schema(8)
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


# -- lifecycle
def test_reopen_keeps_everything_and_second_opener_is_refused(opener, backend):
    s = opener()
    s.ensure(DOCUMENTS)
    fill(s)
    s.optimize(DOCUMENTS.name)
    q = unit(MINILM[1] + 0.1 * RNG.normal(size=384))
    before = [(p.id, p.score) for p in s.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10)]
    if backend != "server":
        with pytest.raises(StoreUnavailable, match="in use by another process"):
            opener()
    s.close()
    again = opener()
    assert again.count(DOCUMENTS.name) == N
    after = [(p.id, p.score) for p in again.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10)]
    assert [i for i, _ in after] == [i for i, _ in before]
    st = again.stats(DOCUMENTS.name)
    assert st.points == N and st.segments >= 1
    if backend != "server":
        assert st.disk_bytes > 0
