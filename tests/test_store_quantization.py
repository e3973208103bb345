"""Quantized vectors in the embedded store (what bench/bench_store.py measures as backends edge+scalar
and edge+binary): the collection builds its HNSW index on them; int8 vectors, with 4x the candidates
rescored with the originals, find what exact search finds. One bit a dimension loses too much on
clustered vectors (recall ~0.6 even then): the bench measures it, this test only that it serves."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from qdrant_client import models
from store_helpers import DIM, INDEXED, clustered, points

from search.store import DOCUMENTS, image_vector, images_schema, open_location
from search.store.base import EXACT_POINTS, OVERSAMPLING, QUANTIZATION
from search.store.edge import CONFIG_FILE
from search.store.edge_translate import edge_quantization

QUANTIZED = {
    "scalar": models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8)),
    "binary": models.BinaryQuantization(binary=models.BinaryQuantizationConfig()),
}


@pytest.mark.parametrize("kind", sorted(QUANTIZED))
def test_a_quantized_collection_is_indexed_and_finds_the_exact_neighbours(tmp_path, kind):
    schema = images_schema({image_vector(): DIM})
    schema = replace(schema, vectors={n: p.model_copy(update={"quantization_config": QUANTIZED[kind]})
                                      for n, p in schema.vectors.items()})
    store = open_location("edge", str(tmp_path / "store"))
    try:
        store.ensure(schema)
        data = clustered(INDEXED, 1)
        for start in range(0, INDEXED, 256):
            store.upsert("images", points(data[start:start + 256], start))
        store.optimize("images")
        assert store.stats("images").status == "HNSW"
        hits = 0
        rescored = models.QuantizationSearchParams(rescore=True, oversampling=4.0)
        for q in clustered(20, 7):
            want = set(np.argsort(-(data @ q))[:10].tolist())
            got = store.search("images", "clip", q.tolist(), limit=10,
                               params=models.SearchParams(hnsw_ef=128, quantization=rescored))
            assert len(got) == 10
            hits += len({p.id for p in got} & want)
        if kind == "scalar":
            assert hits / 200 >= 0.95
    finally:
        store.close()


def test_a_quantization_the_embedded_store_lacks_is_refused_in_one_line():
    pq = models.ProductQuantization(product=models.ProductQuantizationConfig(compression=models.CompressionRatio.X16))
    with pytest.raises(ValueError, match="no ProductQuantization"):
        edge_quantization(pq)
    assert edge_quantization(None) is None


@pytest.mark.parametrize("backend", ["edge", "local"])
def test_the_quantization_setting_quantizes_what_has_a_graph_and_rescores(tmp_path, backend):
    store = open_location(backend, str(tmp_path / backend), quantization="scalar")
    try:
        store.ensure(DOCUMENTS)
        made = store.stored_schema(DOCUMENTS).vectors
        assert made["minilm"].quantization_config == made["bge_dense"].quantization_config == QUANTIZATION["scalar"]
        assert made["bge_colbert"].quantization_config is None  # only rescored: no graph, no copy
        if backend == "edge":
            stored = json.loads((store.root / "documents" / CONFIG_FILE).read_text())["vectors"]
            assert stored["minilm"]["quantization_config"]["scalar"]["type"] == "int8"
            assert "quantization_config" not in stored["bge_colbert"]
        store.upsert("documents", [models.PointStruct(id=i, vector={"minilm": [1.0] + [0.0] * 383}, payload={})
                                   for i in range(EXACT_POINTS + 1)])
        params = store.search_params("documents", 10, None)
        assert params.quantization.rescore and params.quantization.oversampling == OVERSAMPLING
    finally:
        store.close()
    plain = open_location(backend, str(tmp_path / "plain"))
    assert plain.stored_schema(DOCUMENTS) is DOCUMENTS and plain.quantization is None
    plain.close()
    with pytest.raises(ValueError, match="expected none or scalar"):
        open_location(backend, str(tmp_path / "x"), quantization="product")


def test_the_setting_searches_a_quantized_index_as_well_as_exact(tmp_path):
    store = open_location("edge", str(tmp_path / "store"), quantization="scalar")
    try:
        store.ensure(images_schema({image_vector(): DIM}))
        data = clustered(INDEXED, 1)
        for start in range(0, INDEXED, 256):
            store.upsert("images", points(data[start:start + 256], start))
        store.optimize("images")
        hits = 0
        for q in clustered(20, 7):
            want = set(np.argsort(-(data @ q))[:10].tolist())
            hits += len({p.id for p in store.search("images", "clip", q.tolist(), limit=10)} & want)
        assert hits / 200 >= 0.95
    finally:
        store.close()
