"""The faces as a user meets them: subprocesses, one-line errors, exit codes, no tracebacks."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import typer
from cli_helpers import one_line_error, run
from ingest_helper import long_passage

from indexer.cli import app as indexer_app
from search import owner
from search.cli.app import LAZY_GROUPS, SearchGroup
from search.cli.app import app as search_app
from search.errors import StoreUnavailable
from search.rest_client import RestClient
from search.services import HIT_CHARS, SearchService
from search.triton.local import free_port


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


def test_triton_unreachable(env, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "reset.md").write_text("# Reset\n\nHow to reset your password.\n")
    assert run(env, "ingest", str(notes), module="indexer").returncode == 0  # something to search
    env = {**env, "SEARCH_TRITON_URL": f"127.0.0.1:{free_port()}"}
    one_line_error(run(env, "reset password"), "Triton is not reachable", "search triton up")
    (notes / "new.md").write_text("# New\n\nA note to embed.\n")
    one_line_error(run(env, "ingest", str(notes), module="indexer"), "Triton is not reachable")


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


def test_both_commands_start_without_the_heavy_libraries():
    """`search --help` and `indexer --help` answer in well under a second: the store's client, the model
    client, numpy and Ray load only in the commands that use them (qdrant-client alone is ~1.5 s)."""
    heavy = ("qdrant_client", "tritonclient", "numpy", "ray", "torch", "onnxruntime", "bs4", "pypdf")
    code = f"import sys, indexer.cli, search.cli.app; print([m for m in {heavy!r} if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_help_is_wrapped_by_the_terminal_not_by_the_source():
    """Every command's help prose is one line per paragraph (rich would keep a docstring's line breaks
    and break sentences at any width but the source's); indented tables keep their lines."""
    groups = [typer.main.get_command(indexer_app), typer.main.get_command(search_app)]
    ctx = typer.Context(groups[1])
    for name in LAZY_GROUPS:
        assert isinstance(groups[1], SearchGroup)
        groups[1].resolve_command(ctx, [name])
        groups.append(groups[1].commands[name])
    assert {"query", "ingest", "build", "migrate", "delete"} <= {n for g in groups for n in g.commands}
    for group in groups:
        for name, command in group.commands.items():
            for paragraph in (command.help or "").split("\n\n"):
                lines = paragraph.splitlines()
                assert len(lines) <= 1 or any(line.startswith(" ") for line in lines), (name, paragraph)
    listing = subprocess.run([sys.executable, "-m", "indexer", "--help"], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "80"}).stdout
    assert "│ jobs     Ingest jobs run by `search serve`, newest first." in listing, listing


def test_a_face_waits_for_a_live_owner_that_is_still_starting(tmp_path):
    """`search serve` records itself as the owner when its store is open and listens a moment later.
    A face that finds it in between waits (a refused connection sent nothing, so even a POST is
    asked again), up to a bound; an owner whose process is gone, or that gave its record back
    (shutting down), is an error at once."""
    port = free_port()
    starting = owner.claim(tmp_path, f"http://127.0.0.1:{port}")

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps({"asked": asked, "token": self.headers["X-API-Key"]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    def listen_later() -> None:
        time.sleep(1.0)
        with HTTPServer(("127.0.0.1", port), Answer) as server:
            server.handle_request()

    later = threading.Thread(target=listen_later, daemon=True)
    later.start()
    answer = RestClient(starting).call("POST", "/jobs", {"paths": ["a"]})
    assert answer == {"asked": {"paths": ["a"]}, "token": starting.token}
    later.join(timeout=10)

    silent = owner.claim(tmp_path, f"http://127.0.0.1:{free_port()}")  # recorded, never listening
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="does not answer .*Connection refused.*wait until it has started"):
        RestClient(silent, starting_wait_s=0.5).call("GET", "/healthz")
    assert time.monotonic() - started >= 0.5  # it waited for the starting server, then gave up
    owner.release(tmp_path)  # what a server that is shutting down does
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for client in (RestClient(silent, starting_wait_s=60), RestClient(dataclasses.replace(silent, pid=gone.pid), starting_wait_s=60)):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="does not answer"):
            client.call("GET", "/healthz")
        assert time.monotonic() - started < 30  # not the 60 s: nobody is starting


def test_photo_search_from_the_command_line(env, tmp_path):
    from image_helpers import photo

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
    log = Path(env["SEARCH_DATA_DIR"]).parent / "serve.log"  # a file: an unread pipe fills with request logs
    with log.open("a") as err:
        proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
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
    assert "Traceback" not in log.read_text()


# -- what the faces print: indexed text cannot drive the terminal

# Raw bytes a terminal would act on: ESC (CSI, OSC), BEL, backspace, C1 CSI (U+009B), bidi override and isolate.
RAW_CONTROLS = (b"\x1b", b"\x07", b"\x08", b"\xc2\x9b", b"\xe2\x80\xae", b"\xe2\x81\xa6")
HOSTILE = ("# Reset \u202egnp.exe\u202c \x1b]0;pwned\x07\n\n"
           "To reset your password \x1b[31mclick here\x1b[0m\x07 now\x08\x08\x08 then \x9b2J wipe, "
           "\u2066isolated\u2069 and [red]not red[/red] [bold red]either[/].\n")


def run_bytes(env, *args, module="search") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, timeout=300)


def no_raw_controls(data: bytes) -> None:
    assert not [c for c in RAW_CONTROLS if c in data], data


def test_indexed_control_characters_and_markup_are_printed_inert(env, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    doc = folder / "evil\x1b[31m\u202e.md"
    doc.write_text(HOSTILE)
    (folder / "bad\x1b[2J[red].txt").write_bytes(b"\x00binary")
    ingest = run_bytes(env, "ingest", str(folder), module="indexer")
    assert ingest.returncode == 7, ingest.stderr  # one file failed (the binary one), the other is indexed
    no_raw_controls(ingest.stdout + ingest.stderr)
    assert b"failed" in ingest.stdout and b"bad\\x1b[2J[red].txt: binary content" in ingest.stdout

    found = run_bytes(env, "reset password", "-k", "5")
    assert found.returncode == 0, found.stderr
    no_raw_controls(found.stdout + found.stderr)
    shown = found.stdout.decode()
    assert "evil\\x1b[31m\\u202e.md" in shown  # the path and the section, escaped where a terminal would act
    assert "§ Reset \\u202egnp.exe\\u202c \\x1b]0;pwned\\x07" in shown
    assert "\\x1b[31mclick here\\x1b[0m\\x07" in shown and "\\x9b2J" in shown and "\\u2066isolated\\u2069" in shown
    assert "[red]not red[/red] [bold red]either[/]" in shown  # markup in the text is text

    as_json = run_bytes(env, "reset password", "-k", "5", "--json")
    assert as_json.returncode == 0, as_json.stderr
    no_raw_controls(as_json.stdout)  # JSON escapes them (\u001b, \u009b, \u202e): the text itself is kept
    [hit] = [h for h in json.loads(as_json.stdout)["hits"] if "click here" in h["text"]]
    assert hit["path"] == str(doc) and hit["section"] == "Reset \u202egnp.exe\u202c \x1b]0;pwned\x07"
    assert hit["text"] == HOSTILE.strip()  # the whole text, every control character kept

    listing = run_bytes(env, "ingest", str(folder), "--json", module="indexer")
    no_raw_controls(listing.stdout)
    assert json.loads(listing.stdout)["failures"][0]["path"] == str(folder / "bad\x1b[2J[red].txt")


def test_status_and_errors_echo_user_text_inert(env, tmp_path):
    odd = {**env, "SEARCH_DATA_DIR": str(tmp_path / "data\x1b]0;x\x07\u202e[bold]")}
    status = run_bytes(odd, "status")
    no_raw_controls(status.stdout + status.stderr)
    assert "data\\x1b]0;x\\x07\\u202e[bold]" in status.stdout.decode()
    missing = run_bytes(env, "entail", str(tmp_path / "no\x1b[31m[red]such\u202e.jpg"), "two dogs")
    assert missing.returncode != 0 and b"Traceback" not in missing.stderr
    no_raw_controls(missing.stderr)
    assert "no\\x1b[31m[red]such\\u202e.jpg: no such file" in missing.stderr.decode()


def test_hit_text_is_bounded_unless_full_text(env, settings, tmp_path):
    word = "Reset your password: " + "x" * 2_000_000  # a 2 MB "word" stored whole, before chunks were bounded
    svc = SearchService(settings)
    try:
        long_passage(svc, tmp_path / "long", word)
    finally:
        svc.close()  # the embedded store admits one process at a time
    bounded = run(env, "reset password", "--json")
    assert bounded.returncode == 0 and len(bounded.stdout) < 3 * HIT_CHARS, bounded.stderr
    [hit] = json.loads(bounded.stdout)["hits"]
    assert hit["truncated"] is True and hit["length"] == len(word) and hit["text"] == word[:HIT_CHARS]
    [whole] = json.loads(run(env, "reset password", "--json", "--full-text").stdout)["hits"]
    assert whole["text"] == word and whole["truncated"] is False
    shown = run(env, "reset password")
    assert shown.returncode == 0 and len(shown.stdout) < 1000
    everything = run(env, "reset password", "--full-text")
    assert everything.returncode == 0 and word in everything.stdout
    proc = run(env, "--images", "a dog", "--full-text")
    assert proc.returncode == 2 and "--full-text applies to document search" in proc.stderr
