"""What `indexer watch` relies on in a large collection: a batch of changed files is searchable as
soon as it is written, and the store's optimize after it indexes the new points apart, leaving the
collection's HNSW segment as it was: no full rebuild per batch (bench/bench_store.py --phases
build,query,upkeep measures it at a million points)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import DIM, INDEXED, clustered, points

from search.store import image_vector, images_schema, open_location


def segment_dirs(root: Path) -> set[str]:
    return {p.name for p in root.rglob("segments/*") if p.is_dir()}


def test_a_watch_batch_is_searchable_at_once_and_does_not_rebuild_the_index(tmp_path):
    root = tmp_path / "store"
    store = open_location("edge", str(root))
    try:
        store.ensure(images_schema({image_vector(): DIM}))
        base = clustered(INDEXED, 1)
        for start in range(0, INDEXED, 256):
            store.upsert("images", points(base[start:start + 256], start))
        store.optimize("images")
        stats = store.stats("images")
        assert stats.indexed_vectors == INDEXED and stats.status == "HNSW", stats
        built = segment_dirs(root)

        for batch in (clustered(1, 2), clustered(2000, 3)):  # one changed file, then a burst of them
            first = store.count("images")
            for start in range(0, len(batch), 256):
                store.upsert("images", points(batch[start:start + 256], first + start))
            found = store.search("images", "clip", batch[-1].tolist(), limit=1)  # before any optimize
            assert found and found[0].id == first + len(batch) - 1
            store.optimize("images")
            assert built <= segment_dirs(root), "the optimize after a batch rebuilt the indexed segment"
            assert store.stats("images").indexed_vectors >= INDEXED
        assert store.count("images") == INDEXED + 2001
    finally:
        store.close()
