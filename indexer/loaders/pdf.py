"""PDF: the text layer page by page, within the page and object budget."""

from __future__ import annotations

import io
import logging
from contextlib import contextmanager

from pypdf import PdfReader
from pypdf.errors import DependencyError

from indexer.loaders.base import (
    BadDocument,
    Budget,
    LoadedDocument,
    Page,
    _normalise,
    _one_line,
    _preview,
    _reason,
)
from indexer.loaders.scans import MAX_FRAME_PIXELS
from search.media.pages import PageError, scan_pages

MIN_TEXT_CHARS = 20  # a page with less text than this (none, or a few characters over a full-page image) is a scan


def _load_pdf(data: bytes, budget: Budget, scans: bool = False) -> LoadedDocument:
    """``scans``: a page without a text layer is rendered (Page.scan) for OCR instead of dropped."""
    if b"%PDF-" not in data[:1024]:
        raise BadDocument(f"not a PDF (wrong extension?): starts with {_preview(data)}")
    with _quiet_pypdf():
        reader, n_pages = _open_pdf(data, budget)
        pages, errors = [], []
        for i in range(n_pages):
            budget.check_time()  # a page can be slow, and there can be many: stop between them
            try:
                text = _normalise(reader.pages[i].extract_text())
            except Exception as exc:  # pypdf raises many kinds; one bad page should not lose the others
                errors.append(exc)
                continue
            if scans and len(text) < MIN_TEXT_CHARS:
                pages.append(Page(i + 1, "", scan=b""))  # rendered below, once the text layer is read
            elif text:
                pages.append(Page(i + 1, text))
        budget.check_time()
        title = _pdf_title(reader)
    if len(errors) == n_pages:
        raise BadDocument(f"broken PDF: {_reason(errors[0])}")
    if not pages:
        raise BadDocument("no text layer (a scanned PDF? serve an OCR model: `search models build`)")
    if any(p.scan is not None for p in pages):
        images = _render(data, [p.number for p in pages if p.scan is not None], budget)
        pages = [Page(p.number, p.text, images[p.number]) if p.scan is not None else p for p in pages]
    return LoadedDocument(title, pages)


def _render(data: bytes, numbers: list[int], budget: Budget) -> dict[int, bytes]:
    """Pages (1-based numbers) as PNG images for OCR (search.media.pages, as `search ocr` renders them)."""
    try:
        return {p.number: p.image for p in scan_pages(data, max_pixels=MAX_FRAME_PIXELS, count=budget.pages,
                                                       numbers=numbers, tick=budget.check_time)}
    except PageError as exc:
        raise BadDocument(str(exc)) from None


def _open_pdf(data: bytes, budget: Budget) -> tuple[PdfReader, int]:
    try:
        reader = PdfReader(io.BytesIO(data))
        # Many PDFs are encrypted only against editing, with an empty password for reading.
        if reader.is_encrypted and not reader.decrypt(""):
            raise BadDocument("encrypted PDF: needs a password")
        budget.count(sum(len(ids) for ids in reader.xref.values()) + len(reader.xref_objStm), "PDF objects")
        budget.pages(_declared_pages(reader))  # before walking a page tree that may be huge
        n_pages = len(reader.pages)
    except BadDocument:
        raise
    except DependencyError as exc:  # AES without the 'cryptography' package
        raise BadDocument(f"encrypted PDF: {_reason(exc)}") from exc
    except Exception as exc:
        # Without its end marker pypdf cannot even start repairing: say what most likely happened.
        reason = _reason(exc) if b"%%EOF" in data else "truncated (no %%EOF marker)"
        raise BadDocument(f"broken PDF: {reason}") from exc
    if n_pages == 0:
        raise BadDocument("broken PDF: no pages")
    budget.pages(n_pages)  # the declared count can lie
    return reader, n_pages


def _declared_pages(reader: PdfReader) -> int:
    try:
        return int(reader.trailer["/Root"]["/Pages"]["/Count"])
    except Exception:  # missing or odd: the page tree walk counts instead
        return 0


def _pdf_title(reader: PdfReader) -> str | None:
    try:
        return _one_line(reader.metadata.title) if reader.metadata else None
    except Exception:  # a broken info dictionary costs the title, not the document
        return None


@contextmanager
def _quiet_pypdf():
    """pypdf logs a warning for every repair it makes to a broken file; the caller gets one reason instead."""
    log = logging.getLogger("pypdf")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
