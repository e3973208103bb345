"""What a store holds, for tests that compare two ingests of the same files (a local one and a Ray
one): every point with its vectors and payload, and the vector comparison."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from indexer.service import IngestService
from search.config import Settings
from search.store import Store, open_store


def photo(path: Path, seed: int, fmt: str = "JPEG") -> None:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, fmt)
    path.write_bytes(buf.getvalue())


def mixed_folder(docs: Path) -> Path:
    """Adds to ``docs`` (the sample knowledge base) photos, a copy of each kind, and bad files of both kinds."""
    for i in range(4):
        photo(docs / f"photo{i}.jpg", i)
    photo(docs / "pic.png", 9, "PNG")
    shutil.copy(docs / "photo0.jpg", docs / "photo0-copy.jpg")
    first = sorted(docs.glob("*.md"))[0]
    shutil.copy(first, docs / ("copy-of-" + first.name))
    (docs / "binary.txt").write_bytes(bytes(range(256)) * 40)
    (docs / "empty.txt").write_bytes(b"")
    (docs / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (docs / "dangling.md").symlink_to(docs / "does-not-exist.md")
    return docs


def compact(vec: dict) -> dict:
    """A point's vectors as float32 arrays (a sparse one as it is): a ColBERT multivector read back as
    Python lists costs 32 bytes a value, and a store of long documents held so twice exhausted a
    2-core CI machine's memory."""
    return {name: v if hasattr(v, "indices") else np.asarray(v, dtype=np.float32) for name, v in vec.items()}


def points_of(store: Store, data_dir: Path, vectors: bool = True) -> dict:
    """Every point of every collection: (collection, id) -> (vectors, payload), thumbnails relative to
    the data dir; ``vectors=False``: payloads only (vectors None)."""
    out = {}
    for coll in store.collections():
        for p in store.all_points(coll, with_vectors=vectors, batch=16):  # a page of long passages' rows: ~130 MB as lists
            payload = dict(p.payload)
            if "thumbnail" in payload:
                payload["thumbnail"] = os.path.relpath(payload["thumbnail"], data_dir)
            out[(coll, str(p.id))] = (compact(p.vector) if vectors else None, payload)
    return out


def stored(settings: Settings, vectors: bool = True) -> dict:
    """``points_of`` the store ``settings`` open."""
    store = open_store(settings)
    try:
        return points_of(store, settings.data_dir, vectors)
    finally:
        store.close()


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_same_vectors(x: dict, y: dict) -> None:
    assert x.keys() == y.keys()
    for name, v in x.items():
        if hasattr(v, "indices"):  # sparse
            assert list(v.indices) == list(y[name].indices)
            assert np.allclose(v.values, y[name].values, atol=1e-4)
        elif v.ndim == 2:  # multivector
            assert len(v) == len(y[name]) and all(cosine(a, b) >= 0.9999 for a, b in zip(v, y[name], strict=True))
        else:
            assert cosine(v, y[name]) >= 0.9999


def assert_same_points(a: dict, b: dict) -> None:
    """The same ids and payloads, and vectors at cosine >= 0.9999."""
    assert a.keys() == b.keys()
    for key, (vec, payload) in a.items():
        assert b[key][1] == payload, (key, payload, b[key][1])
        assert_same_vectors(vec, b[key][0])


def run(settings: Settings, paths, **kw):
    """One ingest of ``paths`` with its own service (store opened and closed)."""
    svc = IngestService(settings)
    try:
        return svc.ingest(paths, **kw)
    finally:
        svc.close()
