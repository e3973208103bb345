"""What `indexer ingest`, `search status` and `search triton status` tell a user or a script:
exit codes, skipped files and why, failures remembered across runs, one-line reasons, whole
lines in logs. Real processes, real Triton, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from image_helpers import bomb_png
from ingest_helper import ingest
from python_models import python_model

from indexer.discover import discover
from indexer.loaders import DOCUMENT_SUFFIXES
from search.services import SearchService
from search.store import open_store
from search.triton.local import LocalTriton

SOME_FAILED = 7


def run(env, *args, module="indexer") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)


def test_exit_status_skips_and_failures_remembered(env, tmp_path):
    kb = tmp_path / "kb"
    for d in (".git", "node_modules", "sub"):
        (kb / d).mkdir(parents=True)
    (kb / "ok.md").write_text("# Fine\n\nThis one is fine.\n")
    (kb / "bad.txt").write_bytes(b"\x00\x01\x02binary")
    (kb / ".draft.md").write_text("# Hidden\n")
    (kb / "table.csv").write_text("a,b\n1,2\n")
    (kb / ".git" / "HEAD.md").write_text("# not mine\n")
    (kb / "node_modules" / "readme.md").write_text("# a dependency\n")

    first = run(env, "ingest", str(kb))
    assert first.returncode == SOME_FAILED, first.stdout + first.stderr
    summary = first.stdout.splitlines()[0]
    # Whole, unwrapped line off a terminal (a pipe here; a log file alike).
    assert re.fullmatch(r"1 indexed, .* chunks embedded in [\d.]+ s", summary) and len(summary) > 80, first.stdout
    assert "4 skipped (" in summary
    for why in ("unsupported type: 1", "hidden file: 1", "hidden folder: 1", "tool folder: 1"):
        assert why in summary
    assert "failed " in first.stdout and "bad.txt: binary content" in first.stdout
    assert "table.csv" not in first.stdout  # skipped files are listed only with --verbose

    again = run(env, "ingest", str(kb), "--verbose")
    assert again.returncode == SOME_FAILED
    assert "1 file still failing (unchanged since last run)" in again.stdout
    assert not any(line.strip().startswith("failed ") for line in again.stdout.splitlines()[1:]), again.stdout
    assert "still failing " in again.stdout and "bad.txt: binary content" in again.stdout
    assert "table.csv (unsupported type)" in again.stdout and ".git (hidden folder)" in again.stdout
    assert "node_modules (tool folder)" in again.stdout and ".draft.md (hidden file)" in again.stdout

    (kb / "bad.txt").write_bytes(b"\x00\x01\x02still binary")  # changed: a new failure again
    as_json = json.loads(run(env, "ingest", str(kb), "--json").stdout)
    assert as_json["failed"] == 1 and as_json["still_failing"] == 0
    assert as_json["skipped"] == 4 and as_json["skipped_by_reason"]["unsupported type"] == 1

    (kb / "bad.txt").write_text("Now it is text.\n")
    fixed = run(env, "ingest", str(kb))
    assert fixed.returncode == 0 and "0 failed" in fixed.stdout, fixed.stdout

    assert run(env, "ingest", str(kb / "nope")).returncode == 1  # nothing could be indexed
    help_text = run(env, "ingest", "--help", module="indexer").stdout
    assert "Exit status" in help_text and "7  some files failed" in help_text


def test_fifo_argument_is_not_a_regular_file(env, tmp_path):
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)
    proc = run(env, "ingest", str(fifo))
    assert proc.returncode == 1 and "notes.txt: not a regular file" in proc.stdout, proc.stdout


def test_pillow_bomb_warning_is_a_one_line_reason(env, tmp_path):
    # 108 MP: over our 100 MP limit and over Pillow's warning threshold (89.5 MP).
    bomb_png(tmp_path / "big.png", 12000, 9000)
    proc = run(env, "ingest", str(tmp_path / "big.png"))
    assert proc.returncode == 1
    assert "big.png: too many pixels: 12000×9000 = 108 MP > 100 MP limit" in proc.stdout
    assert "DecompressionBombWarning" not in proc.stderr and "warn" not in proc.stderr, proc.stderr


def _folder_of_three(tmp_path):
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    for name in ("a.md", "c.md", "sub/b.md"):
        (kb / name).write_text(f"# {name}\n\nThe text of {name}.\n")
    return kb


def test_a_file_named_in_a_folder_and_on_its_own_counts_once(env, settings, tmp_path):
    kb = _folder_of_three(tmp_path)
    # The folder, one of its files, a subfolder, the folder again, and a file by a longer way round.
    args = [kb, kb / "a.md", kb / "sub", kb, kb / "sub" / ".." / "c.md"]
    proc = run(env, "ingest", *map(str, args), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    assert (got["indexed"], got["unchanged"], got["failed"], got["skipped"]) == (3, 0, 0, 0), got

    svc = SearchService(settings)
    try:
        totals = []
        report = ingest(svc, [kb / "a.md", *args], on_start=totals.append)
    finally:
        svc.close()
    assert totals == [3]  # the progress bar's total
    assert sorted(o.path for o in report.outcomes) == [str(kb / n) for n in ("a.md", "c.md", "sub/b.md")]
    assert report.counts["unchanged"] == 3


def test_files_are_listed_once_in_the_order_first_named(tmp_path):
    kb = _folder_of_three(tmp_path)
    (kb / "x.csv").write_text("a,b\n")
    (kb / ".hidden.md").write_text("# hidden\n")
    named = [kb / "x.csv", kb / "c.md", kb, kb / "a.md", kb / "sub", kb / "x.csv", kb]
    files, bad, skipped = discover(named, DOCUMENT_SUFFIXES)
    assert files == [kb / "c.md", kb / "a.md", kb / "sub" / "b.md"]
    # Named first, x.csv is a failure of the run (and not also a skip of the folder's listing).
    assert [(o.path, o.reason) for o in bad] == [(str(kb / "x.csv"), "unsupported file type '.csv'")]
    assert skipped == [(str(kb / ".hidden.md"), "hidden file")]

    # Through a link to the folder, or named twice while missing: still once.
    (tmp_path / "link").symlink_to(kb)
    files, bad, _ = discover([tmp_path / "link", kb / "a.md", kb / "nope.md", kb / "sub" / ".." / "nope.md"], DOCUMENT_SUFFIXES)
    assert files == [tmp_path / "link" / n for n in ("a.md", "c.md", "sub/b.md")]
    assert [(o.path, o.reason) for o in bad] == [(str(kb / "nope.md"), "no such file or folder")]


def test_status_while_another_process_holds_the_store(env, settings):
    holder = open_store(settings)
    try:
        proc = run(env, "status", module="search")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "live" in proc.stdout and "minilm: built=yes ready=yes" in proc.stdout
        assert f"in use by another process (pid {os.getpid()})" in proc.stdout, proc.stdout
        store = json.loads(run(env, "status", "--json", module="search").stdout)["store"]
        assert store["available"] is False and store["in_use"] is True and store["holder_pid"] == os.getpid()
    finally:
        holder.close()


def test_triton_status_finds_a_server_of_another_data_dir(tmp_path):
    repo = tmp_path / "repo"
    python_model(repo, "echo")
    other = LocalTriton(repo, tmp_path / "a" / "triton", models=["echo"]).start()  # <data dir a>/triton, as `triton up` does
    try:
        env = {**os.environ, "SEARCH_DATA_DIR": str(tmp_path / "b")}
        env.pop("SEARCH_TRITON_URL", None)
        proc = run(env, "triton", "status", module="search")
        assert proc.returncode == 1 and "not running" in proc.stdout
        assert f"with the data dir {tmp_path / 'a'}: pid {other.state.pid}, gRPC 127.0.0.1:{other.grpc_port}" in proc.stdout
    finally:
        other.stop()
