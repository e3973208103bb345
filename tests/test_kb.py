"""Knowledge bases: named sets of documents and photos, each in its own collections; the default one
is today's index (the collections `documents` and `images`) as it is. Searched, listed and deleted
through the service, the REST API and the CLI, on the real Triton and embedded store."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from ingest_helper import ingest
from PIL import Image
from processes import run_cli

from search.api import create_app
from search.errors import BadRequest, EmptyCollection, NotFound
from search.services import SearchService
from search.store import kb_collection, kb_of, kb_thumbnails


def write_kb(folder, topic: str, n: int = 3, photos: int = 0):
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{topic}-{i}.md").write_text(f"# {topic} {i}\n\nEverything about {topic}, part {i}.\n")
    for i in range(photos):
        blocks = np.random.default_rng(i + len(topic)).integers(0, 256, (6, 8, 3), dtype=np.uint8)
        Image.fromarray(blocks).resize((160, 120), Image.NEAREST).save(folder / f"{topic}-{i}.jpg")
    return folder


@pytest.fixture
def two_kbs(settings, tmp_path):
    """Default KB: engineering notes; KB hr: holiday policy documents and two photos."""
    svc = SearchService(settings)
    eng, hr = write_kb(tmp_path / "eng", "kubernetes"), write_kb(tmp_path / "hr", "holidays", photos=2)
    assert ingest(svc, [eng]).counts["indexed"] == 3
    assert ingest(svc, [hr], kb="hr").counts["indexed"] == 5
    yield svc, eng, hr
    svc.close()


def test_names_of_kb_collections():
    assert kb_collection(None, "documents") == "documents" and kb_collection("default", "images") == "images"
    assert kb_collection("hr", "documents") == "kb-hr-documents" and kb_of("kb-hr-documents") == ("hr", "documents")
    assert kb_of("kb-my-team-images") == ("my-team", "images") and kb_of("documents") == ("default", "documents")
    assert kb_of("other") is None and kb_of("kb-x-other") is None
    for bad in ("", "HR", "../x", "a" * 41, "-x", "a b"):
        with pytest.raises(ValueError, match="kb"):
            kb_collection(bad, "documents")


def test_each_kb_is_searched_alone_and_deleted_whole(two_kbs, settings):
    svc, eng, hr = two_kbs
    in_hr = svc.search_documents("holidays", top_k=20, kb="hr")
    assert in_hr and {h.path for h in in_hr} <= {str(p) for p in hr.iterdir()}
    in_default = svc.search_documents("holidays", top_k=20)
    assert in_default and all(h.path.startswith(str(eng)) for h in in_default)
    assert svc.search_documents("holidays", top_k=20, kb="default") == in_default
    groups = svc.search_document_groups("holidays", top_k=20, kb="hr")
    assert {g.sha256 for g in groups} == {h.sha256 for h in in_hr}
    photos = svc.search_images("a photo", kb="hr")
    assert len(photos) == 2 and all(h.path.startswith(str(hr)) for h in photos)
    assert all(h.thumbnail.startswith(str(kb_thumbnails(settings.data_dir, "hr"))) for h in photos)
    with pytest.raises(EmptyCollection, match="no photos"):
        svc.search_images("a photo")  # the default KB has none

    listed = svc.collections()
    assert listed["kbs"] == {"default": {"documents": 3, "images": 0}, "hr": {"documents": 3, "images": 2}}
    assert listed["collections"] == {"documents": 3, "images": 0}  # the default KB, as before KBs
    assert svc.collections(kbs=["hr"]) == {"collections": {}, "documents_with_bge_m3": 0,
                                           "kbs": {"hr": {"documents": 3, "images": 2}}}
    assert svc.knowledge_bases() == ["default", "hr"]
    assert set(svc.store_stats()["collections"]) == {"documents", "kb-hr-documents", "kb-hr-images"}

    assert svc.delete_kb("hr") == {"kb": "hr", "deleted": {"documents": 3, "images": 2}}
    assert not kb_thumbnails(settings.data_dir, "hr").exists()
    assert svc.knowledge_bases() == ["default"]
    with pytest.raises(EmptyCollection, match="'hr'"):
        svc.search_documents("holidays", kb="hr")
    assert svc.search_documents("holidays", top_k=20) == in_default  # the other KB is untouched
    with pytest.raises(NotFound, match="no knowledge base 'hr'"):
        svc.delete_kb("hr")
    with pytest.raises(BadRequest, match="kb"):
        svc.search_documents("holidays", kb="../etc")


def test_rest_and_cli_kbs(settings, tmp_path):
    hr = write_kb(tmp_path / "hr", "holidays")
    eng = write_kb(tmp_path / "eng", "kubernetes")
    r = run_cli("indexer", "ingest", str(hr), "--kb", "hr", "--json", settings=settings)
    assert r.returncode == 0, r.stderr
    r = run_cli("indexer", "ingest", str(eng), settings=settings)
    assert r.returncode == 0, r.stderr
    found = run_cli("search", "holidays", "--kb", "hr", "-k", "10", "--json", settings=settings)
    assert found.returncode == 0, found.stderr
    assert {h["path"] for h in json.loads(found.stdout)["hits"]} == {str(p) for p in hr.iterdir()}
    listed = run_cli("search", "kb", "list", "--json", settings=settings)
    assert json.loads(listed.stdout) == {"default": {"documents": 3, "images": 0}, "hr": {"documents": 3, "images": 0}}

    with TestClient(create_app(settings.model_copy(update={"api_roots": [tmp_path]}))) as c:
        body = c.post("/search/documents", json={"query": "holidays", "kb": "hr", "top_k": 10}).json()
        assert {h["path"] for h in body["hits"]} == {str(p) for p in hr.iterdir()}
        assert c.get("/kb").json()["kbs"].keys() == {"default", "hr"}
        assert c.get("/collections").json()["kbs"]["hr"] == {"documents": 3, "images": 0}
        other = write_kb(tmp_path / "ops", "pager duty")
        job = c.post("/ingest", json={"paths": [str(other)], "kb": "ops"}).json()
        for _ in range(600):
            state = c.get(f"/ingest/jobs/{job['job_id']}").json()
            if state["state"] in ("done", "failed"):
                break
            time.sleep(0.1)
        assert state["state"] == "done" and state["kb"] == "ops"
        assert c.get("/kb").json()["kbs"]["ops"] == {"documents": 3, "images": 0}
        assert c.post("/search/documents", json={"query": "x", "kb": "Bad Name"}).status_code == 422
        assert c.post("/search/documents", json={"query": "x", "kb": "nothing"}).status_code == 409
        assert c.delete("/kb/ops").json() == {"kb": "ops", "deleted": {"documents": 3, "images": 0}}
        assert c.delete("/kb/ops").status_code == 404
    deleted = run_cli("search", "kb", "delete", "hr", "--yes", settings=settings)
    assert deleted.returncode == 0 and "3 passages" in deleted.stdout, deleted.stderr
    gone = run_cli("search", "holidays", "--kb", "hr", settings=settings)
    assert gone.returncode == 6 and "'hr'" in gone.stderr
