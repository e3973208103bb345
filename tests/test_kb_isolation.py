"""Uploads belong to the knowledge base they were sent to: a write key scoped to one KB cannot have the
server ingest another KB's uploads (nor anything else in the data dir) into its own, by any path,
when the request arrives or when its job runs (resumed jobs included). Real store, real Triton,
the app through TestClient, keys from the real keys file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from indexer.confine import OUTSIDE
from indexer.jobs import JOBS_FILE, Job, JobStore
from search.api import create_app
from search.keys import EVERYTHING, key_file

SALARY = b"# Salaries 2025\n\nThe head of finance earns 412,000 crowns a year; payroll closes on the 25th.\n"
DEPLOY = b"# Deploys\n\nProduction deploys run on Tuesdays after the canary has been green for an hour.\n"


def wait(c: TestClient, response, key: str, timeout: float = 120) -> dict:
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = c.get(f"/ingest/jobs/{job_id}", headers={"X-API-Key": key}).json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still running")


def texts(c: TestClient, key: str, kb: str, query: str) -> list[str]:
    r = c.post("/search/documents", headers={"X-API-Key": key}, json={"query": query, "kb": kb, "top_k": 20})
    if r.status_code == 409:  # nothing indexed in that KB
        return []
    assert r.status_code == 200, r.text
    return [h["text"] for h in r.json()["hits"]]


@pytest.fixture
def world(settings, tmp_path):
    """Keys for hr and eng; an API root (tmp_path) that holds the data dir itself."""
    keys = key_file(settings)
    hr, eng = keys.add("hr-w", ["hr"], "write"), keys.add("eng-w", ["eng"], "write")
    shared = tmp_path / "shared"
    shared.mkdir()
    served = settings.model_copy(update={"api_roots": [tmp_path]})
    assert settings.data_dir.resolve().is_relative_to(tmp_path.resolve())
    return served, hr, eng, shared


def test_an_eng_key_cannot_pull_hr_uploads_into_eng(world, tmp_path):
    settings, hr, eng, shared = world
    data = settings.data_dir.resolve()
    with TestClient(create_app(settings)) as c:
        job = wait(c, c.post("/ingest/upload", headers={"X-API-Key": hr}, data={"kb": "hr"},
                             files=[("files", ("hr_salary.md", SALARY, "text/markdown"))]), hr)
        assert job["state"] == "done" and job["counts"] == {"indexed": 1}, job
        folder = Path(job["paths"][0])
        assert folder.parent == data / "uploads" / "hr", folder  # uploads are kept per KB
        (shared / "to-hr").symlink_to(folder)  # a link inside an API root into hr's uploads
        leaky = shared / "leaky"
        leaky.mkdir()
        (leaky / "salary.md").symlink_to(folder / "hr_salary.md")

        for raw in (data / "uploads", data / "uploads" / "hr", folder, folder / "hr_salary.md", shared / "to-hr",
                    data, data / "api-keys.json", data / JOBS_FILE):
            r = c.post("/ingest", headers={"X-API-Key": eng}, json={"paths": [str(raw)], "kb": "eng"})
            assert r.status_code == 403, (raw, r.text)
            # the path, never the roots
            assert r.json()["detail"] == (f"paths[0]: {raw} is outside the folders this server may ingest from "
                                          "for knowledge base 'eng'"), r.text
        r = c.post("/ingest", headers={"X-API-Key": eng}, json={"paths": [str(leaky)], "kb": "eng"})
        assert r.status_code == 403 and "symlink" in r.json()["detail"] and "uploads/eng" not in r.json()["detail"]

        # At run time too: a job for eng that names the link (it got past no check here) reads nothing of hr's.
        backend = c.app.state.backend
        sneaked = backend.jobs.wait(backend.jobs.submit([leaky, shared / "to-hr"], prune=False, kb="eng").id)
        assert sneaked.counts == {"failed": 2} and {f["reason"] for f in sneaked.failures} == {OUTSIDE}, sneaked
        assert backend.outside_link(leaky / "salary.md") is not None  # a watch leaves it out as well

        # eng's own uploads work and stay in eng; hr's stays in hr
        job = wait(c, c.post("/ingest/upload", headers={"X-API-Key": eng}, data={"kb": "eng"},
                             files=[("files", ("deploys.md", DEPLOY, "text/markdown"))]), eng)
        assert job["counts"] == {"indexed": 1} and Path(job["paths"][0]).parent == data / "uploads" / "eng", job
        assert any("canary" in t for t in texts(c, eng, "eng", "when do production deploys run"))
        assert not any("412,000" in t for t in texts(c, eng, "eng", "head of finance salary payroll"))
        assert any("412,000" in t for t in texts(c, hr, "hr", "head of finance salary payroll"))

        # MCP's file rule: eng's key reads its own uploads, not hr's nor the data dir; an admin reads no data dir file
        eng_req = SimpleNamespace(state=SimpleNamespace(local=False, principal=backend.keys.match(eng)))
        admin_req = SimpleNamespace(state=SimpleNamespace(local=False, principal=EVERYTHING))
        eng_file = Path(job["paths"][0]) / "deploys.md"
        assert backend.may_read(eng_req, eng_file) and not backend.may_read(eng_req, folder / "hr_salary.md")
        assert backend.may_read(admin_req, folder / "hr_salary.md") and not backend.may_read(admin_req, data / "api-keys.json")

    # A job recorded before this layout (or before a restart) that names the uploads folder is
    # resumed for its KB with that KB's folders only: nothing of hr's is read.
    store = JobStore(settings.data_dir / JOBS_FILE)
    old = Job.new([str(data / "uploads")], kb="eng")
    store.save(old)
    store.close()
    with TestClient(create_app(settings)) as c:
        resumed = c.app.state.backend.jobs.wait(old.id, poll_s=0.1)
        deadline = time.monotonic() + 120
        while resumed.state not in ("done", "failed") and time.monotonic() < deadline:
            resumed = c.app.state.backend.jobs.wait(old.id, poll_s=0.1)
        assert resumed.counts == {"failed": 1} and resumed.failures[0]["reason"] == OUTSIDE, resumed
        assert not any("412,000" in t for t in texts(c, eng, "eng", "head of finance salary payroll"))


def test_uploads_of_the_old_layout_are_no_kbs_root(world):
    """uploads/<id>/ (before uploads were kept per KB): no REST key may name it, an admin's neither;
    only the owner's local faces (any path they can read) may. Neither may hr's uploads be opened to
    eng by configuring a root inside the data dir."""
    settings, hr, eng, _shared = world
    uploads = settings.data_dir.resolve() / "uploads"
    legacy, hr_upload = uploads / ("ab" * 16), uploads / "hr" / ("cd" * 16)
    for folder in (legacy, hr_upload):
        folder.mkdir(parents=True)
        (folder / "old.md").write_bytes(SALARY)
    settings = settings.model_copy(update={"api_roots": [*settings.api_roots, uploads]})
    with TestClient(create_app(settings)) as c:
        for key, kb, raw in ((eng, "eng", legacy), (hr, "hr", legacy), (eng, "eng", hr_upload), (eng, "eng", uploads)):
            r = c.post("/ingest", headers={"X-API-Key": key}, json={"paths": [str(raw)], "kb": kb})
            assert r.status_code == 403, (raw, r.text)
        # a KB named like an old upload's folder does not inherit it
        backend = c.app.state.backend
        assert not backend.inside_roots(legacy / "old.md", "ab" * 16)
        assert backend.inside_roots(hr_upload / "old.md", "hr")


def test_a_job_over_a_root_that_holds_the_data_dir_does_not_name_it(world, tmp_path):
    """A scoped key's job over a root that holds the data dir indexes the root's files and passes the
    data dir over in silence: its report does not tell the key where the server keeps its data."""
    settings, _hr, eng, shared = world
    (shared / "deploys.md").write_bytes(DEPLOY)
    with TestClient(create_app(settings)) as c:
        job = wait(c, c.post("/ingest", headers={"X-API-Key": eng}, json={"paths": [str(tmp_path)], "kb": "eng"}), eng)
    assert job["state"] == "done" and job["counts"] == {"indexed": 1} and job["failures"] == [], job
    assert str(settings.data_dir.resolve()) not in json.dumps(job), job
