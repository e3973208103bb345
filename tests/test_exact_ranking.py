"""Rankings that equal exact search where it matters: a collection of up to EXACT_POINTS points is
scanned, and a larger one's HNSW beam grows with the hits asked for, so a top-100 on the embedded
engine (HNSW built) holds the exact top-100 (recall >= 0.99) at 20k and 100k points."""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import models

from search.store import image_vector, images_schema, open_location
from search.store.base import EXACT_POINTS

DIM = 64  # small vectors keep the 100k-point HNSW build short; the data is clustered like embeddings


def embeddings(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """Points around 200 cluster centres, offset along one shared direction (a cone, as real
    embeddings are), normalised."""
    x = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
    x[:, 0] += 1.0
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("n", [EXACT_POINTS, 100_000])
def test_top_100_holds_the_exact_top_100(tmp_path, n):
    rng = np.random.default_rng(n)
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    data = embeddings(n, rng, centres)
    store = open_location("edge", str(tmp_path / "store"))
    try:
        schema = images_schema(DIM)
        store.ensure(schema)
        name = image_vector()
        for start in range(0, n, 2_000):
            store.upsert(schema.name, [models.PointStruct(id=i, vector={name: data[i]}, payload={"sha256": str(i)})
                                       for i in range(start, min(n, start + 2_000))])
        store.optimize(schema.name)
        queries = embeddings(40, rng, centres)
        exact = np.argsort(-(queries @ data.T), axis=1)[:, :100]
        recall = []
        for q, truth in zip(queries, exact):
            got = store.search(schema.name, name, q.tolist(), limit=100, with_payload=False)
            recall.append(len({int(p.id) for p in got} & set(truth.tolist())) / 100)
        assert np.mean(recall) >= 0.99 and min(recall) >= 0.95, (np.mean(recall), min(recall))
        if n > EXACT_POINTS:
            assert store.stats(schema.name).indexed_vectors  # the HNSW answered, not a scan
    finally:
        store.close()
