"""Rankings that equal exact search where it matters: a collection of up to EXACT_POINTS points is
scanned, and a larger one's HNSW beam grows with the hits asked for and its size, so a top-100 on
the embedded engine (HNSW built) holds the exact top-100 (recall >= 0.99) at 20k and 100k points,
and a top-10 over 25,000 real MiniLM vectors holds the exact top-10 (recall >= 0.999)."""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import models
from real_text import embed, sentences

from search.store import documents_schema, image_vector, images_schema, open_location
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
        schema = images_schema({image_vector(): DIM})
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


REAL_POINTS, REAL_QUERIES = 25_000, 300


@pytest.fixture(scope="module")
def real_vectors(model_repo) -> np.ndarray:
    """25,300 real English sentences (the installed packages' docstrings) embedded by the repository's
    MiniLM in-process: about 1-2 minutes on 2 idle cores (the slow part of this module), kept for
    this module's tests only."""
    texts = sentences(REAL_POINTS + REAL_QUERIES)
    assert len(texts) == REAL_POINTS + REAL_QUERIES, len(texts)
    return embed(texts, model_repo)


def test_top_10_on_real_minilm_vectors_holds_the_exact_top_10(tmp_path, real_vectors):
    # Synthetic clusters passed at 0.99+ with a beam of 128 while real MiniLM vectors lost 0.4 % of
    # the exact top-10 at 28k points: the beam grows with the collection
    data, queries = real_vectors[:REAL_POINTS], real_vectors[REAL_POINTS:]
    store = open_location("edge", str(tmp_path / "store"))
    try:
        schema = documents_schema()
        store.ensure(schema)
        for start in range(0, REAL_POINTS, 2_000):
            store.upsert(schema.name, [models.PointStruct(id=i, vector={"minilm": data[i].tolist()},
                                                          payload={"sha256": str(i)})
                                       for i in range(start, min(REAL_POINTS, start + 2_000))])
        store.optimize(schema.name)
        assert store.stats(schema.name).indexed_vectors  # the HNSW answers, not a scan
        # a hit counts when it scores at least the exact 10th (ties of near-duplicate sentences)
        tenth = -np.sort(-(queries @ data.T), axis=1)[:, 9]
        recall = [sum(float(data[int(p.id)] @ q) >= t - 1e-6 for p in store.search(
                  schema.name, "minilm", q.tolist(), limit=10, with_payload=False)) / 10 for q, t in zip(queries, tenth)]
        assert np.mean(recall) >= 0.999, (np.mean(recall), min(recall), sum(r < 1 for r in recall))
    finally:
        store.close()
