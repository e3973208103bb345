"""One contract for every store backend: the embedded engine (qdrant-edge), qdrant-client's local
mode (the stand-in for the server's API here) and a real Qdrant server when QDRANT_URL is set.

Every test runs the same calls on each backend and checks them against the same expectation,
computed here with numpy from Qdrant's documented formulas (cosine, IDF, MAX_SIM, RRF with k=2),
so the backends agree with each other by construction. This file: the schema, writes and
content-level operations, and the lifecycle; the queries: tests/test_store_queries.py (the
backends, fixtures and corpus: tests/store_helpers.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from qdrant_client import models
from qdrant_client.conversions.conversion import RestToGrpc
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

from search.errors import StoreUnavailable
from search.store import DOCUMENTS, CollectionSchema, match, point_id
from search.store.util import plain_points


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
