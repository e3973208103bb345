"""The data dir is private: created 0700, and everything in it (store, uploads, thumbnails, jobs,
failures, owner record) is the user's only — directories 0700, files 0600 — whatever the umask.
A data dir left readable by an older version is fixed on start, with one notice. Real processes:
`search serve`, `indexer`, `search`; the session's Triton."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import httpx
import pytest
from processes import SearchServer, run_cli

from search.config import PROJECT_ROOT

NOTICE = "made {} entries private (directories 0700, files 0600)"


@pytest.fixture
def loose_umask():
    """The usual umask (022), under which a careless process writes 0755 dirs and 0644 files; the
    processes a test starts inherit it."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(root: Path) -> dict[str, str]:
    """Relative path -> octal mode of every directory and regular file under ``root`` (itself included)."""
    found = {".": oct(stat.S_IMODE(root.lstat().st_mode))}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                found[str(p.relative_to(root))] = oct(stat.S_IMODE(st.st_mode))
    return found


def loose(root: Path) -> list[str]:
    """What is not private: a directory other than 0700, a regular file other than 0600."""
    return [f"{path} {mode}" for path, mode in modes(root).items()
            if mode != ("0o700" if (root / path).is_dir() else "0o600")]


def loosen(root: Path) -> int:
    """Make ``root`` as an older version (umask 022) left it; returns how many entries are not private."""
    for path in modes(root):
        (root / path).chmod(0o755 if (root / path).is_dir() else 0o644)
    return len(loose(root))


def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "printer.md").write_text("# Printer\n\nRestart the spooler when the printer queue is stuck.\n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # a failure to remember (ingest-failures.json)
    shutil.copy(PROJECT_ROOT / "samples" / "photos" / "brick-wall.jpg", docs / "wall.jpg")  # a thumbnail
    return docs


def upload(server: SearchServer) -> None:
    token = server.record()["token"]
    r = httpx.post(f"{server.url}/ingest/upload", headers={"X-API-Key": token}, timeout=60,
                   files=[("files", ("vpn.md", b"# VPN\n\nConnect to the VPN from home with the client.\n", "text/markdown"))])
    assert r.status_code == 202, r.text
    job = r.json()["job_id"]
    deadline = time.monotonic() + 120
    while (state := httpx.get(f"{server.url}/ingest/jobs/{job}", headers={"X-API-Key": token}).json())["state"] != "done":
        assert state["state"] in ("queued", "running") and time.monotonic() < deadline, state
        time.sleep(0.2)


def test_a_fresh_data_dir_is_private_after_serve_upload_and_ingest(settings, tmp_path, loose_umask):
    settings = settings.model_copy(update={"data_dir": tmp_path / "fresh" / "data"})
    data = settings.data_dir
    assert not data.exists()
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        upload(server)
        done = run_cli("indexer", "ingest", str(folder(tmp_path)), settings=settings)  # through the server
        assert done.returncode == 7 and "2 indexed" in done.stdout, done.stdout + done.stderr  # 7: broken.pdf failed
        found = run_cli("search", "restart the spooler", settings=settings)
        assert found.returncode == 0 and "printer.md" in found.stdout, found.stdout + found.stderr
    finally:
        server.stop()
    written = modes(data)
    for part in ("uploads", "store-edge", "jobs.sqlite", "thumbnails", "ingest-failures.json"):
        assert any(p == part or p.startswith(part + "/") for p in written), (part, sorted(written))
    assert loose(data) == [], loose(data)
    assert "made" not in (tmp_path / "serve.log").read_text()  # nothing to fix on a fresh start: no notice


def test_a_readable_data_dir_is_fixed_on_start_with_one_notice(settings, tmp_path, loose_umask):
    data = settings.data_dir
    outside = tmp_path / "outside.txt"
    outside.write_text("not the data dir's")
    outside.chmod(0o644)
    server = SearchServer(settings, tmp_path / "serve-1.log")
    try:
        upload(server)
    finally:
        server.stop()
    (data / "link-out").symlink_to(outside)  # a link is left as it is, and not followed out
    n = loosen(data)
    assert n > 5 and loose(data)

    listed = run_cli("indexer", "jobs", settings=settings)  # a CLI on the data dir, no server running
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.count(NOTICE.format(n)) == 1 and f"data dir {data}" in listed.stderr, listed.stderr
    assert loose(data) == [], loose(data)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644 and (data / "link-out").is_symlink()
    again = run_cli("indexer", "jobs", settings=settings)
    assert "private" not in again.stderr, again.stderr  # nothing changed: nothing said

    n = loosen(data)
    server = SearchServer(settings, tmp_path / "serve-2.log")  # the server fixes it too, before it serves
    try:
        upload(server)
    finally:
        server.stop()
    log = (tmp_path / "serve-2.log").read_text()
    assert log.count("private (directories 0700") == 1 and NOTICE.format(n) in log, log
    assert loose(data) == [], loose(data)
