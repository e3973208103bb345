"""Ingest of hostile and odd files next to good ones, through the real Triton and store: bombs are
"too complex" within bounded time, every bad file gets a one-line reason, every good file is found."""

from __future__ import annotations

import time
from pathlib import Path

from attack_corpus import GIANT_WORD_CHARS, docx_with_empty_paragraphs, html_with_elements, pdf_with_pages, write_corpus
from doc_fixtures import make_docx
from ingest_helper import ingest

from search.services import SearchService
from search.store import DOCUMENTS


def payloads(svc: SearchService, name: str) -> list[dict]:
    res, _ = svc.store.scroll(DOCUMENTS.name, limit=10_000, with_payload=True)
    return sorted((p.payload for p in res if Path(p.payload["path"]).name == name), key=lambda pl: pl["chunk"])


def found(svc: SearchService, query: str, name: str) -> bool:
    return name in [Path(h.path).name for h in svc.search_documents(query, top_k=3)]


def test_bombs_are_too_complex_and_do_not_hold_up_the_rest(settings, tmp_path):
    folder = tmp_path / "inbox"
    folder.mkdir()
    (folder / "a-bomb.docx").write_bytes(docx_with_empty_paragraphs(2_000_000))  # ~50 KB zipped
    (folder / "b-bomb.html").write_bytes(html_with_elements(1_000_000))
    (folder / "c-bomb.pdf").write_bytes(pdf_with_pages(5_000))
    # Under the element limit but slow to parse: the CPU-time budget stops it.
    (folder / "d-slow.html").write_bytes(html_with_elements(300_000))
    (folder / "e-good.docx").write_bytes(make_docx([("h1", "Lost property"), ("p", "Lost umbrellas and keys are "
                                                    "handed in at the security desk by the main entrance.")]))
    (folder / "f-good.md").write_text("# Plants\n\nThe office plants are watered by the facilities team on Mondays.\n")
    settings.max_parse_seconds = 1.0
    svc = SearchService(settings)
    try:
        started = time.perf_counter()
        report = ingest(svc, [folder])
        elapsed = time.perf_counter() - started
        reasons = {Path(f.path).name: f.reason for f in report.failures}
        assert reasons["a-bomb.docx"].startswith("too complex: more than 500,000 XML elements")
        assert reasons["b-bomb.html"].startswith("too complex: more than 500,000 HTML elements")
        assert reasons["c-bomb.pdf"].startswith("too complex: 5,000 pages > 2,000")
        assert reasons["d-slow.html"] == "too complex: parsing took over 1 s of CPU time (limit SEARCH_MAX_PARSE_SECONDS)"
        assert all("\n" not in r for r in reasons.values())
        assert report.counts["indexed"] == 2 and len(reasons) == 4
        # Before: the DOCX alone ran for hours; now the whole folder, embedding included, is quick.
        assert elapsed < 60, f"ingest took {elapsed:.0f}s"
        assert found(svc, "where do I find a lost umbrella", "e-good.docx")
        assert found(svc, "who waters the plants", "f-good.md")
    finally:
        svc.close()


def test_attack_corpus(service, tmp_path):
    corpus = write_corpus(tmp_path / "attack")
    outcomes: list = []
    started = time.perf_counter()
    report = ingest(service, [tmp_path / "attack"], on_file=outcomes.append)  # a traceback fails the test
    elapsed = time.perf_counter() - started
    by_name = {Path(o.path).name: o for o in outcomes}
    assert set(by_name) == set(corpus.good) | set(corpus.bad)  # every file has an outcome, none twice
    assert len(outcomes) == len(by_name)

    failed = {Path(f.path).name: f.reason for f in report.failures}
    assert set(failed) == set(corpus.bad), {n: failed.get(n) for n in set(failed) ^ set(corpus.bad)}
    for name, reason in failed.items():
        assert reason.startswith(corpus.bad[name]), (name, reason)
        assert "\n" not in reason and len(reason) < 200 and "Traceback" not in reason
    assert report.counts["indexed"] == len(corpus.good)
    assert elapsed < 180, f"ingest took {elapsed:.0f}s"

    missing = [(name, q) for name, q in corpus.good.items() if not found(service, q, name)]
    assert not missing, missing

    # What the odd files became: detected encodings in the payload, first-line titles, bounded chunks.
    assert {pl["encoding"] for pl in payloads(service, "espresso-cp1252.txt")} == {"cp1252"}
    assert {pl["encoding"] for pl in payloads(service, "garage-utf16le.txt")} == {"utf-16-le"}
    assert {pl["encoding"] for pl in payloads(service, "badges-utf16be.md")} == {"utf-16-be"}
    assert {pl["encoding"] for pl in payloads(service, "bicycles.md")} == {"utf-8"}
    assert {pl["encoding"] for pl in payloads(service, "canteen.docx")} == {None}
    assert payloads(service, "garage-utf16le.txt")[0]["title"] == "Parking garage hours"
    assert payloads(service, "espresso-cp1252.txt")[0]["title"] == "Espresso machine – the café’s “naïve” barista guide"
    telescope = payloads(service, "telescope.txt")
    assert telescope[0]["title"] == "Telescope maintenance log"
    assert max(len(pl["text"]) for pl in telescope) <= 2000
    assert sum(len(pl["text"]) for pl in telescope if set(pl["text"]) == {"a"}) == GIANT_WORD_CHARS  # in pieces
