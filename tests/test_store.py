"""The store on qdrant-client's in-memory mode: schema, content-derived ids, re-pointing paths."""

from __future__ import annotations

import pytest
from qdrant_client import models

from search.store import DOCUMENTS, Store, folders_of, point_id


@pytest.fixture
def store():
    s = Store(":memory:", prefix="t_")
    s.ensure(DOCUMENTS)
    yield s
    s.close()


def put(store, sha, paths, chunks=2, chunker="c1"):
    store.upsert(DOCUMENTS.name, [
        models.PointStruct(id=point_id(sha, chunker, i), vector={"minilm": [1.0] + [0.0] * 383},
                           payload={"sha256": sha, "paths": paths, "path": paths[0], "chunk": i, "n_chunks": chunks,
                                    "size": 1, "mtime": 1.0, "chunker": chunker})
        for i in range(chunks)])


def test_schema_is_created_once_and_checked(store):
    info = store.client.get_collection("t_documents")
    assert info.config.params.vectors["minilm"].size == 384
    store.ensure(DOCUMENTS)  # idempotent
    store.client.delete_collection("t_documents")
    store.client.create_collection("t_documents", vectors_config={"minilm": models.VectorParams(size=3, distance=models.Distance.COSINE)})
    with pytest.raises(Exception, match="different vector layout"):
        store.ensure(DOCUMENTS)


def test_ids_are_derived_from_content():
    assert point_id("abc", "c1", 0) == point_id("abc", "c1", 0)
    assert len({point_id("abc", "c1", 0), point_id("abc", "c1", 1), point_id("abd", "c1", 0), point_id("abc", "c2", 0)}) == 4


def test_same_content_twice_is_one_set_of_points(store):
    put(store, "s1", ["/a/x.md"])
    put(store, "s1", ["/a/x.md"])
    assert store.count(DOCUMENTS.name) == 2


def test_files_lists_complete_content_and_set_paths(store):
    put(store, "s1", ["/a/x.md"])
    put(store, "s2", ["/b/y.md"], chunks=3)
    store.set_paths(DOCUMENTS.name, "s1", ["/a/x.md", "/c/x-copy.md"])
    files = {f.sha256: f for f in store.files(DOCUMENTS.name)}
    assert files["s1"].paths == ("/a/x.md", "/c/x-copy.md") and files["s2"].chunks == 3
    res, _ = store.client.scroll("t_documents", with_payload=True)
    assert all("/c" in p.payload["folders"] for p in res if p.payload["sha256"] == "s1")


def test_delete_content_keeping_one_chunker(store):
    put(store, "s1", ["/a/x.md"], chunker="old")
    put(store, "s1", ["/a/x.md"], chunks=3, chunker="new")
    store.delete_content(DOCUMENTS.name, "s1", keep_chunker="new")
    assert store.count(DOCUMENTS.name) == 3
    store.delete_content(DOCUMENTS.name, "s1")
    assert store.count(DOCUMENTS.name) == 0


def test_folders_of():
    assert folders_of("/a/b/c.md") == ["/a/b", "/a", "/"]
