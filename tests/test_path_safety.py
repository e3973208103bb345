"""Paths the REST API may ingest from stay inside its roots when the file is read, not only when
the request arrives; symlink loops are a 4xx from the API and a one-line failed file in the CLI.
Real files, symlinks, the real local Triton and store, a real `indexer` subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from indexer.confine import OUTSIDE, Confinement, Refused
from search.api import create_app

SECRET = "The vault combination is 7391 and the launch phrase is zebra quartz lantern.\n"
LOOP = "symlink loop"


def wait(client: TestClient, job_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/ingest/jobs/{job_id}").json()
        if job["state"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job['state']}")


def accepted(response) -> str:
    assert response.status_code == 202, response.text
    return response.json()["job_id"]


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    return folder


def test_a_symlink_made_after_the_202_is_never_read(settings, docs, outside, tmp_path):
    """The request is checked and accepted; then, while its job waits behind a slower one, a file
    link, a folder and a file are swapped for symlinks out of the root. None of them is read."""
    root = tmp_path / "root"
    bulk = root / "bulk"  # the slow first job: the sample docs plus generated notes
    shutil.copytree(docs, bulk)
    for i in range(60):
        (bulk / f"note{i}.md").write_text(f"# Note {i}\n\n" + f"Meeting {i} minutes about budget line {i * 7}. " * 40)
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "ok.md").write_text("# Lunch\n\nThe canteen opens at noon on weekdays.\n")
    (root / "dir2").mkdir()
    (root / "dir2" / "also.md").write_text("# Bikes\n\nBicycle racks are behind building C.\n")
    (root / "swap.md").write_text("# Swap\n\nThis file is replaced by a link after the request.\n")

    with TestClient(create_app(settings.model_copy(update={"api_roots": [root]}))) as c:
        first = accepted(c.post("/ingest", json={"paths": [str(bulk)]}))
        second = accepted(c.post("/ingest", json={"paths": [str(root / "dir"), str(root / "dir2"), str(root / "swap.md")]}))
        (root / "dir" / "stolen.txt").symlink_to(outside / "secret.txt")  # a new link where discovery finds it
        (root / "dir2").rename(root / "dir2.old")  # a checked folder becomes a link out
        (root / "dir2").symlink_to(outside)
        (root / "swap.md").unlink()  # a checked file becomes a link out
        (root / "swap.md").symlink_to(outside / "secret.txt")
        assert c.get(f"/ingest/jobs/{second}").json()["state"] == "queued", "the links must exist before the job lists files"

        assert wait(c, first)["state"] == "done"
        job = wait(c, second)
        assert job["state"] == "done", job
        refused = {f["path"]: f["reason"] for f in job["failures"]}
        assert refused == {str(root / "dir" / "stolen.txt"): OUTSIDE, str(root / "dir2"): OUTSIDE,
                           str(root / "swap.md"): OUTSIDE}, job["failures"]
        assert job["counts"] == {"indexed": 1, "failed": 3}, job

        hits = c.post("/search/documents", json={"query": "vault combination launch phrase", "top_k": 20}).json()["hits"]
        assert hits and not any("vault" in h["text"] or h["path"] in refused for h in hits), hits
        stored = list(c.app.state.backend.resources.store.files("documents"))
        secret_sha = hashlib.sha256(SECRET.encode()).hexdigest()
        assert not any(f.sha256 == secret_sha or set(f.paths) & refused.keys() for f in stored)


def test_the_opened_file_is_checked_not_its_name(tmp_path, outside):
    root = tmp_path / "root"
    root.mkdir()
    (root / "inside.md").write_text("fine")
    (root / "alias.md").symlink_to(root / "inside.md")  # a link that stays inside is read
    (root / "out.md").symlink_to(outside / "secret.txt")
    os.mkfifo(root / "pipe.md")  # opening it must not block
    (root / "loop.md").symlink_to(root / "loop.md")
    c = Confinement([root])
    assert c.read(root / "alias.md", 100) == b"fine"
    for name, reason in (("out.md", OUTSIDE), ("pipe.md", "not a regular file"), ("loop.md", LOOP),
                         ("inside.md", "too large")):
        with pytest.raises(Refused, match=reason):
            c.read(root / name, 100 if name != "inside.md" else 2)


def test_a_symlink_flipped_between_check_and_read_is_refused(tmp_path, outside):
    """A link flipped between a target inside and one outside, as fast as it goes, while the reader
    checks the name and then reads: the check on the opened file refuses every read that lost the race."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "inside.md").write_text("fine")
    link, spare = root / "flip.md", root / ".flip.tmp"
    link.symlink_to(root / "inside.md")
    stop = threading.Event()

    def flip() -> None:
        targets = [outside / "secret.txt", root / "inside.md"]
        i = 0
        while not stop.is_set():
            spare.unlink(missing_ok=True)
            spare.symlink_to(targets[i % 2])
            os.replace(spare, link)
            i += 1

    c, outcomes = Confinement([root]), {"read": 0, "refused by name": 0, "refused when opened": 0}
    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if c.outside(link):
                outcomes["refused by name"] += 1
                continue
            try:
                assert c.read(link, 1000) == b"fine"
                outcomes["read"] += 1
            except Refused as exc:
                assert str(exc) == OUTSIDE
                outcomes["refused when opened"] += 1
    finally:
        stop.set()
        flipper.join()
    print(outcomes)  # how often the race was lost, for the record
    assert outcomes["read"] and outcomes["refused by name"]


def test_a_symlink_loop_is_a_4xx_naming_the_path(settings, outside, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    folder = root / "folder"
    folder.mkdir()
    (folder / "ok.md").write_text("# Parking\n\nVisitor permits come from reception.\n")
    (folder / "loop.md").symlink_to(folder / "loop.md")
    (outside / "a").symlink_to(outside / "b")
    (outside / "b").symlink_to(outside / "a")
    (root / "via-outside").symlink_to(outside / "a")  # a loop that leads out first: nothing to probe there
    with TestClient(create_app(settings.model_copy(update={"api_roots": [root]}))) as c:
        for name in ("loop1", "loop2"):
            r = c.post("/ingest", json={"paths": [str(root / name)]})
            assert r.status_code == 400 and "paths[0]" in r.json()["detail"] and LOOP in r.json()["detail"], r.text
            assert str(root / name) in r.json()["detail"]
        r = c.post("/ingest", json={"paths": [str(root / "via-outside")]})
        assert r.status_code == 403 and "outside the folders" in r.json()["detail"], r.text
        job = wait(c, accepted(c.post("/ingest", json={"paths": [str(folder)]})))
        assert job["counts"] == {"indexed": 1, "failed": 1}, job
        assert job["failures"] == [{"path": str(folder / "loop.md"), "path_bytes": None,
                                    "reason": job["failures"][0]["reason"]}]
        assert LOOP in job["failures"][0]["reason"]


def test_a_symlink_loop_is_a_failed_file_in_the_cli(settings, tmp_path):
    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1"}
    root = tmp_path / "root"
    root.mkdir()
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "ok.md").write_text("# Parking\n\nVisitor permits come from reception.\n")
    (root / "loop.md").symlink_to(root / "loop.md")

    def indexer(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "indexer", "ingest", *args], env=env, capture_output=True,
                              text=True, timeout=300)

    alone = indexer(str(root / "loop1"))
    assert alone.returncode != 0 and "Traceback" not in alone.stdout + alone.stderr, alone.stderr
    assert LOOP in alone.stdout and "loop1" in alone.stdout, alone.stdout
    folder = indexer(str(root), "--json")
    assert "Traceback" not in folder.stderr, folder.stderr
    report = json.loads(folder.stdout)
    assert report["indexed"] == 1 and report["skipped"] == 2  # loop1 and loop2 are no documents
    assert [(f["path"], LOOP in f["reason"]) for f in report["failures"]] == [(str(root / "loop.md"), True)]


def test_a_dangling_link_in_a_folder_is_a_broken_symbolic_link(settings, tmp_path):
    """As docs/reliability.md says, for a link found in a folder as for one given as an argument."""
    from indexer.service import IngestService  # noqa: PLC0415

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ok.md").write_text("# Parking\n\nVisitor permits come from reception.\n")
    (folder / "gone.md").symlink_to(folder / "deleted.md")
    svc = IngestService(settings)
    try:
        reports = [svc.ingest([folder]), svc.ingest([folder / "gone.md"])]  # found in a folder; named alone
    finally:
        svc.close()
    for report in reports:
        assert [(f.path, f.reason) for f in report.failures] == [(str(folder / "gone.md"), "broken symbolic link")]
    with pytest.raises(Refused, match="^broken symbolic link$"):
        Confinement([folder]).read(folder / "gone.md", 100)
