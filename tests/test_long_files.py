"""A long file's points are written while it is embedded (indexer/writer.py ``Writer.stream``), marked
partial until its unit 0 completes it; the points of a file that never completes do not stay."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from document_helpers import long_doc
from qdrant_client import models
from stored_points import run, stored

from indexer import ledger, writer
from indexer.kinds import Documents
from search.errors import ModelNotReady
from search.store import DOCUMENTS, PARTIAL, open_store, point_id
from search.store.edge import EdgeStore

LIMIT = 600_000  # vector values per streamed write: a few chunks (BGE-M3's ColBERT rows: ~200-300 x 1,024 values)


def payloads(settings) -> list[dict]:
    return [payload for (coll, _), (_, payload) in stored(settings, vectors=False).items() if coll.endswith(DOCUMENTS.name)]


@pytest.fixture
def streaming(monkeypatch):
    monkeypatch.setattr(writer, "WRITE_VALUES", LIMIT)
    writes = []
    upsert = EdgeStore.upsert

    def recorded(store, collection, points):
        writes.append([p.payload["chunk"] for p in points])
        return upsert(store, collection, points)

    monkeypatch.setattr(EdgeStore, "upsert", recorded)
    return writes


def test_a_file_its_model_rejects_leaves_no_streamed_points(settings, tmp_path, streaming, monkeypatch):
    """The model rejects the file's last part after earlier parts were written: the file fails and
    none of its points stay; the other file is indexed."""
    folder = tmp_path / "kb"
    long_doc(folder)
    (folder / "short.md").write_text("# Parking\n\nPermits are issued by reception.\n")
    embed = Documents.embed

    def rejecting(kind, items):
        got = embed(kind, items)
        for k, item in enumerate(items):
            if "Part 11:" in item:
                got.vectors[k] = None
                got.errors[k] = "rejected by the test"
        return got

    monkeypatch.setattr(Documents, "embed", rejecting)
    report = run(settings, [folder])
    assert report.counts["indexed"] == 1 and [Path(o.path).name for o in report.failures] == ["long.md"]
    assert any(0 not in w for w in streaming)  # parts of long.md were written before the rejection
    assert {Path(p["path"]).name for p in payloads(settings)} == {"short.md"}


def test_a_model_that_stops_mid_file_leaves_no_streamed_points(settings, tmp_path, streaming, monkeypatch):
    folder = tmp_path / "kb"
    long_doc(folder, parts=20)
    embed, calls = Documents.embed, []

    def stopping(kind, items):
        calls.append(len(items))
        if len(calls) == 3:
            raise ModelNotReady("bge_m3 stopped (the test)")
        return embed(kind, items)

    monkeypatch.setattr(Documents, "embed", stopping)
    report = run(settings, [folder])
    assert "stopped" in str(report.stopped) and streaming  # something was written before the model stopped
    assert payloads(settings) == []


def test_points_of_files_that_never_completed_are_swept_by_the_next_run(settings, tmp_path, monkeypatch):
    """What a crash leaves (points marked partial): the next run deletes those of unfinished files
    and marks complete those whose unit 0 was written; on a shared store (a Qdrant server) points
    written recently may be another process's ingest in progress, and stay as they are."""
    folder = tmp_path / "kb"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "note.md").write_text("# Note\n\nA short note.\n")
    run(settings, [folder / "a"])  # creates the collection
    chunker = payloads(settings)[0]["chunker"]
    now = float(int(time.time()))  # whole seconds: stored exactly

    def point(sha: str, chunk: int, partial: float, paths: tuple[str, ...] = ()) -> models.PointStruct:
        paths = list(paths or [f"/gone/{sha}.md"])
        return models.PointStruct(id=point_id(sha, chunker, chunk), vector={"minilm": [1.0] + [0.0] * 383},
                                  payload={"sha256": sha, "chunker": chunker, "chunk": chunk, "n_chunks": 3,
                                           "path": paths[0], "paths": paths, "text": "x", PARTIAL: partial})

    def plant() -> None:
        store = open_store(settings)
        try:
            store.upsert(DOCUMENTS.name, [
                point("unfinished", 1, now - 10), point("unfinished", 2, now - 5),
                point("stale", 1, now - 2 * ledger.STALE_PARTIAL_S),
                # complete: its unit 0 lists a copy met after its parts were written
                point("finished", 1, now - 10), point("finished", 2, now - 10),
                point("finished", 0, 0.0, ("/gone/finished.md", "/gone/copy.md")),
                point("finished long ago", 1, now - 2 * ledger.STALE_PARTIAL_S),
                point("finished long ago", 0, 0.0, ("/gone/finished long ago.md", "/gone/copy.md"))])
        finally:
            store.close()

    def left() -> dict[str, list]:
        out: dict[str, list] = {}
        for p in payloads(settings):
            out.setdefault(p["sha256"], []).append((p[PARTIAL], p["paths"]))
        return {sha: sorted(v) for sha, v in out.items() if sha in ("unfinished", "stale", "finished", "finished long ago")}

    finished = [(0.0, ["/gone/finished.md", "/gone/copy.md"])] * 3
    long_ago = [(0.0, ["/gone/finished long ago.md", "/gone/copy.md"])] * 2

    plant()
    monkeypatch.setattr(EdgeStore, "shared", property(lambda self: True))
    run(settings, [folder / "a"])
    assert left() == {"unfinished": [(now - 10, ["/gone/unfinished.md"]), (now - 5, ["/gone/unfinished.md"])],
                      "finished": [(0.0, ["/gone/finished.md", "/gone/copy.md"]), (now - 10, ["/gone/finished.md"]),
                                   (now - 10, ["/gone/finished.md"])],
                      "finished long ago": long_ago}

    monkeypatch.setattr(EdgeStore, "shared", property(lambda self: False))  # the embedded store: one process
    run(settings, [folder / "a"])
    assert left() == {"finished": finished, "finished long ago": long_ago}


def test_content_chunked_anew_keeps_its_parts_when_its_old_path_changes_meanwhile(settings, tmp_path, streaming):
    """Content stored with other chunk settings is embedded anew for a copy of it while the file it
    was stored for changes: its old chunking goes with that path, the parts of the new one stay."""
    folder = tmp_path / "kb"
    old = long_doc(folder)  # kb/long.md
    run(settings.model_copy(update={"chunk_tokens": 150}), [folder])
    copy = folder / "a-copy.md"  # listed before long.md: embedded anew while long.md changes
    copy.write_bytes(old.read_bytes())
    old.write_text("# Parking\n\nPermits are issued by reception.\n")
    report = run(settings, [folder])
    assert not report.failures and any(0 not in w for w in streaming)  # the copy was written in parts
    by_sha: dict[str, list[dict]] = {}
    for p in payloads(settings):
        by_sha.setdefault(p["sha256"], []).append(p)
    got = {(len(ps) == ps[0]["n_chunks"], *{tuple(p["paths"]) for p in ps}) for ps in by_sha.values()}
    assert got == {(True, (str(old),)), (True, (str(copy),))}  # each content whole, on its one path
