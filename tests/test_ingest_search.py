"""End to end through the real local Triton and the embedded Qdrant store."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from indexed import copy_index, ingested, sample_docs
from ingest_helper import ingest, long_passage
from qdrant_client import models

from indexer.chunking import Chunker
from indexer.kinds import Documents
from indexer.ledger import Ledger
from indexer.stages import last_requests
from search.config import PROJECT_ROOT
from search.errors import BadRequest, EmptyCollection
from search.services import HIT_CHARS, HIT_CHARS_LIMIT, SearchService, prompt_context
from search.store import DOCUMENTS, match
from search.store.base import Store

QUERIES = json.loads((PROJECT_ROOT / "samples" / "queries.json").read_text())


@pytest.fixture(scope="module")
def sample_index(model_repo, triton, tmp_path_factory):
    """The sample docs ingested once for the module (~10 s of embedding that most tests began with):
    the index's settings, the folder it was made from and the ingest's report. A pristine copy of
    the folder is kept beside it; copies keep the files' mtimes, so the index sees them unchanged."""
    root = tmp_path_factory.mktemp("sample-index")
    docs = sample_docs(root)
    with ingested(root, model_repo, triton.grpc_port, [docs]) as (svc, report):
        made = svc.settings
    shutil.copytree(docs, root / "pristine")
    return made, docs, report


@pytest.fixture
def indexed(sample_index, settings):
    """(service, docs): a service on this test's own copy of the module's index, and the sample docs
    as they were, at the path the index was made from (earlier tests change them)."""
    made, docs, _ = sample_index
    shutil.rmtree(docs)
    shutil.copytree(docs.parent / "pristine", docs)
    svc = SearchService(copy_index(made, settings.data_dir.parent / "indexed"))
    yield svc, docs
    svc.close()


def points(svc: SearchService) -> dict[str, dict]:
    """Every point id -> payload."""
    res, _ = svc.store.scroll(DOCUMENTS.name, limit=10_000, with_payload=True)
    return {str(p.id): p.payload for p in res}


def ids_for(svc: SearchService, path: Path) -> set[str]:
    return {pid for pid, pl in points(svc).items() if str(path) in pl["paths"]}


def test_sample_queries_find_their_documents(indexed, sample_index):
    service, docs = indexed
    report = sample_index[2]
    assert report.counts["indexed"] == len(list(docs.iterdir()))
    assert not report.failures
    assert QUERIES[0]["query"] == "reset password"
    misses = []
    for q in QUERIES:  # "within": the expected document's rank may be this far down (default: first)
        hits = service.search_documents(q["query"], top_k=5)
        assert hits and all(0 < h.score <= 1.0001 for h in hits)
        ranked = list(dict.fromkeys(Path(h.path).name for h in hits))
        if q["expected"] not in ranked[: q.get("within", 1)]:
            misses.append((q["query"], q["expected"], ranked))
    assert not misses, misses
    top = service.search_documents("reset password", top_k=1)[0]
    assert top.path == str(docs / "reset-password.md") and "password" in top.text.lower()


def test_a_run_feeds_the_model_from_its_start_and_ends_on_even_requests(service, docs, monkeypatch):
    """The first requests go out as soon as they fill (the model works while the first sort window is
    read), and the run's last units are split evenly over the requests in flight, so the model's
    instances finish together rather than one running the last request alone."""
    sizes = []
    embed = Documents.embed

    def counted(self, items):
        sizes.append(len(items))
        return embed(self, items)

    monkeypatch.setattr(Documents, "embed", counted)
    batch, slots = service.settings.embed_batch_size, service.settings.embed_concurrency
    report = ingest(service, [docs])
    assert not report.failures and sum(sizes) == report.embedded_chunks > batch * slots
    assert sizes[:slots] == [batch] * slots
    tail = sizes[-slots:]
    assert max(tail) - min(tail) <= 1 and max(tail) <= batch
    for units in (0, 1, 8, 16, 17, 40, 63):  # the arithmetic behind the tail
        size = last_requests(units, 16, 2)
        requests = -(-units // size)
        assert 1 <= size <= 16 and (units == 0 or requests % 2 == 0 or units == 1)


def test_ingest_twice_is_idempotent(indexed):
    service, docs = indexed
    before = points(service)
    report = ingest(service, [docs])
    assert report.counts["unchanged"] == len(before and list(docs.iterdir()))
    assert report.embedded_chunks == 0
    assert points(service) == before


def test_edit_replaces_only_that_files_chunks(indexed):
    service, docs = indexed
    before = points(service)
    target = docs / "printer.md"
    old_ids = ids_for(service, target)
    target.write_text(target.read_text() + "\n\nThe third-floor printer is now called NW-PRN-07 and prints badges.\n")
    report = ingest(service, [docs])
    assert report.counts["updated"] == 1 and report.counts["unchanged"] == len(list(docs.iterdir())) - 1
    after = points(service)
    new_ids = ids_for(service, target)
    assert new_ids and not (new_ids & old_ids)
    assert set(before) - old_ids == set(after) - new_ids  # everything else untouched
    assert all(before[i] == after[i] for i in set(before) - old_ids)
    hit = service.search_documents("which printer prints badges", top_k=1)[0]
    assert hit.path == str(target) and "NW-PRN-07" in hit.text


def test_prune_removes_deleted_files(indexed):
    service, docs = indexed
    gone = docs / "wifi.md"
    assert ids_for(service, gone)
    gone.unlink()
    kept = ingest(service, [docs])  # without --prune nothing is removed
    assert "pruned" not in kept.counts and ids_for(service, gone)
    report = ingest(service, [docs], prune=True)
    assert report.counts["pruned"] == 1
    assert not ids_for(service, gone)
    assert all(Path(pl["path"]).exists() for pl in points(service).values())


def test_rename_and_duplicates_reuse_vectors(indexed):
    service, docs = indexed
    n = len(points(service))
    (docs / "vpn-setup.md").rename(docs / "remote-access.md")
    shutil.copy(docs / "mfa.md", docs / "mfa-copy.md")
    report = ingest(service, [docs])  # no --prune: a move is recognised by its content
    assert report.embedded_chunks == 0  # nothing new to embed: both are known content
    assert len(points(service)) == n
    mfa = [p for p in points(service).values() if p["chunk"] == 0 and "mfa.md" in p["path"]][0]
    assert sorted(Path(p).name for p in mfa["paths"]) == ["mfa-copy.md", "mfa.md"]
    vpn = service.search_documents("how do I connect to the VPN from home", top_k=1)[0]
    assert Path(vpn.path).name == "remote-access.md" and vpn.paths == [str(docs / "remote-access.md")]


def test_same_new_content_twice_in_one_run(service, tmp_path):
    folder = tmp_path / "dups"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.txt"):
        (folder / name).write_text("# Parking\n\nStaff parking permits are issued by reception.\n")
    report = ingest(service, [folder])
    assert report.counts["indexed"] == 3 and report.embedded_chunks == 1
    [pl] = points(service).values()
    assert sorted(Path(p).name for p in pl["paths"]) == ["a.md", "b.md", "c.txt"]


def test_bad_files_are_reported_and_the_rest_indexed(service, docs):
    (docs / "binary.txt").write_bytes(bytes(range(256)) * 40)
    (docs / "latin1.md").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (docs / "empty.txt").write_bytes(b"")
    (docs / "blank.md").write_text("  \n\n \t\n")
    (docs / "dangling.md").symlink_to(docs / "does-not-exist.md")
    os.mkfifo(docs / "pipe.txt")  # reading it would block forever
    (docs / "table.csv").write_text("a,b\n1,2\n")  # neither a document nor a photo: skipped, not failed
    locked = docs / "locked.txt"
    locked.write_text("secret")
    locked.chmod(0)
    report = ingest(service, [docs])
    reasons = {Path(f.path).name: f.reason for f in report.failures}
    assert "binary" in reasons["binary.txt"]
    assert "latin1.md" not in reasons  # a legacy encoding, detected (it used to be refused)
    assert "empty" in reasons["empty.txt"] and "empty" in reasons["blank.md"]
    assert reasons["dangling.md"] == "broken symbolic link"
    assert "not a regular file" in reasons["pipe.txt"]
    if os.geteuid() != 0:  # root reads mode-000 files
        assert "unreadable" in reasons["locked.txt"]
    assert report.skipped >= 1 and "table.csv" not in reasons
    assert report.counts["indexed"] == 18 + (1 if os.geteuid() == 0 else 0)
    assert service.search_documents("reset password", top_k=1)[0].path.endswith("reset-password.md")


def test_long_document_is_chunked_with_overlap(service, tmp_path, settings):
    doc = tmp_path / "long" / "handbook.md"
    doc.parent.mkdir()
    paras = [f"## Section {i}\n\n" + " ".join(f"Rule {i}.{j}: keep the {w} tidy." for j, w in enumerate(["desk", "kitchen", "lab", "server room", "car park"] * 6))
             for i in range(12)]
    doc.write_text("# Office handbook\n\n" + "\n\n".join(paras))
    report = ingest(service, [doc])
    [outcome] = report.outcomes
    assert outcome.chunks > 5 and report.truncated_chunks == 0
    chunks = sorted((pl for pl in points(service).values()), key=lambda pl: pl["chunk"])
    assert [c["chunk"] for c in chunks] == list(range(outcome.chunks))
    assert all(c["n_chunks"] == outcome.chunks for c in chunks)
    assert all(a["end"] > b["start"] or b["start"] - a["end"] <= 2 for a, b in zip(chunks, chunks[1:]))


def test_folder_filter_and_min_score(indexed, tmp_path):
    service, docs = indexed
    other = tmp_path / "other"
    other.mkdir()
    (other / "passwords.md").write_text("# Password policy\n\nPasswords expire every 90 days.\n")
    ingest(service, [docs, other])  # the docs are unchanged; the new folder is indexed
    only = service.search_documents("password", top_k=5, folder=str(other))
    assert [Path(h.path).name for h in only] == ["passwords.md"]
    strict = service.search_documents("reset password", top_k=10, min_score=0.5)
    assert strict and all(h.score >= 0.5 for h in strict) and len(strict) < 10


def test_query_errors(service, indexed):
    with pytest.raises(EmptyCollection, match="indexer ingest"):
        service.search_documents("anything")  # nothing indexed in this one
    service, _ = indexed
    with pytest.raises(BadRequest, match="query"):
        service.search_documents("   ")
    with pytest.raises(BadRequest, match="top_k"):
        service.search_documents("vpn", top_k=0)


def test_interrupted_file_is_not_seen_as_indexed(indexed):
    """Chunk 0 is written last: a file with only later chunks stored is ingested again."""
    service, docs = indexed
    pid = next(i for i, p in points(service).items() if p["chunk"] == 0 and p["path"].endswith("onboarding.md"))
    service.store.delete(DOCUMENTS.name, models.Filter(must=[models.HasIdCondition(has_id=[pid])]))
    report = ingest(service, [docs])
    assert report.counts["indexed"] + report.counts["updated"] == 1
    assert len(points(service)) == len({*points(service)})  # no duplicates
    assert pid in points(service)


def holders(svc: SearchService, path: Path) -> set[str]:
    """The contents (sha256) whose points list ``path``."""
    return {pl["sha256"] for pl in points(svc).values() if str(path) in pl["paths"]}


OLD_PRINTER = "paper stuck inside the copier on our floor"  # finds samples/docs/printer.md
PARKING = "# Parking\n\nStaff parking permits are issued by reception on the ground floor.\n"


def test_a_path_left_on_its_old_content_is_repaired_by_the_next_run(indexed, sample_index, settings, monkeypatch):
    """A run stopped between writing a changed file's new content and taking its path off the old
    content leaves the path listed on both (a search finds the old passage citing it), and the
    file's size and mtime match the new content. The next run reads it again all the same and
    leaves the path on the new content only: the store then holds what an uninterrupted run leaves."""
    service, docs = indexed
    target = docs / "printer.md"
    uninterrupted = SearchService(copy_index(sample_index[0], settings.data_dir.parent / "uninterrupted"))
    [old] = holders(service, target)
    target.write_text(PARKING)

    class Stopped(Exception):
        pass

    def stop_after_the_write(self, sha, path):  # killed right after the new content is written
        self.flush()
        raise Stopped

    with monkeypatch.context() as m:
        m.setattr(Ledger, "_drop_path", stop_after_the_write)
        with pytest.raises(Stopped):
            ingest(service, [docs])
    assert len(holders(service, target)) == 2 and old in holders(service, target)
    [new] = holders(service, target) - {old}
    assert any(str(target) in h.paths and h.sha256 == old for h in service.search_documents(OLD_PRINTER, top_k=5))

    report = ingest(service, [docs])
    assert report.embedded_chunks == 0 and report.counts["unchanged"] == len(list(docs.iterdir()))
    assert holders(service, target) == {new}
    assert not any(pl["sha256"] == old for pl in points(service).values())  # it had no other path: deleted
    assert not any(str(target) in h.paths and h.sha256 != new for h in service.search_documents(OLD_PRINTER, top_k=5))

    uninterrupted = SearchService(uninterrupted.settings)
    try:
        ingest(uninterrupted, [docs])
        assert points(uninterrupted) == points(service)  # the same ids and payloads
    finally:
        uninterrupted.close()


def test_a_file_changed_into_a_copy_of_another_leaves_its_old_content(indexed):
    """New content at a known path that is already stored (for another file): the path joins that
    content and leaves the one it held, in the same run."""
    service, docs = indexed
    target = docs / "printer.md"
    [old] = holders(service, target)
    [wifi] = holders(service, docs / "wifi.md")
    shutil.copy(docs / "wifi.md", target)
    report = ingest(service, [docs])
    assert report.embedded_chunks == 0
    assert holders(service, target) == {wifi}
    assert not any(pl["sha256"] == old for pl in points(service).values())


def test_new_chunk_settings_replace_old_chunks(indexed):
    svc, docs = indexed  # indexed with the default chunk settings
    n_default = len(points(svc))
    svc.close()
    svc = SearchService(svc.settings.model_copy(update={"chunk_tokens": 80, "chunk_overlap": 20}))
    try:
        report = ingest(svc, [docs])
        after = points(svc)
        assert report.counts["updated"] == len(list(docs.iterdir()))
        assert len(after) == report.embedded_chunks > n_default
        [signature] = {pl["chunker"] for pl in after.values()}
        assert signature.startswith("minilm+bge_m3:") and signature.endswith(f"/v{Chunker.VERSION}/80/20")
    finally:
        svc.close()


def test_a_rechunk_stopped_before_the_old_chunks_went_is_finished_by_the_next_run(indexed, monkeypatch):
    """New chunk settings: a run writes each file's new chunks, then deletes its old ones. Stopped in
    between, the store holds both; the next run deletes the old ones without embedding again, whichever
    of the two the store lists first."""
    svc, docs = indexed  # indexed with the default chunk settings
    svc.close()
    delete_content = Store.delete_content

    def stopped_before_the_delete(self, collection, sha256, *, keep_chunker=None):
        if keep_chunker is None:
            delete_content(self, collection, sha256)

    monkeypatch.setattr(Store, "delete_content", stopped_before_the_delete)
    svc = SearchService(svc.settings.model_copy(update={"chunk_tokens": 80, "chunk_overlap": 20}))
    try:
        ingest(svc, [docs])
        assert len({pl["chunker"] for pl in points(svc).values()}) == 2
        monkeypatch.setattr(Store, "delete_content", delete_content)
        report = ingest(svc, [docs])
        after = points(svc)
        [signature] = {pl["chunker"] for pl in after.values()}
        assert signature.endswith("/80/20") and report.embedded_chunks == 0
        assert report.counts["unchanged"] == len(list(docs.iterdir()))
    finally:
        svc.close()


def test_hit_text_is_bounded_unless_asked(service, docs, tmp_path):
    word = "Reset your password: " + "x" * 2_000_000  # one 2 MB "word", as stored before chunks were bounded
    folder = tmp_path / "long"
    long_passage(service, folder, word)
    [hit] = service.search_documents("reset password", top_k=1, folder=str(folder))
    assert hit.truncated and hit.length == len(word)
    assert hit.text == word[:HIT_CHARS]  # no space in the second half: cut inside the word
    assert len(json.dumps(hit.as_dict())) < 2 * HIT_CHARS and len(prompt_context([hit])) < 2 * HIT_CHARS
    assert prompt_context([hit]).endswith("x …")
    [whole] = service.search_documents("reset password", top_k=1, folder=str(folder), full_text=True)
    assert whole.text == word and not whole.truncated and whole.length == len(word)

    prose = " ".join(f"word{i}" for i in range(3000))
    service.store.set_payload(DOCUMENTS.name, {"text": prose}, match("path", str(folder / "long.md")))
    [cut] = service.search_documents("reset password", top_k=1, folder=str(folder), max_chars=100)
    assert cut.truncated and cut.length == len(prose) and 50 <= len(cut.text) <= 100
    assert prose.startswith(cut.text) and prose[len(cut.text)] == " "  # at a word boundary
    [asked] = service.search_documents("reset password", top_k=1, folder=str(folder), max_chars=HIT_CHARS_LIMIT)
    assert asked.text == prose and not asked.truncated

    ingest(service, [docs])  # ordinary passages come back whole
    hits = service.search_documents("how do I connect to the VPN", top_k=20, folder=str(docs))
    assert hits and not any(h.truncated for h in hits) and all(h.length == len(h.text) for h in hits)
    for bad in ({"max_chars": 0}, {"max_chars": HIT_CHARS_LIMIT + 1}, {"max_chars": 10, "full_text": True}):
        with pytest.raises(BadRequest, match="max_chars"):
            service.search_documents("vpn", **bad)
