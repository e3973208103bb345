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
