"""File names that are not valid UTF-8: indexed, found, shown readably, opened from the hit, and
followed through moves, prunes and folder filters (service, CLI and REST API)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient
from image_helpers import photo
from ingest_helper import ingest

from search.api import create_app
from search.store import DOCUMENTS

BUDGET = "The quarterly budget review meeting moves to Thursday afternoon in room four."


def named(folder: Path, raw: bytes) -> Path:
    """``folder / raw`` for a name given as bytes (Python holds it surrogate-escaped)."""
    return folder / os.fsdecode(raw)


def test_service_indexes_finds_moves_and_prunes_a_name_that_is_not_utf8(service, tmp_path):
    kb = tmp_path / "kb"
    sub = named(kb, b"caf\xe9")  # Latin-1 folder name
    sub.mkdir(parents=True)
    (kb / "garden.md").write_text("# Garden\n\nTomatoes need sun and regular watering in summer.\n")
    bad = named(sub, b"notes\xff.txt")
    bad.write_text(BUDGET)

    report = ingest(service, [kb])
    assert report.counts["indexed"] == 2 and not report.failures, report.as_dict()

    hit = service.search_documents("quarterly budget review meeting", top_k=1)[0]
    assert hit.path == str(bad) and hit.paths == [str(bad)]
    with open(hit.path) as f:  # the hit's path is the real one
        assert f.read() == BUDGET
    assert hit.display_path.endswith("caf\\xe9/notes\\xff.txt")
    as_json = hit.as_dict()
    json.dumps(as_json, ensure_ascii=False).encode("utf-8")  # valid text for JSON
    assert as_json["path"] == hit.display_path and "\\xff" in as_json["citation"]
    assert base64.b64decode(as_json["path_bytes"]) == os.fsencode(bad)
    assert service.search_documents("tomatoes", top_k=1)[0].as_dict()["path_bytes"] is None

    # A folder filter on the undecodable folder (the form a shell gives).
    only_sub = service.search_documents("tomatoes in the garden", top_k=5, folder=str(sub))
    assert [h.path for h in only_sub] == [str(bad)]

    assert ingest(service, [kb]).counts["unchanged"] == 2  # the stored path round-trips

    moved = named(sub, b"moved\xfe.txt")
    bad.rename(moved)
    report = ingest(service, [kb])
    assert report.embedded_chunks == 0 and report.counts["indexed"] == 1  # vectors reused
    hit = service.search_documents("quarterly budget review meeting", top_k=1)[0]
    assert hit.path == str(moved) and hit.paths == [str(moved)]

    moved.unlink()
    report = ingest(service, [kb], prune=True)
    assert [o.path for o in report.outcomes if o.status == "pruned"] == [str(moved)]
    paths = {p for pt in service.store.all_points(DOCUMENTS.name) for p in pt.payload["paths"]}
    assert paths == {str(kb / "garden.md")}


def run(env, *args, module="search") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)


def test_cli_ingests_and_shows_a_name_that_is_not_utf8(env, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "x.txt").write_text("Pasta needs plenty of salted boiling water.")
    bad = named(d, b"bad\xff.txt")
    bad.write_text(BUDGET)
    pic = photo(named(d, b"beach\xfe.jpg"), 1)

    proc = run(env, "ingest", str(d), module="indexer")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("3 indexed")

    found = run(env, "quarterly budget review meeting", "-k", "1")
    assert found.returncode == 0, found.stderr
    assert "bad\\xff.txt" in found.stdout.splitlines()[0]
    hits = json.loads(run(env, "quarterly budget review meeting", "-k", "1", "--json").stdout)["hits"]
    assert base64.b64decode(hits[0]["path_bytes"]) == os.fsencode(bad)

    like = run(env, "--like", str(pic), "-k", "1", "--json")  # the photo's own bytes name as the argument
    assert like.returncode == 0, like.stderr
    top = json.loads(like.stdout)["hits"][0]
    assert top["path"].endswith("beach\\xfe.jpg") and base64.b64decode(top["path_bytes"]) == os.fsencode(pic)


def wait(client: TestClient, response, timeout: float = 120) -> dict:
    assert response.status_code == 202, response.text
    url = f"/ingest/jobs/{response.json()['job_id']}"
    deadline = time.monotonic() + timeout
    while (job := client.get(url).json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def test_api_job_with_names_that_are_not_utf8(settings, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    named(d, b"ok\xff.txt").write_text(BUDGET)
    named(d, b"broken\xfe.txt").write_bytes(b"\x00\x01\x02binary")
    with TestClient(create_app(settings.model_copy(update={"api_roots": [d]}))) as c:
        job = wait(c, c.post("/ingest", json={"paths": [str(d)]}))
        assert job["state"] == "done", job
        assert job["counts"] == {"indexed": 1, "failed": 1} and job["report"]["indexed"] == 1
        assert [f["path"] for f in job["failures"]] == [f"{d}/broken\\xfe.txt"]
        assert base64.b64decode(job["failures"][0]["path_bytes"]) == os.fsencode(named(d, b"broken\xfe.txt"))
        r = c.post("/search/documents", json={"query": "quarterly budget review", "top_k": 1, "mode": "semantic"})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["path"] == f"{d}/ok\\xff.txt"
