"""What scale needs of the status faces (`search status`, the page's status, `search store stats`):
they read the store's own counts and statistics, never every point, so they stay fast at a million
points. A test at small scale counts the store calls they make."""

from __future__ import annotations

import numpy as np
from qdrant_client import models

from search.config import Settings
from search.services import SearchService
from search.store import image_vector, images_schema


def test_status_and_store_stats_scan_no_points(tmp_path, monkeypatch):
    svc = SearchService(Settings(data_dir=tmp_path / "data"))
    try:
        store = svc.store
        schema = images_schema({image_vector(): 8})
        store.ensure(schema)
        rng = np.random.default_rng(0)
        store.upsert(schema.name, [models.PointStruct(id=i, vector={image_vector(): rng.standard_normal(8).astype(np.float32)},
                                                      payload={"sha256": str(i)}) for i in range(50)])
        counts, scrolls = [], []
        real_count, real_scroll = store.count, store.scroll
        monkeypatch.setattr(store, "count", lambda c, flt=None, *, exact=True: counts.append((c, flt, exact)) or
                            real_count(c, flt, exact=exact))
        monkeypatch.setattr(store, "scroll", lambda *a, **k: scrolls.append(a) or real_scroll(*a, **k))
        shown = svc.collections()
        stats = svc.store_stats()
    finally:
        svc.close()
    assert shown["collections"]["images"] == 50 and stats["collections"]["images"]["points"] == 50
    assert counts and all(not exact for _, flt, exact in counts if flt is None), counts  # no exact count of all points
    assert all(c.must[0].key == "models" for _, c, _ in counts if c is not None)  # a keyword-index lookup at most
    assert scrolls == []
