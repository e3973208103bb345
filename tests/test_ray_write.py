"""The Ray ingest's write stage (indexer/distributed.py) without a Ray cluster or a Qdrant server:
its functions run in this process, against the real Triton and a real embedded store.

- ``write_new``, called directly on records that went through the read+split and embed stages,
  writes exactly the points a local ingest of the same files writes, every file's unit 0 after its
  other units, and writing the same records again changes nothing (a block that Ray runs twice).
- The whole Ray ingest with the workers writing (as with QDRANT_URL), the cluster replaced by the
  same stage functions run here, every block written before the driver sees the first one (the
  order a cluster that runs ahead of the driver gives): the driver's rules (copies, moves, changed
  files, prune) on top of the workers' writes leave what a local ingest leaves.
- A file longer than an embed slice, written a slice at a time: by its worker, or, with the
  embedded store, by the driver, which gets it in parts.
- A document's scans are read (OCR) in the model actor, on a replica that answers.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from document_helpers import long_doc
from qdrant_client import models
from stored_points import assert_same_points, mixed_folder, photo, points_of, run, stored

from indexer import distributed, ray_plan, ray_workers, writer
from indexer.distributed import Embedder, _pack, _Rec, make_plan, read_and_split, write_new
from indexer.engine import Ingestor, listing
from indexer.kinds import Documents
from indexer.ray_cluster import LOOPBACK
from indexer.report import IngestReport
from indexer.service import IngestService
from indexer.stages import bounded_runs
from search.config import PROJECT_ROOT, Settings
from search.services import SearchService
from search.store import Store
from search.store.edge import EdgeStore


def twin(settings: Settings, name: str) -> Settings:
    return settings.model_copy(update={"data_dir": settings.data_dir.parent / name})


class Recording:
    """A store that notes the (content, unit) of every point upserted, in order."""

    def __init__(self, store: Store) -> None:
        self.store, self.calls = store, []

    def upsert(self, collection: str, points) -> None:
        self.calls.append([(p.payload["sha256"], p.payload["chunk"]) for p in points])
        self.store.upsert(collection, points)

    def __getattr__(self, name: str):  # every other call goes to the store unrecorded
        return getattr(self.store, name)


def embed(embedder: Embedder, batch: dict) -> list[bytes]:
    """The records an embed call yields, slice after slice."""
    return [raw for part in embedder(batch) for raw in part["rec"]]


def test_embed_slices_keep_order_and_bound_units():
    recs = [_Rec(Path(f"/{i}.md"), "documents", units=[None] * n) for i, n in enumerate([3, 2, 9, 0, 1, 4, 4])]
    parts = list(bounded_runs(recs, lambda r: len(r.units or ()), 5))
    assert [[r.path.name for r in part] for part in parts] == [["0.md", "1.md"], ["2.md"], ["3.md", "4.md", "5.md"], ["6.md"]]
    assert list(bounded_runs([], len, 5)) == []


def test_write_new_writes_what_a_local_ingest_writes(settings, docs, monkeypatch):
    for i in range(3):
        photo(docs / f"photo{i}.jpg", i)
    local = run(settings, [docs])
    assert local.counts["indexed"] >= 5 and not local.failures

    on_worker = twin(settings, "worker-data")
    svc = IngestService(on_worker)
    try:
        store = svc.resources.store
        kinds, _ = svc.kinds()
        ingestors = {}
        for kind in kinds:
            ingestors[kind.name] = Ingestor(store, kind, whole=True)
            ingestors[kind.name].open()  # creates the collections, as the driver does before the pipeline
        plan = make_plan(on_worker, ingestors, [on_worker.triton_url], confine_to=None, kb=None, write=False)
        _, by_kind, _, _ = listing(IngestReport(), kinds, [docs], unavailable=None, gone_ok=False, confine_to=None,
                                   on_start=None, on_file=None)
        batch = _pack([_Rec(path, name) for name, paths in by_kind.items() for path in paths])
        # Small slices: the batch's files come back in several objects, in order, as one call's would.
        monkeypatch.setattr(ray_workers, "UNITS_PER_EMBED_SLICE", 4)
        parts = list(Embedder(plan)(read_and_split(batch, plan)))
        embedded = [raw for part in parts for raw in part["rec"]]
        assert len(parts) > 2 and [pickle.loads(r).path for r in embedded] == [r.path for r in map(pickle.loads, batch["rec"])]
        assert all(pickle.loads(r).vectors for r in embedded)

        recording = Recording(store)
        recs = [pickle.loads(r) for r in embedded]
        write_new(recording, plan, {k.name: k for k in kinds}, recs)
        # The driver gets the paths written and the number of units, not the units and vectors.
        assert all(r.written == (str(r.path),) and r.chunks and r.units is None and r.vectors is None for r in recs)
        assert all(r.times["write"] > 0 for r in recs)
        order = [unit for call in recording.calls for unit in call]
        for sha in {s for s, _ in order}:
            at = [k for k, (s, _) in enumerate(order) if s == sha]
            marker = order.index((sha, 0))
            assert marker == max(at), "a file's unit 0 was written before another of its units"
        first = points_of(store, on_worker.data_dir)

        # The same records again (a block that Ray runs twice): the same points, nothing more.
        write_new(store, plan, {k.name: k for k in kinds}, [pickle.loads(r) for r in embedded])
        assert_same_points(first, points_of(store, on_worker.data_dir))
    finally:
        svc.close()
    assert_same_points(stored(settings), first)


def test_vectors_cross_between_stages_as_float32_and_come_back_exact():
    """A record's vectors pickle as float32 arrays (a slice of BGE-M3 ColBERT rows is one object in
    Ray's store): arrays as the ingest keeps them, and lists (vectors read back from a store) as
    arrays of the same values."""
    rng = np.random.default_rng(0)
    colbert = rng.standard_normal((300, 1024)).astype(np.float32)
    vec = {"bge_dense": rng.standard_normal(1024).astype(np.float32).tolist(), "bge_colbert": colbert,
           "bge_sparse": models.SparseVector(indices=[3, 7], values=[0.5, 0.25]), "no_rows": np.zeros((0, 1024), np.float32)}
    raw = pickle.dumps(_Rec(Path("/n.md"), "documents", vectors=[vec, None]))
    assert len(raw) < 4.1 * (1024 + 300 * 1024)  # as Python floats: ~9 bytes each
    back, none = pickle.loads(raw).vectors
    assert none is None and back["bge_sparse"] == vec["bge_sparse"]
    assert back["bge_dense"].dtype == np.float32 and back["bge_dense"].tolist() == vec["bge_dense"]
    assert np.array_equal(back["bge_colbert"], colbert) and back["no_rows"].shape == (0, 1024)


def fake_ray(monkeypatch, svc: IngestService, write: bool = True, sent: list | None = None) -> None:
    """distributed.ingest with the workers writing, its cluster replaced by this process: every block
    is read, embedded and written (into the driver's own store, the one opener the embedded store
    admits) before the driver applies the first record. ``write=False``: the embedded store's way,
    the driver writes; ``sent`` gets each record's (file name, units, part) as the driver gets it."""

    class RayError(Exception):
        pass

    def stream(ray, plan, files, settings):
        assert plan.write == write
        out = []
        for k in range(0, len(files), 3):
            batch = read_and_split(_pack([_Rec(path, name) for path, name in files[k:k + 3]]), plan)
            out += embed(Embedder(plan, svc.resources.store if write else None), batch)
        for raw in out:
            rec = pickle.loads(raw)
            if sent is not None:
                sent.append((rec.path.name, len(rec.units or ()), rec.part))
            yield rec

    monkeypatch.setattr(distributed, "workers_write", lambda settings: write)
    monkeypatch.setattr(distributed, "connect", lambda address: (SimpleNamespace(exceptions=SimpleNamespace(RayError=RayError)), False))
    monkeypatch.setattr(distributed, "check_nodes", lambda ray, roots, writable: None)
    monkeypatch.setattr(distributed, "_stream", stream)


def ray_run(monkeypatch, settings: Settings, paths, write: bool = True, sent: list | None = None, **kw):
    svc = IngestService(settings)
    try:
        with monkeypatch.context() as m:
            fake_ray(m, svc, write, sent)
            return svc.ingest(paths, ray="", **kw)
    finally:
        svc.close()


def outcomes(report) -> set:
    return {(Path(o.path).name, o.status, o.reason, o.chunks) for o in report.outcomes}


def test_driver_rules_on_top_of_worker_writes_equal_a_local_ingest(settings, docs, monkeypatch):
    mixed = mixed_folder(docs)  # with a copy of each kind: the copy's worker writes the content again
    shutil.copy(mixed / "photo1.jpg", mixed / "photo1-copy.png")  # a copy with another suffix
    local = run(settings, [mixed])
    on_ray = twin(settings, "ray-data")
    report = ray_run(monkeypatch, on_ray, [mixed])
    assert outcomes(report) == outcomes(local)
    assert report.embedded_chunks == local.embedded_chunks
    assert report.stages["write"]["items"] > 0 and "apply" in report.stages  # written by the workers
    assert_same_points(stored(settings), stored(on_ray))

    # Moves, a changed file, a gone file (prune), and a new copy of known content.
    (mixed / "photo2.jpg").rename(mixed / "photo2-moved.jpg")
    (mixed / "photo3.jpg").unlink()
    photo(mixed / "photo0.jpg", 42)  # changed: new content at a known path, the old content keeps its copy
    changed = sorted(mixed.glob("*.md"))[1]
    changed.write_text(changed.read_text() + "\n\nOne more paragraph, so the content is new.\n")
    # Listed after its original: a copy listed first makes the original's size and mtime differ from the
    # store's in a local run (so it is read again), not in a Ray run (checked against the planned view).
    shutil.copy(mixed / "pic.png", mixed / "pic2.png")
    local = run(settings, [mixed], prune=True)
    report = ray_run(monkeypatch, on_ray, [mixed], prune=True)
    assert outcomes(report) == outcomes(local)
    assert report.embedded_chunks == local.embedded_chunks > 0
    assert_same_points(stored(settings), stored(on_ray))

    again = ray_run(monkeypatch, on_ray, [mixed])
    assert again.counts["indexed"] == again.counts["updated"] == 0 and again.embedded_chunks == 0


def test_copies_with_other_suffixes_and_times(settings, tmp_path, monkeypatch):
    """Five copies of new content, in two blocks, with other suffixes and mtimes: each copy's worker
    writes the content again with its own path, suffix and mtime; the store ends with what a local
    ingest stores (every path, and the first file's suffix, size and mtime)."""
    folder = tmp_path / "copies"
    folder.mkdir()
    for k, name in enumerate(["a.md", "b.txt", "c.md", "d.txt", "e.md"]):
        (folder / name).write_text("# Same\n\nThe same words in every copy.\n")
        os.utime(folder / name, (1_700_000_000 + 1000 * k,) * 2)
    local = run(settings, [folder])
    on_ray = twin(settings, "ray-copies")
    report = ray_run(monkeypatch, on_ray, [folder])
    assert report.counts["indexed"] == 5 and report.embedded_chunks == local.embedded_chunks
    a, b = stored(settings), stored(on_ray)
    assert a and all(len(payload["paths"]) == 5 for _, payload in a.values())
    assert_same_points(a, b)


@pytest.mark.parametrize("write", [True, False], ids=["workers-write", "driver-writes"])
def test_a_long_file_is_embedded_and_written_a_slice_at_a_time(settings, tmp_path, monkeypatch, write):
    """A file with more units than an embed slice is embedded a slice at a time and its units written
    once they hold the writer's budget (here: at once): by its worker when the workers write (a Qdrant
    server), by the driver, which gets the file in parts, with the embedded store. Its other units are marked partial, its unit 0 comes
    last, and the store ends as a local ingest leaves it. A part the model rejects leaves none of
    that file; with the driver writing, neither does a run cancelled between two parts."""
    folder = tmp_path / "kb"
    long_doc(folder, parts=10)
    (folder / "short.md").write_text("# Parking\n\nPermits are issued by reception.\n")
    local = run(settings, [folder])
    monkeypatch.setattr(ray_workers, "UNITS_PER_EMBED_SLICE", 4)
    monkeypatch.setattr(writer, "WRITE_VALUES", 1)  # every embedded unit is past the budget
    writes, upsert = [], EdgeStore.upsert

    def recorded(store, collection, points):
        writes.append([(p.payload["path"], p.payload["chunk"], p.payload["partial"]) for p in points])
        return upsert(store, collection, points)

    monkeypatch.setattr(EdgeStore, "upsert", recorded)
    on_ray, sent = twin(settings, "ray-long"), []
    report = ray_run(monkeypatch, on_ray, [folder], write=write, sent=sent)
    assert outcomes(report) == outcomes(local)
    assert_same_points(stored(settings), stored(on_ray))
    long = [w for w in writes if w[0][0].endswith("long.md")]
    assert len(long) > 3 and all(len(w) <= 4 for w in long)
    assert all(chunk and partial > 0 for w in long[:-1] for _, chunk, partial in w) and long[-1][0][1:] == (0, 0.0)
    if not write:  # the driver got the file in parts of a slice each, and counts it as one file written
        n = next(o.chunks for o in local.outcomes if o.path.endswith("long.md"))
        parts = [(units, part) for name, units, part in sent if name == "long.md"]
        assert [part for _, part in parts] == [(start, n) for start in range(0, n, 4)] and all(u <= 4 for u, _ in parts)
        assert report.stages["write"]["items"] == 2 and report.stages["embed"]["items"] == local.embedded_chunks

    embed = Documents.embed

    def rejecting(kind, items):
        got = embed(kind, items)
        for k, item in enumerate(items):
            if "Part 8:" in item:
                got.vectors[k], got.errors[k] = None, "rejected by the test"
        return got

    with monkeypatch.context() as m:
        m.setattr(Documents, "embed", rejecting)
        writes.clear()
        rejected = twin(settings, "ray-rejected")
        report = ray_run(monkeypatch, rejected, [folder], write=write)
    assert [Path(o.path).name for o in report.failures] == ["long.md"] and report.counts["indexed"] == 1
    assert any(w[0][0].endswith("long.md") for w in writes)  # parts were written before the rejection
    assert {Path(payload["path"]).name for _, payload in stored(rejected, vectors=False).values()} == {"short.md"}
    if write:
        return

    asked = []  # the driver asks before each record: stop at long.md's third part
    cancelled = twin(settings, "ray-cancelled")
    report = ray_run(monkeypatch, cancelled, [folder], write=False, stop=lambda: asked.append(1) or len(asked) > 2)
    assert report.cancelled and not report.outcomes
    assert stored(cancelled) == {}  # its first two parts were written, then deleted


def listing_paths(settings: Settings) -> dict[str, list[tuple[str, ...]]]:
    """Each stored content's paths as its points list them: sha256 -> one tuple per point."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for _, payload in stored(settings, vectors=False).values():
        out.setdefault(payload["sha256"], []).append(tuple(payload["paths"]))
    return out


def cited(settings: Settings, query: str, path: Path) -> set[str]:
    """The contents of the hits for ``query`` that cite ``path``."""
    svc = SearchService(settings)
    try:
        return {h.sha256 for h in svc.search_documents(query, top_k=5) if str(path) in h.paths}
    finally:
        svc.close()


def without_order(points: dict) -> dict:
    """Points with their paths as a set: which of a copy's paths comes first depends on which worker wrote last."""
    return {k: (v, {**pl, "path": None, "paths": sorted(pl["paths"])}) for k, (v, pl) in points.items()}


@pytest.mark.parametrize("repair", ["local", "ray"])
def test_a_run_stopped_before_the_driver_applied_is_repaired_by_the_next(settings, docs, monkeypatch, repair):
    """The workers wrote every block and the run stopped before the driver applied any: a changed
    file's path is listed on its old content and on its new one (a search finds the old passage
    citing it), a copy of new content lists only the path its own worker wrote. The next run
    repairs both although the changed file's size and mtime match its new content: the store ends
    with the points of an uninterrupted run, paths and all."""
    on_ray = twin(settings, "ray-stopped")
    run(settings, [docs])
    run(on_ray, [docs])
    target = docs / "printer.md"
    [old] = [sha for sha, paths in listing_paths(on_ray).items() if str(target) in paths[0]]
    target.write_text("# Parking\n\nStaff parking permits are issued by reception on the ground floor.\n")
    (docs / "aa-lockers.md").write_text("# Lockers\n\nDay lockers on each floor open with your badge.\n")
    shutil.copy2(docs / "aa-lockers.md", docs / "zz-lockers.md")  # the same mtime: the copies' payloads agree
    query = "paper stuck inside the copier on our floor"  # the old printer.md

    stopped = ray_run(monkeypatch, on_ray, [docs], stop=lambda: True)
    assert stopped.cancelled and not stopped.outcomes
    held = {sha for sha, paths in listing_paths(on_ray).items() if any(str(target) in p for p in paths)}
    assert old in held and len(held) == 2  # the stale state: the path on its old and its new content
    [new] = held - {old}
    assert old in cited(on_ray, query, target)
    lockers = [paths for paths in listing_paths(on_ray).values() if any("lockers" in q for p in paths for q in p)]
    assert len(lockers) == 1 and all(len(p) == 1 for p in lockers[0])  # a copy's worker wrote its own path only

    again = run(on_ray, [docs]) if repair == "local" else ray_run(monkeypatch, on_ray, [docs])
    assert again.embedded_chunks == 0  # every content is in the store: nothing is embedded again
    assert {Path(o.path).name: o.status for o in again.outcomes if o.status != "unchanged"} == {"aa-lockers.md": "indexed"}
    after = listing_paths(on_ray)
    assert {sha for sha, paths in after.items() if any(str(target) in p for p in paths)} == {new}
    assert old not in after and old not in cited(on_ray, query, target)
    [lockers] = [paths for paths in after.values() if any("lockers" in q for p in paths for q in p)]
    assert {frozenset(p) for p in lockers} == {frozenset({str(docs / "aa-lockers.md"), str(docs / "zz-lockers.md")})}

    run(settings, [docs])  # uninterrupted
    assert_same_points(without_order(stored(settings)), without_order(stored(on_ray)))


def test_a_worker_process_keeps_only_the_last_plans_clients_and_maps(settings, monkeypatch):
    """A process that serves one ingest after another (a long-lived Ray worker, a library caller,
    this test session) keeps the kinds (with their Triton clients) and stored-file maps of the last
    RECENT_PLANS plans it used, a plan used again counting as recent."""
    n = 4
    for name, value in (("RECENT_PLANS", n), ("_KINDS", {}), ("_STORED", {})):
        monkeypatch.setattr(ray_plan, name, value)
    plans = [SimpleNamespace(token=f"plan-{i}", settings=settings, kinds={}, known={}, kb=None) for i in range(n + 2)]
    first = ray_plan._kinds(plans[0], "127.0.0.1:1")
    for i, plan in enumerate(plans[1:], 1):
        ray_plan._kinds(plan, "127.0.0.1:1")
        ray_plan._stored(plan)
        ray_plan._kinds(plans[1], "127.0.0.1:2")  # plan 1 again (another replica): still recent
        assert len(ray_plan._KINDS) == min(i + 1, n) and len(ray_plan._STORED) == min(i, n)
    assert list(ray_plan._KINDS) == ["plan-3", "plan-4", "plan-5", "plan-1"]
    assert set(ray_plan._KINDS["plan-1"]) == {"127.0.0.1:1", "127.0.0.1:2"}
    assert list(ray_plan._STORED) == ["plan-2", "plan-3", "plan-4", "plan-5"]
    assert ray_plan._kinds(plans[0], "127.0.0.1:1") is not first  # made again when it comes back


def test_the_model_actor_reads_scans_on_the_replica_that_answers(settings, tmp_path):
    """The read stage leaves a document's scans to the model actor, which reads them (OCR) as it
    embeds, on a replica that answers: the one it started on is gone, it moves to the next."""
    folder = tmp_path / "scans"
    folder.mkdir()
    shutil.copy(PROJECT_ROOT / "samples" / "scans" / "printer-queue-scan.pdf", folder)
    svc = IngestService(settings.model_copy(update={"triton_timeout_s": 600}))  # OCR waits its turn on a busy machine
    try:
        [docs] = [k for k in svc.kinds()[0] if k.name == "documents"]
        ing = Ingestor(svc.resources.store, docs, whole=True)
        ing.open()
        with socket.socket() as s:  # a port nothing listens on: a replica that is gone
            s.bind((LOOPBACK, 0))
            gone = f"{LOOPBACK}:{s.getsockname()[1]}"
        plan = make_plan(svc.settings, {"documents": ing}, [gone, settings.triton_url], confine_to=None, kb=None, write=False)
        [rec] = map(pickle.loads, read_and_split(_pack([_Rec(folder / "printer-queue-scan.pdf", "documents")]), plan)["rec"])
        assert rec.loaded is not None and rec.units is None and rec.outcome is None  # decoded, its text left to read
        embedder = Embedder(plan)
        embedder.at = 0
        [got] = [pickle.loads(raw) for part in embedder(_pack([rec])) for raw in part["rec"]]
    finally:
        svc.close()
    assert got.failure is None and not got.error and embedder.at == 1
    assert got.units and len(got.vectors) == len(got.units) and "ocr" in got.times  # read in the model stage
    assert "spooler" in " ".join(u.item for u in got.units).lower()
    assert all(u.read and "ocr" in u.payload for u in got.units)  # stored under the reader's signature
