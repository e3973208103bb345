"""The store contract's backends and corpus (tests/test_store_contract.py, tests/test_store_queries.py,
tests/test_store_migrate.py); its fixtures (``backend``, ``opener``, ``store``) are in conftest.py."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from qdrant_client import models

from search.store import DOCUMENTS, folders_of, open_location, point_id

SERVER = os.environ.get("QDRANT_URL")
BACKENDS = [
    pytest.param("edge", id="edge"),
    pytest.param("local", id="local"),
    pytest.param("server", id="server", marks=pytest.mark.skipif(not SERVER, reason="QDRANT_URL is not set: no Qdrant server to test")),
]


def open_backend(backend: str, tmp_path, prefix: str):
    if backend == "edge":
        return open_location("edge", str(tmp_path / "store-edge"), prefix=prefix)
    if backend == "local":
        return open_location("local", str(tmp_path / "qdrant"), prefix=prefix)
    return open_location("server", SERVER, api_key=os.environ.get("QDRANT_API_KEY"), prefix=prefix)


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


# Clustered 512-d photo vectors in numbers that make the engine build HNSW (tests/test_store_upkeep.py,
# tests/test_store_quantization.py)
DIM, INDEXED = 512, 6000  # enough 512-d points for the engine to build HNSW (its threshold is in KB)


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 50 centres, as embeddings are (HNSW builds fast on them)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).normal(size=(50, DIM))
    x = centres[rng.integers(0, 50, n)] + 0.4 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def points(vectors: np.ndarray, first: int) -> list[models.PointStruct]:
    return [models.PointStruct(id=first + i, vector={"clip": v.tolist()},
                               payload={"path": f"/photos/{first + i}.jpg", "folders": ["/photos"]})
            for i, v in enumerate(vectors)]
