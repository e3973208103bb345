"""BGE-M3 document search end to end: PDF/DOCX/HTML/Markdown -> Triton (MiniLM + the tiny random
BGE-M3) -> one Qdrant point per chunk with four named vectors -> semantic, dense, sparse and
hybrid queries. The model is random, so these tests check plumbing and exact formulas, not quality."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from doc_fixtures import make_docx, make_html, make_pdf, make_scanned_pdf
from indexed import copy_index, ingested, sample_docs
from ingest_helper import ingest
from qdrant_client import models
from stored_points import assert_same_points, run, stored

from indexer import pipeline, stages, writer
from indexer.chunking import Chunker
from indexer.kinds import Documents
from indexer.service import IngestService
from search.errors import BadRequest, EmptyCollection
from search.models import bge_m3, family
from search.services import SearchService
from search.store import DOCUMENTS
from search.store.edge import EdgeStore

PDF_PAGES = [
    "Travel policy\n\nEmployees book flights through the travel desk at least two weeks ahead.",
    "Expenses\n\nHotel receipts are uploaded within thirty days. Taxi fares need a receipt too.",
    "Per diem\n\nMeals abroad are covered by a daily allowance that depends on the country.",
]


@pytest.fixture
def library(docs) -> Path:
    return make_library(docs)


@pytest.fixture(scope="module")
def indexed_library(model_repo, triton, tmp_path_factory):
    """The library ingested once for the tests that only read it (tests/indexed.py)."""
    root = tmp_path_factory.mktemp("hybrid")
    with ingested(root, model_repo, triton.grpc_port, [make_library(sample_docs(root))]) as (svc, report):
        return svc.settings, report


@pytest.fixture
def indexed(indexed_library, tmp_path) -> SearchService:
    """A service on this test's own copy of the ingested library."""
    svc = SearchService(copy_index(indexed_library[0], tmp_path / "data"))
    yield svc
    svc.close()


def make_library(docs: Path) -> Path:
    """The sample help-desk docs plus one PDF, one DOCX and one HTML page."""
    (docs / "travel.pdf").write_bytes(make_pdf(PDF_PAGES, title="Travel and expenses"))
    (docs / "onboarding.docx").write_bytes(make_docx([
        ("title", "Onboarding guide"), ("h1", "First day"), ("p", "Collect your badge from reception on the ground floor."),
        ("h1", "Accounts"), ("p", "Your laptop arrives with single sign-on already configured."),
        ("table", [["System", "Owner"], ["Payroll", "Finance"]])]))
    (docs / "parking.html").write_bytes(make_html(
        "<h1>Parking</h1><p>Visitor parking permits are issued by the front desk.</p>"
        "<script>var hidden = 'never indexed';</script>", title="Parking rules"))
    return docs


def all_points(svc: SearchService, vectors: bool = False) -> list[models.Record]:
    res, _ = svc.store.scroll(DOCUMENTS.name, limit=10_000, with_payload=True, with_vectors=vectors)
    return res


def test_every_chunk_gets_four_vectors_and_a_citation(indexed_library, indexed):
    service, report = indexed, indexed_library[1]
    assert not report.failures and report.counts["indexed"] == 20
    points = all_points(service, vectors=True)
    assert {".md", ".pdf", ".docx", ".html"} <= {p.payload["suffix"] for p in points}
    for p in points:
        assert set(p.vector) == {"minilm", "bge_dense", "bge_sparse", "bge_colbert"}, p.payload["path"]
        assert len(p.vector["minilm"]) == 384 and len(p.vector["bge_dense"]) == 1024
        colbert = np.asarray(p.vector["bge_colbert"])
        assert colbert.shape[1] == 1024 and np.allclose(np.linalg.norm(colbert, axis=1), 1, atol=1e-4)
        assert p.payload["models"] == ["minilm", "bge_m3"]
    pdf = sorted((p.payload for p in points if p.payload["suffix"] == ".pdf"), key=lambda pl: pl["chunk"])
    assert [pl["page"] for pl in pdf] == [1, 2, 3]  # short pages: one chunk each, never across pages
    assert all(pl["title"] == "Travel and expenses" for pl in pdf)
    assert "Hotel receipts" in pdf[1]["text"]
    docx = {pl["text"]: pl for pl in (p.payload for p in points if p.payload["suffix"] == ".docx")}
    assert any(pl["section"] in ("First day", "Onboarding guide", "Accounts") for pl in docx.values())
    html = [p.payload for p in points if p.payload["suffix"] == ".html"]
    assert html[0]["title"] == "Parking rules" and "never indexed" not in html[0]["text"]


def test_exact_passage_is_the_top_hit_in_every_bge_mode(indexed):
    service = indexed
    target = next(p.payload for p in all_points(service) if p.payload["suffix"] == ".pdf" and p.payload["page"] == 2)
    for mode in ("dense", "hybrid"):
        hits = service.search_documents(target["text"], top_k=3, mode=mode)
        assert hits[0].path.endswith("travel.pdf") and hits[0].page == 2 and hits[0].mode == mode
        # The same text gives the same vectors: cosine 1 (dense), mean of per-token best dot = 1 (ColBERT).
        assert hits[0].score == pytest.approx(1.0, abs=1e-3)
        assert hits[0].citation == f"{hits[0].path} (p. 2, § Expenses, chunk 1)" or "p. 2" in hits[0].citation
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_hybrid_scores_are_bge_m3_colbert_scores(indexed):
    """The re-rank score Qdrant returns (MAX_SIM, scaled to a mean) equals FlagEmbedding's formula."""
    service = indexed
    stored = {(p.payload["path"], p.payload["chunk"]): np.asarray(p.vector["bge_colbert"])
              for p in all_points(service, vectors=True)}
    query = "how do I reset my password"
    q = bge_m3.encode(service.triton, [query])[0]
    hits = service.search_documents(query, top_k=10, mode="hybrid")
    assert len(hits) == 10
    for h in hits:
        assert h.score == pytest.approx(bge_m3.colbert_score(q.colbert, stored[(h.path, h.chunk)]), abs=1e-4)


def test_sparse_scores_are_idf_weighted_lexical_matches(indexed):
    """Qdrant's IDF modifier: score = sum over shared token ids of idf(t) * q(t) * d(t), with
    idf(t) = ln((N - n(t) + 0.5) / (n(t) + 0.5) + 1) over the collection."""
    service = indexed
    docs = {(p.payload["path"], p.payload["chunk"]): dict(zip(p.vector["bge_sparse"].indices, p.vector["bge_sparse"].values))
            for p in all_points(service, vectors=True)}
    df = Counter(t for d in docs.values() for t in d)
    idf = {t: math.log((len(docs) - n + 0.5) / (n + 0.5) + 1) for t, n in df.items()}
    query = "receipts for hotel and taxi"
    q = bge_m3.encode(service.triton, [query], colbert=False)[0].sparse
    expected = sorted(((sum(idf[t] * w * d.get(t, 0.0) for t, w in q.items() if t in d), key) for key, d in docs.items()),
                      reverse=True)
    expected = [(s, key) for s, key in expected if s > 0]  # a sparse search returns only points sharing a token
    hits = service.search_documents(query, top_k=5, mode="sparse")
    assert [h.score for h in hits] == pytest.approx([s for s, _ in expected[:5]], rel=1e-4)
    assert (hits[0].path, hits[0].chunk) == expected[0][1]


def test_auto_mode_falls_back_until_documents_have_bge_vectors(service, library, settings):
    """Documents embedded while only MiniLM was served: auto = semantic, BGE modes say what to do;
    once BGE-M3 is served, the next ingest re-embeds them and auto becomes hybrid."""
    chunker = Chunker(IngestService(service.settings, service.resources).chunk_tokenizer(), max_tokens=settings.chunk_tokens, overlap=settings.chunk_overlap)
    minilm_only = Documents(service.triton, chunker, settings.max_file_bytes, [family("minilm")])
    pipeline.ingest(service.store, [minilm_only], [library])
    assert all(p.payload["models"] == ["minilm"] for p in all_points(service))
    assert service.search_documents("reset password", mode="auto")[0].mode == "semantic"
    with pytest.raises(EmptyCollection, match="no documents have BGE-M3 vectors yet.*indexer ingest"):
        service.search_documents("reset password", mode="hybrid")
    report = ingest(service, [library])
    assert report.counts["updated"] + report.counts["indexed"] == 20 and report.embedded_chunks > 0
    assert all(p.payload["models"] == ["minilm", "bge_m3"] for p in all_points(service))
    hits = service.search_documents("reset password", mode="auto")
    assert hits and hits[0].mode == "hybrid"
    with pytest.raises(BadRequest, match="mode: must be one of"):
        service.search_documents("reset password", mode="fuzzy")


def test_auto_mode_reuses_served_and_falls_back_when_bge_m3_goes(settings, model_repo, library, tmp_path):
    """Auto mode asks Triton whether BGE-M3 is served at most every READY_TTL_S; a query that finds it
    gone since (unloaded) runs semantic instead of failing, in threads and in an event loop, while
    an explicit hybrid search still says what to do."""
    import tritonclient.grpc as grpcclient

    from search.errors import ModelNotReady
    from search.models import built_triton_models
    from search.triton.local import LocalTriton

    srv = LocalTriton(model_repo, tmp_path / "run", models=[m for m in built_triton_models(model_repo) if m.startswith(("minilm", "bge_m3"))]).start(timeout=120)
    control = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    svc = SearchService(settings.model_copy(update={"triton_url": f"127.0.0.1:{srv.grpc_port}"}))
    try:
        ingest(svc, [library])
        for run in (lambda: svc.search_documents("reset password", mode="auto")[0].mode,
                    lambda: asyncio.run(awaited(svc.encode_query("reset password", mode="auto"))).mode):
            control.load_model("bge_m3")
            assert run() == "hybrid"  # Triton said "served", which the next queries reuse
            control.unload_model("bge_m3")
            while control.is_model_ready("bge_m3"):
                pass
            assert svc.triton.model_ready("bge_m3", max_age_s=60)  # still remembered: no question asked
            assert run() == "semantic"
            assert not svc.triton.model_ready("bge_m3", max_age_s=60)  # the failed request forgot it
        with pytest.raises(ModelNotReady, match="not served.*or use --mode semantic"):
            svc.search_documents("reset password", mode="hybrid")
    finally:
        svc.close()
        srv.stop()


def test_folder_filter_applies_to_every_mode(service, library, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.md").write_text("# Hotel receipts\n\nUpload hotel receipts and taxi receipts here.\n")
    ingest(service, [library, other])
    for mode in ("semantic", "dense", "sparse", "hybrid"):
        hits = service.search_documents("hotel receipts", top_k=5, mode=mode, folder=str(other))
        assert hits and {h.path for h in hits} == {str(other / "note.md")}, mode


def test_bad_documents_are_reported_and_the_rest_indexed(service, tmp_path):
    kb = tmp_path / "mixed"
    kb.mkdir()
    (kb / "good.pdf").write_bytes(make_pdf(["Quarterly report\n\nRevenue grew in every region."]))
    (kb / "locked.pdf").write_bytes(make_pdf(["secret"], password="hunter2"))
    (kb / "scan.pdf").write_bytes(make_scanned_pdf())
    (kb / "broken.pdf").write_bytes(make_pdf(["cut short " * 200])[:300])
    (kb / "notes.pdf").write_text("just text with the wrong extension")
    (kb / "memo.docx").write_text("not a word document")
    # A UTF-8 BOM, then Latin-1: refused (without the BOM the encoding is detected and it is indexed).
    (kb / "latin1.md").write_bytes(b"\xef\xbb\xbf" + "caf\xe9 menu".encode("latin-1"))
    (kb / "page.html").write_bytes(make_html("<p>Visible text survives.</p>", title="A page"))
    report = ingest(service, [kb])
    failed = {Path(o.path).name: o.reason for o in report.failures}
    assert set(failed) == {"locked.pdf", "broken.pdf", "notes.pdf", "memo.docx", "latin1.md"}, failed  # scan.pdf: OCR
    assert "encrypted" in failed["locked.pdf"]
    assert "not a PDF" in failed["notes.pdf"] and "not a DOCX" in failed["memo.docx"]
    assert "UTF-8" in failed["latin1.md"]
    assert all("\n" not in r and "Traceback" not in r and len(r) < 200 for r in failed.values())
    assert report.counts["indexed"] == 3


def test_long_document_is_chunked_within_budget_and_cited_by_page(service, tmp_path, settings):
    kb = tmp_path / "long"
    kb.mkdir()
    paragraph = ("Section {n} explains how the backup service copies every laptop to the data centre at night, "
                 "how long copies are kept, and who may restore a file for you.")
    pages = ["\n\n".join(paragraph.format(n=f"{p}.{i}") for i in range(12)) for p in range(1, 6)]
    (kb / "handbook.pdf").write_bytes(make_pdf(pages, title="IT handbook"))
    report = ingest(service, [kb])
    outcome = report.outcomes[0]
    assert outcome.status == "indexed" and outcome.chunks >= 10
    payloads = [p.payload for p in all_points(service)]
    tok = IngestService(service.settings, service.resources).chunk_tokenizer()
    assert all(len(tok.encode(pl["text"], add_special_tokens=False).ids) <= settings.chunk_tokens for pl in payloads)
    assert {pl["page"] for pl in payloads} == {1, 2, 3, 4, 5}
    assert report.as_dict()["truncated_chunks"] == report.truncated_chunks


def test_cli_modes_and_citations(indexed_library, tmp_path):
    settings = copy_index(indexed_library[0], tmp_path / "data")
    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1"}

    def search(*args):
        return subprocess.run([sys.executable, "-m", "search", *args], env=env, capture_output=True, text=True, timeout=300)

    for mode in ("semantic", "dense", "sparse", "hybrid"):
        proc = search("hotel receipts", "--mode", mode, "--json", "-k", "3")
        assert proc.returncode == 0, proc.stderr
        hits = json.loads(proc.stdout)["hits"]
        assert hits and all(h["mode"] == mode and h["citation"].startswith(h["path"]) for h in hits)
    proc = search("hotel receipts", "--mode", "hybrid", "-k", "20")
    assert proc.returncode == 0 and "travel.pdf" in proc.stdout and "p. 2" in proc.stdout
    bad = search("hotel receipts", "--mode", "fuzzy")
    assert bad.returncode == 2 and "mode: must be one of" in bad.stderr and "Traceback" not in bad.stderr


def test_a_search_that_awaits_its_encoding_finds_what_the_plain_call_finds(indexed):
    """The event loop's half (await encode_query, on Triton's asyncio client) and the store's half
    (search_documents(encoded=...)) give the plain call's hits and groups in every mode."""
    service = indexed

    async def encode_all() -> dict:
        try:
            return {(q, m): await service.encode_query(q, mode=m) for q in QUERIES for m in MODES}
        finally:
            await service.triton.aclose()

    encoded = asyncio.run(encode_all())
    for (query, mode), enc in encoded.items():
        plain = service.search_documents(query, top_k=4, mode=mode)
        assert enc.mode == service.document_mode(mode) and enc.asked == mode
        assert plain or mode == "sparse", (query, mode)  # the random model's sparse weights may share no token
        assert [h.as_dict() for h in service.search_documents(query, top_k=4, mode=mode, encoded=enc)] == [h.as_dict() for h in plain]
        grouped = service.search_document_groups(query, top_k=3, group_size=2, mode=mode, encoded=enc)
        assert [g.as_dict() for g in grouped] == [g.as_dict() for g in service.search_document_groups(query, top_k=3, group_size=2, mode=mode)]
    with pytest.raises(ValueError, match="another text"):
        service.search_documents("something else", mode="semantic", encoded=encoded[(QUERIES[0], "semantic")])
    with pytest.raises(BadRequest, match="query: must not be empty"):
        asyncio.run(awaited(service.encode_query("   ", mode="semantic")))


async def awaited(steps):
    """A service's steps (search/services/steps.py) awaited, for asyncio.run, which takes a coroutine."""
    return await steps


@pytest.mark.parametrize("mode", ["semantic", "hybrid", "dense", "sparse"])
def test_concurrent_searches_find_what_each_finds_alone(indexed, mode):
    """Concurrent queries share requests to their model (MiniLM's query deployment, or BGE-M3 with
    queries that need ColBERT vectors and queries that do not in one request), padded to the longest
    of them, from threads and from an event loop: every search finds the passages it finds alone,
    at the same scores."""
    service = indexed
    queries = ["reset password", "hotel receipts", "travel expenses within thirty days", "a", "VPN from home",
               "printer jam on the third floor", "Wie setze ich mein Passwort zurück?", "🔥"]
    modes = [mode] * len(queries) if mode == "semantic" else [[mode, "hybrid"][i % 2] for i in range(len(queries))]

    def found(hits) -> list[tuple]:
        return [(h.path, h.chunk, round(h.score, 4)) for h in hits]

    batcher = service.resources.batchers["minilm_query" if mode == "semantic" else "bge_m3"]
    alone = {q: found(service.search_documents(q, top_k=4, mode=m)) for q, m in zip(queries, modes)}
    assert batcher.requests == batcher.items == len(queries)  # one at a time: each went alone
    with ThreadPoolExecutor(len(queries)) as pool:
        threaded = dict(zip(queries, pool.map(lambda qm: found(service.search_documents(qm[0], top_k=4, mode=qm[1])),
                                              zip(queries, modes))))
    from_threads = (batcher.requests, batcher.items)

    async def encode_all() -> list:
        try:
            return await asyncio.gather(*(service.encode_query(q, mode=m) for q, m in zip(queries, modes)))
        finally:
            await service.triton.aclose()

    awaited = {q: found(service.search_documents(q, top_k=4, mode=m, encoded=enc))
               for q, m, enc in zip(queries, modes, asyncio.run(encode_all()))}
    for q in queries:
        for got in (threaded[q], awaited[q]):
            assert [h[:2] for h in got] == [h[:2] for h in alone[q]], q
            assert [h[2] for h in got] == pytest.approx([h[2] for h in alone[q]], abs=2e-4), q
    assert from_threads[1] == 2 * len(queries) and from_threads[0] < 2 * len(queries)
    assert batcher.items == 3 * len(queries) and batcher.requests - from_threads[0] < len(queries)


QUERIES = ("reset password", "Hotel receipts are uploaded within thirty days")
MODES = ("semantic", "dense", "sparse", "hybrid", "auto")


def test_a_long_documents_points_go_in_bounded_requests(settings, tmp_path, monkeypatch):
    """BGE-M3's ColBERT rows make big points (as float32 arrays until the store takes them): a long
    document's points go to the store in requests of at most WRITE_VALUES vector values, written as
    they are embedded (marked partial) and unit 0 last; the store then holds what an ingest that
    wrote the file at once holds (every point marked complete)."""
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "long.md").write_text("\n\n".join(f"Part {i}: " + " ".join(f"term{(i * 7 + k) % 97}" for k in range(150))
                                                for i in range(30)))
    whole = run(settings.model_copy(update={"data_dir": settings.data_dir.parent / "whole"}), [folder])
    assert whole.counts["indexed"] == 1 and not whole.failures
    requests = []
    upsert = EdgeStore.upsert  # the default store

    def recorded(store, collection, points):
        requests.append([(p.payload["chunk"], stages.values(p.vector), p.payload["partial"]) for p in points])
        return upsert(store, collection, points)

    limit = 1_200_000  # a few chunks' vectors (ColBERT: ~300 x 1,024 values each)
    monkeypatch.setattr(writer, "WRITE_VALUES", limit)
    monkeypatch.setattr(EdgeStore, "upsert", recorded)
    bounded = run(settings, [folder])
    assert bounded.counts["indexed"] == 1 and bounded.outcomes[0].chunks > 10
    assert len(requests) > 3 and all(sum(n for _, n, _ in r) <= limit or len(r) == 1 for r in requests)
    assert max(len(r) for r in requests) > 1 and any(n > 1024 * 100 for r in requests for _, n, _ in r)
    assert [c for r in requests for c, _, _ in r][-1] == 0
    # The first requests went while the file was being embedded: partial, and without unit 0. The
    # last other units go marked too, with one mark (one write), just before unit 0.
    last = requests[-2][0][2]
    streamed = [r for r in requests if r[0][2] not in (0, last)]
    assert len(streamed) >= 2 and all(c and partial > 0 for r in streamed for c, _, partial in r)
    assert requests[:len(streamed)] == streamed and last > max(r[0][2] for r in streamed)
    assert_same_points(stored(settings.model_copy(update={"data_dir": settings.data_dir.parent / "whole"})), stored(settings))
