"""One store owner: `search serve` owns the data dir's embedded store and every other face works
through it — real processes, the session's real Triton, nothing mocked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from document_helpers import many_docs
from ingest_helper import ingest
from processes import SearchServer, api, env_for, run_cli, stop

from search.config import PROJECT_ROOT
from search.owner import Owner
from search.services import SearchService
from search.store import DOCUMENTS
from search.triton.local import free_port

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect, sync_playwright  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
WAIT_MS = 60_000


def stored_points(settings) -> dict[str, str]:
    """Point id -> path, read with the store opened in this process (no server running)."""
    svc = SearchService(settings)
    try:
        points, _ = svc.store.scroll(DOCUMENTS.name, limit=100_000, with_payload=True)
        return {str(p.id): p.payload["path"] for p in points}
    finally:
        svc.close()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (scripts/test.sh installs it)")
def test_serve_page_and_cli_run_side_by_side(settings, tmp_path):
    server = SearchServer(settings, tmp_path / "serve.log")
    ui_port = free_port()
    page_proc = subprocess.Popen([sys.executable, "-m", "search", "ui", "--port", str(ui_port)], env=env_for(settings),
                                 cwd=PROJECT_ROOT, stdout=(tmp_path / "ui.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        assert "using the search server" in (tmp_path / "ui.log").read_text()  # attached, did not start a second one

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"http://127.0.0.1:{ui_port}")
            expect(page.get_by_text("Nothing indexed yet")).to_be_visible(timeout=WAIT_MS)

            ingested = run_cli("indexer", "ingest", str(PROJECT_ROOT / "samples" / "docs"), settings=settings)
            assert ingested.returncode == 0, ingested.stderr
            assert "17 indexed" in ingested.stdout and "through the search server" in ingested.stderr
            found = run_cli("search", "reset password", "-k", "2", settings=settings)
            assert found.returncode == 0, found.stderr
            assert "reset-password.md" in found.stdout

            page.reload()  # the same page process: it asks the server, which now has the documents
            box = page.get_by_label("Query")
            expect(box).to_be_visible(timeout=WAIT_MS)
            box.fill("reset password")
            box.press("Enter")
            expect(page.locator("strong").filter(has_text=".md").first).to_have_text("reset-password.md", timeout=WAIT_MS)
            browser.close()
        status = run_cli("search", "status", "--json", settings=settings)
        assert status.returncode == 0 and json.loads(status.stdout)["store"]["collections"]["documents"] == 46
    finally:
        stop(page_proc)
        server.stop()


def test_a_second_server_refuses_naming_the_first(settings, tmp_path):
    first = SearchServer(settings, tmp_path / "first.log")
    try:
        second = subprocess.run([sys.executable, "-m", "search", "serve", "--port", str(free_port())],
                                env=env_for(settings), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 5
        line = second.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert f"pid {first.proc.pid}" in line and first.url in line
    finally:
        first.stop()
    assert not (settings.data_dir / "server.json").exists()  # released on a clean stop


def test_a_stale_record_is_ignored_and_replaced(settings, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (settings.data_dir).mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "server.json").write_text(json.dumps(
        {"url": "http://127.0.0.1:9", "pid": dead.pid, "token": "x", "data_dir": str(settings.data_dir)}))
    local = run_cli("search", "status", "--json", settings=settings)  # no live owner: opens the store itself
    assert local.returncode == 0, local.stderr
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        assert server.record()["pid"] == server.proc.pid
    finally:
        server.stop()


def test_a_job_interrupted_by_kill9_finishes_when_the_server_restarts(settings, tmp_path):
    folder = many_docs(tmp_path / "notes", 150)  # a job of several seconds, killed at file 20
    server = SearchServer(settings, tmp_path / "serve-1.log", SEARCH_EMBED_BATCH_SIZE="2")  # see the cancel test
    job = api(server, "POST", "/ingest", {"paths": [str(folder)]})
    deadline = time.monotonic() + 300
    while True:  # kill it while it runs, part way through
        state = api(server, "GET", f"/ingest/jobs/{job['job_id']}")
        if state["state"] == "running" and state["files_done"] >= 20:
            break
        assert state["state"] in ("queued", "running") and time.monotonic() < deadline, state
        time.sleep(0.05)
    server.kill9()
    assert Owner(**{k: server.record()[k] for k in ("url", "pid", "token", "data_dir")}).alive() is False

    again = SearchServer(settings, tmp_path / "serve-2.log")  # the stale record is replaced
    try:
        deadline = time.monotonic() + 300
        while (state := api(again, "GET", f"/ingest/jobs/{job['job_id']}"))["state"] != "done":
            assert state["state"] in ("queued", "running") and time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["resumed"] == 1 and state["report"]["failed"] == 0
        listed = run_cli("indexer", "jobs", "--json", settings=settings)
        assert json.loads(listed.stdout)[0]["id"] == job["job_id"]
    finally:
        again.stop()

    uninterrupted = settings.model_copy(update={"data_dir": tmp_path / "reference"})
    svc = SearchService(uninterrupted)
    try:
        ingest(svc, [folder])
    finally:
        svc.close()
    assert stored_points(settings) == stored_points(uninterrupted)  # same ids, same paths: nothing lost or doubled


def test_cancel_stops_a_job_and_leaves_whole_files(settings, tmp_path):
    folder = many_docs(tmp_path / "notes", 120)  # a job of several seconds, cancelled at file 10
    # Requests of 2 texts: the job reads ~12 files ahead of those it has written, not ~96 as with the
    # default 16, so the cancel lands while files are still unread (CI once saw the job end "done").
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_EMBED_BATCH_SIZE="2")
    try:
        job = api(server, "POST", "/ingest", {"paths": [str(folder)]})
        deadline = time.monotonic() + 300
        while (state := api(server, "GET", f"/ingest/jobs/{job['job_id']}"))["files_done"] < 10:
            assert state["state"] in ("queued", "running") and time.monotonic() < deadline, state  # not a hang
            time.sleep(0.05)
        api(server, "DELETE", f"/ingest/jobs/{job['job_id']}")
        deadline = time.monotonic() + 120
        while (state := api(server, "GET", f"/ingest/jobs/{job['job_id']}"))["state"] not in ("cancelled", "done"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert state["state"] == "cancelled" and state["report"]["cancelled"]
    finally:
        server.stop()
    points = stored_points(settings)
    per_file: dict[str, int] = {}
    for path in points.values():
        per_file[path] = per_file.get(path, 0) + 1
    assert 0 < len(per_file) < 120 and set(per_file.values()) == {1}  # whole files only (one chunk each here)
    rerun = run_cli("indexer", "ingest", str(folder), "--json", settings=settings)
    report = json.loads(rerun.stdout)
    assert report["indexed"] == 120 - len(per_file) and report["unchanged"] == len(per_file)


def test_the_cli_through_a_server_imports_neither_the_store_nor_the_models(settings, tmp_path):
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        assert run_cli("indexer", "ingest", str(PROJECT_ROOT / "samples" / "docs"), settings=settings).returncode == 0
        # `search --help` lists the registry's capabilities as commands, so it reads the model registry
        # (numpy, tritonclient); a query through the server reads none of it
        for args, allowed in ((["reset password"], ()), (["--help"], ("numpy", "tritonclient"))):
            proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "search", *args], env=env_for(settings),
                                  cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr[-500:]
            imported = set(re.findall(r"\|\s+([\w.]+)$", proc.stderr, re.M))
            heavy = {m for m in imported if m.split(".")[0] in {"qdrant_client", "qdrant_edge", "torch", "transformers",
                                                                  "tritonclient", "numpy", "onnxruntime", "fastapi"} - set(allowed)}
            assert not heavy, (args, sorted(heavy)[:10])
    finally:
        server.stop()
