"""Per-document results (group_by=document), pages (offset) and bounded passage text: the service
on the real Triton and embedded store, the same grouping on every store backend, and the REST
and CLI faces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from ingest_helper import ingest
from processes import run_cli
from qdrant_client import models

from search.api import create_app
from search.errors import BadRequest
from search.services import MAX_DEPTH, MAX_PAGE, SearchService
from search.store import CollectionSchema, edge, open_location

TOPICS = ["password reset", "laptop encryption", "meeting rooms", "travel expenses", "printer queue", "vpn access"]


@pytest.fixture
def many_passages(settings, tmp_path):
    """Six documents of several short passages each (small chunks), indexed."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i, topic in enumerate(TOPICS):
        paras = [f"## Part {j}\n\nAbout {topic}: step {j} of the {topic} guide, note {i}-{j}. " * 3 for j in range(5)]
        (folder / f"doc{i}.md").write_text(f"# {topic.title()}\n\n" + "\n\n".join(paras))
    s = settings.model_copy(update={"chunk_tokens": 40, "chunk_overlap": 0})
    svc = SearchService(s)
    report = ingest(svc, [folder])
    assert report.counts["indexed"] == len(TOPICS)
    yield svc
    svc.close()


def key(h):
    return h.sha256, h.chunk


def test_grouping_returns_distinct_documents_in_score_order(many_passages):
    svc = many_passages
    flat = svc.search_documents("how do I reset my password", top_k=MAX_PAGE)
    assert len({h.sha256 for h in flat}) == len(TOPICS) and len(flat) > 2 * len(TOPICS)
    groups = svc.search_document_groups("how do I reset my password", top_k=10, group_size=2)
    assert len(groups) == len(TOPICS)  # all of them: fewer documents than asked for
    assert len({g.sha256 for g in groups}) == len(groups)
    assert [g.score for g in groups] == sorted((g.score for g in groups), reverse=True)
    # Each document at its best passage, in the order the documents first appear in the passage ranking.
    first_seen = list(dict.fromkeys(h.sha256 for h in flat))
    assert [g.sha256 for g in groups] == first_seen
    for g in groups:
        mine = [h for h in flat if h.sha256 == g.sha256]
        assert [key(h) for h in g.hits] == [key(h) for h in mine[:2]]
        assert g.more == len(mine) - 2  # every passage was within the window searched
        assert g.as_dict()["hits"][0]["citation"] == g.hits[0].citation
    assert groups[0].path.endswith("doc0.md")


def test_pages_do_not_overlap_and_concatenate_to_the_unpaged_list(many_passages):
    svc = many_passages
    q = "printer queue"
    whole = svc.search_documents(q, top_k=12)
    pages = [svc.search_documents(q, top_k=4, offset=o) for o in (0, 4, 8)]
    assert [key(h) for p in pages for h in p] == [key(h) for h in whole]
    assert len({key(h) for p in pages for h in p}) == 12
    total = len(svc.search_documents(q, top_k=MAX_PAGE))
    assert svc.search_documents(q, top_k=5, offset=total) == []  # past the end: an empty page
    groups = svc.search_document_groups(q, top_k=6)
    grouped_pages = [svc.search_document_groups(q, top_k=2, offset=o) for o in (0, 2, 4)]
    assert [g.sha256 for p in grouped_pages for g in p] == [g.sha256 for g in groups]
    with pytest.raises(BadRequest, match="offset"):
        svc.search_documents(q, top_k=10, offset=MAX_DEPTH)
    with pytest.raises(BadRequest, match="top_k"):
        svc.search_documents(q, top_k=MAX_PAGE + 1)
    with pytest.raises(BadRequest, match="group_size"):
        svc.search_document_groups(q, group_size=0)


def test_max_chars_trims_passages_and_full_text_does_not(many_passages):
    svc = many_passages
    [hit] = svc.search_documents("vpn access", top_k=1, max_chars=30)
    assert hit.truncated and len(hit.text) <= 30 and hit.length > 30
    [whole] = svc.search_documents("vpn access", top_k=1, full_text=True)
    assert not whole.truncated and len(whole.text) == whole.length == hit.length
    [group] = svc.search_document_groups("vpn access", top_k=1, group_size=3, max_chars=30)
    assert all(h.truncated and len(h.text) <= 30 for h in group.hits)


@pytest.mark.parametrize("backend", ["edge", "edge, 10 keys kept", "local"])
def test_store_grouping_is_the_same_on_every_backend(backend, tmp_path, monkeypatch):
    """20 groups of 1-7 points with known vectors: the groups, their order, their points and the
    counts follow from a sort of the exact scores."""
    rng = np.random.default_rng(7)
    schema = CollectionSchema("documents", {"v": models.VectorParams(size=8, distance=models.Distance.COSINE)},
                              {"sha256": models.PayloadSchemaType.KEYWORD})
    vectors, groups = rng.normal(size=(80, 8)), rng.integers(0, 20, 80)
    if backend == "edge, 10 keys kept":  # the engine's kept document keys are cleared on every search
        monkeypatch.setattr(edge, "ID_KEYS_KEPT", 10)
        backend = "edge"
    store = open_location(backend, str(tmp_path / backend))
    try:
        store.ensure(schema)
        store.upsert("documents", [models.PointStruct(id=i, vector={"v": v.tolist()}, payload={"sha256": f"g{g}", "i": i})
                                   for i, (v, g) in enumerate(zip(vectors, groups, strict=True))])
        q = rng.normal(size=8)
        scores = vectors @ q / np.linalg.norm(vectors, axis=1) / np.linalg.norm(q)
        order = np.argsort(-scores)
        expected: dict[str, list[int]] = {}
        for i in order:
            expected.setdefault(f"g{groups[i]}", []).append(int(i))
        got = store.search_groups("documents", "v", q.tolist(), group_by="sha256", limit=5, group_size=2, offset=3)
        want = list(expected.items())[3:8]
        assert [g.key for g in got] == [k for k, _ in want]
        assert [[p.payload["i"] for p in g.hits] for g in got] == [ids[:2] for _, ids in want]
        assert [g.matched for g in got] == [len(ids) for _, ids in want]
        page = store.search("documents", "v", q.tolist(), limit=10, offset=10)
        assert [p.payload["i"] for p in page] == [int(i) for i in order[10:20]]

        # Points deleted between the window's search and the read of the kept hits' payloads are left
        # out; a group they leave empty is too.
        gone = [*want[0][1][:2], want[1][1][0]]
        read = store.payloads

        def deleted_meanwhile(collection, ids):
            store.delete(collection, models.Filter(must=[models.HasIdCondition(has_id=gone)]))
            return read(collection, ids)

        store.payloads = deleted_meanwhile
        got = store.search_groups("documents", "v", q.tolist(), group_by="sha256", limit=5, group_size=2, offset=3)
        assert [g.key for g in got] == [k for k, _ in want[1:]]
        assert [[p.payload["i"] for p in g.hits] for g in got] == [[i for i in ids[:2] if i not in gone] for _, ids in want[1:]]
    finally:
        store.close()


def test_rest_per_document_pages(many_passages, settings):
    many_passages.close()  # the app opens the store itself
    with TestClient(create_app(settings)) as c:
        r = c.post("/search/documents", json={"query": "meeting rooms", "group_by": "document", "group_size": 2, "top_k": 4})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["groups"]) == 4 and body["next_offset"] == 4 and body["group_by"] == "document"
        assert len({g["sha256"] for g in body["groups"]}) == 4 and all(len(g["hits"]) == 2 for g in body["groups"])
        assert all(g["more"] >= 0 for g in body["groups"]) and body["context"].startswith("[1] ")
        rest = c.post("/search/documents", json={"query": "meeting rooms", "group_by": "document", "top_k": 4,
                                                 "offset": 4}).json()
        assert len(rest["groups"]) == 2 and rest["next_offset"] is None
        assert not {g["sha256"] for g in rest["groups"]} & {g["sha256"] for g in body["groups"]}
        whole = c.post("/search/documents", json={"query": "meeting rooms", "top_k": 6}).json()["hits"]
        p1 = c.post("/search/documents", json={"query": "meeting rooms", "top_k": 3}).json()
        p2 = c.post("/search/documents", json={"query": "meeting rooms", "top_k": 3, "offset": p1["next_offset"]}).json()
        assert [(h["sha256"], h["chunk"]) for h in p1["hits"] + p2["hits"]] == [(h["sha256"], h["chunk"]) for h in whole]
        for bad, field in [({"group_size": 2}, "group_size"), ({"offset": -1}, "offset"),
                           ({"top_k": MAX_PAGE, "offset": MAX_DEPTH - 1}, "offset + top_k"),
                           ({"group_by": "folder"}, "group_by")]:
            r = c.post("/search/documents", json={"query": "x", **bad})
            assert r.status_code == 422 and field in r.json()["detail"], r.text


def test_cli_per_document_and_offset(many_passages, settings):
    """The REST API's names (--group-by, --group-size); the earlier --per-document(-passages) still work."""
    many_passages.close()  # the CLI opens the store itself
    r = run_cli("search", "printer queue", "--group-by", "document", "--group-size", "2", "-k", "3", "--json",
                settings=settings)
    assert r.returncode == 0, r.stderr
    groups = json.loads(r.stdout)["groups"]
    assert len(groups) == 3 and len({g["sha256"] for g in groups}) == 3 and all(len(g["hits"]) == 2 for g in groups)
    r2 = run_cli("search", "printer queue", "--per-document", "-k", "3", "--offset", "3", "--json", settings=settings)
    assert r2.returncode == 0, r2.stderr
    assert not {g["sha256"] for g in json.loads(r2.stdout)["groups"]} & {g["sha256"] for g in groups}
    shown = run_cli("search", "printer queue", "--per-document", "--per-document-passages", "2", "-k", "2", settings=settings)
    assert shown.returncode == 0 and "more passages" in shown.stdout, shown.stdout + shown.stderr
    bad = run_cli("search", "x", "--group-size", "2", settings=settings)
    assert bad.returncode == 2 and "--group-size: applies only with --group-by" in bad.stderr, bad.stderr
    photos = run_cli("search", "--images", "x", "--offset", "2", settings=settings)
    assert photos.returncode != 0 and "--offset" in photos.stderr
