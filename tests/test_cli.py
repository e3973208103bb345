"""The faces as a user meets them: subprocesses, one-line errors, exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from search.triton.local import free_port


@pytest.fixture
def env(settings):
    return {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
            "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1",
            "SEARCH_SEARCH_MODE": settings.search_mode}


def run(env, *args, module="search") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    text = " ".join(lines)
    assert lines[0].startswith("error:") and all(w in text for w in words), proc.stderr


def test_ingest_then_search_from_the_command_line(env, docs):
    first = run(env, "ingest", str(docs), module="indexer")
    assert first.returncode == 0, first.stderr
    assert "17 indexed" in first.stdout and "0 failed" in first.stdout
    again = run(env, "ingest", str(docs), "--json", module="indexer")
    assert json.loads(again.stdout)["unchanged"] == 17
    found = run(env, "reset password", "--top-k", "2")
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].startswith("1.") and "reset-password.md" in lines[0]
    as_json = json.loads(run(env, "query", "vpn from home", "--json", "-k", "1").stdout)
    assert as_json["hits"][0]["path"].endswith("vpn-setup.md") and as_json["hits"][0]["score"] > 0
    assert set(as_json["hits"][0]) >= {"score", "path", "chunk", "text", "sha256"}


def test_bad_files_summary(env, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "ok.md").write_text("# Fine\n\nThis one is fine.\n")
    (folder / "bad.txt").write_bytes(b"\x00\x01\x02binary")
    proc = run(env, "ingest", str(folder), module="indexer")
    assert proc.returncode == 7  # some files failed, the rest indexed
    assert "1 indexed" in proc.stdout and "1 failed" in proc.stdout and "bad.txt: binary content" in proc.stdout


def test_empty_collection(env):
    one_line_error(run(env, "reset password"), "nothing indexed yet", "indexer ingest")


def test_triton_unreachable(env, docs):
    assert run(env, "ingest", str(docs), module="indexer").returncode == 0
    env = {**env, "SEARCH_TRITON_URL": f"127.0.0.1:{free_port()}"}
    one_line_error(run(env, "reset password"), "Triton is not reachable", "search triton up")
    one_line_error(run(env, "ingest", str(docs), module="indexer"), "Triton is not reachable")


def test_qdrant_unreachable(env):
    env = {**env, "QDRANT_URL": f"http://127.0.0.1:{free_port()}"}
    one_line_error(run(env, "reset password"), "Qdrant", "not reachable")


def test_store_in_use_by_another_process(env, settings, docs):
    from search.store import open_store

    holder = open_store(settings)  # local mode allows one client per folder
    try:
        one_line_error(run(env, "reset password"), "in use by another process")
    finally:
        holder.close()


def test_bad_flags_are_usage_errors(env):
    proc = run(env, "query", "x", "--top-k", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "top-k" in proc.stderr
    proc = run(env, "ingest", "/nonexistent/folder", module="indexer")
    assert proc.returncode == 1 and "no such file or folder" in proc.stdout


def test_photo_search_from_the_command_line(env, tmp_path):
    from tests.test_photos import photo

    album = tmp_path / "album"
    photo(album / "beach.jpg", 1, taken="2021:07:14 09:30:00", make="Canon", model="EOS 5D", gps=(50.8225, -0.1372))
    photo(album / "alps.jpg", 3, taken="2023:01:20 12:00:00", make="FUJIFILM", model="X-T3")
    (album / "broken.jpg").write_text("not a photo")
    ingest = run(env, "ingest", str(album), module="indexer")
    assert ingest.returncode == 7 and "2 indexed" in ingest.stdout and "broken.jpg: not an image" in ingest.stdout
    like = run(env, "--like", str(album / "beach.jpg"), "-k", "1")
    assert like.returncode == 0, like.stderr
    assert "beach.jpg" in like.stdout and "2021-07-14 09:30" in like.stdout and "Canon EOS 5D" in like.stdout
    text = json.loads(run(env, "--images", "snowy mountains", "--camera", "fujifilm", "--json").stdout)
    assert [h["path"].rsplit("/", 1)[1] for h in text["hits"]] == ["alps.jpg"]
    assert set(text["hits"][0]) >= {"score", "path", "taken", "camera", "width", "height", "thumbnail"}
    newest = run(env, "--images", "anything", "--sort", "newest", "--after", "2020-01-01")
    assert newest.stdout.index("alps.jpg") < newest.stdout.index("beach.jpg")
    one_line_error(run(env, "--images", "x", "--near", "100,0,5"), "near")
    one_line_error(run(env, "--images", "x", "--after", "yesterday"), "after")
    proc = run(env, "reset password", "--camera", "canon")
    assert proc.returncode == 2 and "--camera only apply to photo search" in proc.stderr


def test_search_serve_answers_the_readme_example(env, docs):
    """`search serve` as a bot meets it: the README's curl body over real HTTP, then a clean stop."""
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    assert run(env, "ingest", str(docs), module="indexer").returncode == 0
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "search serve did not answer within 60 s"
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/search/documents", json={"query": "reset password", "top_k": 3})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["hits"][0]["path"].endswith("reset-password.md") and body["context"].startswith("[1] ")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert "Traceback" not in proc.stderr.read()
