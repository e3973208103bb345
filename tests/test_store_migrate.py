"""Migration between backends (the embedded engine, qdrant-client's local mode as the stand-in
for a server) and the store commands as a user meets them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import one_line_error, run
from qdrant_client import models
from store_helpers import IDS, MINILM, SPARSE, N, fill, unit

from search.store import DOCUMENTS, image_vector, images_schema, migrate, open_location, point_id


@pytest.mark.parametrize("src_kind,dst_kind", [("edge", "local"), ("local", "edge")])
def test_migrate_copies_every_vector_kind_and_payload(tmp_path, src_kind, dst_kind):
    src = open_location(src_kind, str(tmp_path / "src"))
    src.ensure(DOCUMENTS)
    fill(src)
    src.ensure(images_schema({image_vector(): 8}))
    src.upsert("images", [models.PointStruct(id=point_id(f"p{i}", "clip", 0), vector={"clip": [float(i + 1)] + [0.5] * 7},
                                             payload={"sha256": f"p{i}", "location": {"lat": 1.0, "lon": 2.0}}) for i in range(5)])
    dst = open_location(dst_kind, str(tmp_path / "dst"))
    seen = []
    result = migrate(src, dst, batch=50, progress=lambda c, done, total: seen.append((c, done, total)))
    assert [(m.collection, m.source, m.target) for m in result] == [("documents", N, N), ("images", 5, 5)]
    assert seen[-1] == ("images", 5, 5) and ("documents", 50, N) in seen
    assert dst.stats("images").points == 5
    a, _ = src.scroll(DOCUMENTS.name, limit=N, with_vectors=True)
    b, _ = dst.scroll(DOCUMENTS.name, limit=N, with_vectors=True)
    a, b = {p.id: p for p in a}, {p.id: p for p in b}
    assert set(a) == set(b) == set(IDS)
    for pid in IDS[:10]:
        assert a[pid].payload == b[pid].payload
        for name in ("minilm", "bge_dense", "bge_colbert"):
            assert np.allclose(a[pid].vector[name], b[pid].vector[name], atol=1e-6)
        assert b[pid].vector["bge_sparse"].indices == SPARSE[IDS.index(pid)]
    q = unit(MINILM[2] + 0.1)
    assert ([p.id for p in src.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10)]
            == [p.id for p in dst.search(DOCUMENTS.name, "minilm", q.tolist(), limit=10)])
    again = migrate(src, dst)  # resumable: the same ids, no duplicates
    assert [m.target for m in again] == [N, 5]
    src.close()
    dst.close()


def test_store_commands_stats_migrate_and_the_old_layout(env, docs, tmp_path):
    # An existing user's index in the old default layout (qdrant-client local mode under <data dir>/qdrant).
    old = {**env, "SEARCH_STORE": "local"}
    assert run(old, "ingest", str(docs), module="indexer").returncode == 0
    one_line_error(run(env, "reset password"), "nothing indexed yet", "search store migrate --from local --to edge")
    moved = run(env, "store", "migrate", "--from", "local", "--to", "edge")
    assert moved.returncode == 0, moved.stderr
    assert "(verified)" in moved.stdout
    stats = json.loads(run(env, "store", "stats", "--json").stdout)
    docs_stats = stats["collections"]["documents"]
    assert stats["backend"] == "edge" and docs_stats["points"] > 17 and stats["disk_bytes"] > 0
    assert set(docs_stats["payload_indexes"]) == set(DOCUMENTS.payload_indexes) and docs_stats["segments"] >= 1
    found = run(env, "reset password", "--top-k", "1", "--json")
    assert json.loads(found.stdout)["hits"][0]["path"].endswith("reset-password.md")
    # Embedded engine -> another store (local mode stands in for a server here), then search there.
    target = tmp_path / "elsewhere"
    out = json.loads(run(env, "store", "migrate", "--to", f"local:{target}", "--json").stdout)
    assert out[0]["collection"] == "documents" and out[0]["target"] == docs_stats["points"]
    there = run({**env, "SEARCH_STORE": "local", "SEARCH_QDRANT_PATH": str(target)}, "reset password", "-k", "1", "--json")
    assert json.loads(there.stdout)["hits"][0]["path"].endswith("reset-password.md")
    human = run(env, "store", "stats")
    assert human.returncode == 0 and "documents" in human.stdout and "edge at" in human.stdout
    one_line_error(run(env, "store", "migrate", "--to", "edge"), "target is the source")
    one_line_error(run(env, "store", "migrate", "--to", "nowhere:x"), "expected edge[:PATH]")
