"""A documents collection holds the vectors of the families served when it was written, and gains an
optional family's when that family is first served: the engine reserves a dense vector's room in
every point whether the point has it or not (BGE-M3's dense and ColBERT vectors: ~8 KB a point)."""

from __future__ import annotations

import json

import pytest
import qdrant_edge as qe
from qdrant_client import models
from store_helpers import COLBERT, DENSE, IDS, MINILM, PAYLOAD, SPARSE, SPARSE_W, N, unit

from search.errors import StoreUnavailable
from search.store import DOCUMENTS, documents_schema, migrate, open_location
from search.store.edge import CONFIG_FILE

HALF = N // 2


def minilm_points(ids):
    return [models.PointStruct(id=IDS[i], payload=PAYLOAD[i], vector={"minilm": MINILM[i].tolist()}) for i in ids]


def bge_points(ids):
    return [models.PointStruct(id=IDS[i], payload=PAYLOAD[i], vector={
        "minilm": MINILM[i].tolist(), "bge_dense": DENSE[i].tolist(), "bge_colbert": COLBERT[i].tolist(),
        "bge_sparse": models.SparseVector(indices=SPARSE[i], values=SPARSE_W[i])}) for i in ids]


def layout(store, collection="documents"):
    if store.backend == "edge":
        cfg = json.loads((store.root / collection / CONFIG_FILE).read_text())
        return set(cfg["vectors"]) | set(cfg.get("sparse_vectors") or {})
    params = store.client.get_collection(collection).config.params
    return set(params.vectors or {}) | set(params.sparse_vectors or {})


@pytest.mark.parametrize("backend", ["edge", "local"])
def test_an_optional_family_joins_when_first_served(tmp_path, backend):
    store = open_location(backend, str(tmp_path / backend))
    store.ensure(documents_schema())  # MiniLM alone is served
    assert layout(store) == {"minilm"}
    store.upsert(DOCUMENTS.name, minilm_points(range(HALF)))

    store.ensure(documents_schema(["bge_m3"]))  # BGE-M3 served from now on
    assert layout(store) == {"minilm", "bge_dense", "bge_sparse", "bge_colbert"}
    store.upsert(DOCUMENTS.name, bge_points(range(HALF, N)))
    store.optimize(DOCUMENTS.name)
    assert store.count(DOCUMENTS.name) == N

    i = HALF + 3
    assert store.search(DOCUMENTS.name, "bge_dense", DENSE[i].tolist(), limit=1)[0].id == IDS[i]
    assert store.search(DOCUMENTS.name, "bge_colbert", COLBERT[i].tolist(), limit=1)[0].id == IDS[i]
    sparse = models.SparseVector(indices=SPARSE[i], values=SPARSE_W[i])
    assert IDS[i] in [p.id for p in store.search(DOCUMENTS.name, "bge_sparse", sparse, limit=5)]
    old = store.search(DOCUMENTS.name, "minilm", unit(MINILM[2] + 0.01).tolist(), limit=1)
    assert old[0].id == IDS[2]  # the points written before keep their vectors
    store.close()

    again = open_location(backend, str(tmp_path / backend))
    again.ensure(documents_schema())  # BGE-M3 no longer served: its vectors stay, nothing is checked against them
    assert layout(again) == {"minilm", "bge_dense", "bge_sparse", "bge_colbert"}
    assert again.search(DOCUMENTS.name, "bge_dense", DENSE[i].tolist(), limit=1)[0].id == IDS[i]
    if backend == "edge":  # the ColBERT vectors keep their settings: no HNSW graph, on disk
        colbert = json.loads((again.root / "documents" / CONFIG_FILE).read_text())["vectors"]["bge_colbert"]
        assert colbert["hnsw_config"]["m"] == 0 and colbert["memory"] == "cold"
    again.close()


@pytest.mark.parametrize("backend", ["edge", "local"])
def test_a_vector_of_another_width_is_still_refused(tmp_path, backend):
    store = open_location(backend, str(tmp_path / backend))
    store.ensure(documents_schema())
    wider = documents_schema()
    wider = type(wider)(name=wider.name, vectors={"minilm": models.VectorParams(size=768, distance=models.Distance.COSINE)},
                        payload_indexes=wider.payload_indexes)
    with pytest.raises(StoreUnavailable, match="different vector layout"):
        store.ensure(wider)
    store.close()


def test_migrate_drops_the_vectors_no_point_has(tmp_path):
    src = open_location("edge", str(tmp_path / "src"))
    src.ensure(DOCUMENTS)  # an index created before: every family's vectors declared
    src.upsert(DOCUMENTS.name, minilm_points(range(N)))
    dst = open_location("edge", str(tmp_path / "dst"))
    assert [(m.collection, m.target) for m in migrate(src, dst)] == [("documents", N)]
    assert layout(src) == {"minilm", "bge_dense", "bge_sparse", "bge_colbert"} and layout(dst) == {"minilm"}
    src.close()
    dst.close()


def test_a_family_no_longer_served_keeps_the_store_configured(tmp_path, monkeypatch):
    store = open_location("edge", str(tmp_path / "edge"))
    store.ensure(documents_schema(["bge_m3"]))
    store.upsert(DOCUMENTS.name, bge_points(range(4)))
    store.close()
    refused = []
    load = qe.EdgeShard.load

    def spy(path, config=None):
        try:
            return load(path, config) if config is not None else load(path)
        except Exception as exc:
            refused.append(exc)
            raise
    monkeypatch.setattr(qe.EdgeShard, "load", spy)
    again = open_location("edge", str(tmp_path / "edge"))
    again.ensure(documents_schema())  # opened with this version's settings, BGE-M3's vectors included
    assert not refused and again.count(DOCUMENTS.name) == 4
    again.close()
