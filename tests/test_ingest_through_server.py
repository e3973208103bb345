"""`indexer ingest` through a running `search serve` answers as it does without one: the same files
(names that are not UTF-8 included), the same exit status and message for a path that does not exist,
and, when the server dies mid-job, a message that says the job resumes. Real processes, real Triton."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time

from document_helpers import many_docs
from processes import SearchServer, api, env_for, run_cli

from search.config import PROJECT_ROOT

NOTE = "# Café\n\nThe espresso machine on floor three is descaled every Friday by facilities.\n"


def test_a_missing_path_is_the_same_failure_through_the_server(settings, tmp_path):
    missing = [str(tmp_path / "no" / f"such-{i}.md") for i in range(2)]  # two: a failure seen twice is "still failing"
    alone = run_cli("indexer", "ingest", missing[0], settings=settings)  # no server: the reference answer
    assert alone.returncode == 1 and "no such file or folder" in alone.stdout, alone
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        through = run_cli("indexer", "ingest", missing[1], settings=settings)
    finally:
        server.stop()
    assert "through the search server" in through.stderr, through.stderr

    def answer(proc, path):  # the summary without its timing, and the failed file's line
        out = proc.stdout.replace(path, "PATH").replace(os.path.relpath(path, PROJECT_ROOT), "PATH")  # shown from cwd
        return proc.returncode, out.split(" — ")[0], out.splitlines()[1:]
    assert answer(through, missing[1]) == answer(alone, missing[0]), through


def test_a_name_that_is_not_utf8_is_ingested_through_the_server(settings, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    odd = os.fsdecode(bytes(folder) + b"/caf\xff.md")  # not UTF-8: a surrogate-escaped str, as argv gives it
    with open(odd, "w") as f:
        f.write(NOTE)
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        named = run_cli("indexer", "ingest", odd, "--json", settings=settings)
        assert named.returncode == 0, named.stderr
        assert json.loads(named.stdout)["indexed"] == 1, named.stdout
        hit = api(server, "POST", "/search/documents", {"query": "espresso machine descaled", "top_k": 1})["hits"][0]
        assert hit["path"] == str(folder) + "/caf\\xff.md" and hit["path_bytes"], hit  # shown readably; bytes in base64
        again = run_cli("indexer", "ingest", odd, "--json", settings=settings)
        assert json.loads(again.stdout)["unchanged"] == 1, again.stdout  # the very same file
        listed = run_cli("indexer", "jobs", settings=settings)
        assert listed.returncode == 0 and "caf\\xff.md" in listed.stdout, listed
        through = run_cli("search", "espresso machine descaled", "-k", "1", "--json", settings=settings)  # the server owns the store
    finally:
        server.stop()
    alone = run_cli("search", "espresso machine descaled", "-k", "1", "--json", settings=settings)  # no server
    hits = [json.loads(proc.stdout)["hits"][0] for proc in (through, alone)]
    assert base64.b64decode(hits[0]["path_bytes"]) == os.fsencode(odd), hits[0]  # was null through the server
    assert hits[0] == hits[1]


def test_an_attached_ingest_says_its_job_resumes_when_the_server_dies(settings, tmp_path):
    folder = many_docs(tmp_path / "notes", 150)
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_EMBED_BATCH_SIZE="2")  # a job of several seconds
    cli = subprocess.Popen([sys.executable, "-m", "indexer", "ingest", str(folder)], env=env_for(settings),
                           cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not any(j["state"] == "running" and j["files_done"] >= 10 for j in api(server, "GET", "/ingest/jobs")["jobs"]):
            assert time.monotonic() < deadline and cli.poll() is None
            time.sleep(0.05)
        server.kill9()
        _out, err = cli.communicate(timeout=60)
    finally:
        server.stop()
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 5 and "Traceback" not in err, err
    assert "resumes when the server starts again" in err and "wait until it has started" not in err, err


def test_reading_photos_travels_with_the_job_to_the_server(settings, tmp_path):
    """`--ocr-photos` (or SEARCH_OCR_PHOTOS in the CLI's environment) reaches the server's job: the
    whiteboard photo's words are indexed as a document, as they are without a server; without either,
    the server's own setting (off) applies."""
    board = tmp_path / "photos"
    board.mkdir()
    shutil.copy(PROJECT_ROOT / "samples" / "scans" / "whiteboard-wifi.jpg", board)
    server = SearchServer(settings, tmp_path / "serve.log")  # the server's setting: photos are not read
    try:
        plain = run_cli("indexer", "ingest", str(board), "--json", settings=settings)
        assert plain.returncode == 0 and "documents" not in json.loads(plain.stdout)["by_kind"], plain.stdout
        asked = run_cli("indexer", "ingest", str(board), "--ocr-photos", "--json", settings=settings)
        assert asked.returncode == 0, asked.stderr
        assert json.loads(asked.stdout)["by_kind"].get("documents") == 1, asked.stdout
        hits = api(server, "POST", "/search/documents", {"query": "guest wifi password", "top_k": 1})["hits"]
        assert hits and hits[0]["path"].endswith("whiteboard-wifi.jpg"), hits
        jobs = api(server, "GET", "/ingest/jobs")["jobs"]
        assert [j["ocr_photos"] for j in jobs[:2]] == [True, None], jobs
        by_env = subprocess.run([sys.executable, "-m", "indexer", "ingest", str(board), "--json"],
                                env=env_for(settings, SEARCH_OCR_PHOTOS="true"), cwd=PROJECT_ROOT,
                                capture_output=True, text=True, timeout=300)
        assert by_env.returncode == 0, by_env.stderr
        assert api(server, "GET", "/ingest/jobs")["jobs"][0]["ocr_photos"] is True
    finally:
        server.stop()
