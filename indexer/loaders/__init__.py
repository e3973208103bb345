"""Read a document as text, or say in one line why it cannot be indexed.

One module per format (text, html, pdf, docx), each built on base; this module holds the
suffix -> loader table and load_document."""

from __future__ import annotations

from indexer.loaders.base import (
    DOCUMENT_SUFFIXES,
    MAX_CHARS,
    MAX_PARSE_ELEMENTS,
    MAX_PARSE_SECONDS,
    MAX_PDF_PAGES,
    MAX_TITLE_CHARS,
    BadDocument,
    Budget,
    Cancelled,
    LoadedDocument,
    Page,
    _bounded,
)
from indexer.loaders.docx import MAX_DOCX_XML_BYTES, _load_docx
from indexer.loaders.html import _load_html
from indexer.loaders.pdf import _load_pdf
from indexer.loaders.scans import _load_scan
from indexer.loaders.text import TEXT_SUFFIXES, _load_markdown, _load_plain, decode_text, load_text, read_bytes
from search.media.photos import IMAGE_SUFFIXES

SCAN_SUFFIXES = IMAGE_SUFFIXES  # documents too when a model reads the text in images

__all__ = [
    "DOCUMENT_SUFFIXES", "MAX_CHARS", "MAX_DOCX_XML_BYTES", "MAX_PARSE_ELEMENTS", "MAX_PARSE_SECONDS", "MAX_PDF_PAGES",
    "MAX_TITLE_CHARS", "SCAN_SUFFIXES", "TEXT_SUFFIXES", "BadDocument", "Budget", "Cancelled", "LoadedDocument", "Page",
    "decode_text", "load_document",
    "load_text", "read_bytes",
]


def load_document(suffix: str, data: bytes, *, max_chars: int = MAX_CHARS, max_seconds: float = MAX_PARSE_SECONDS,
                  max_elements: int = MAX_PARSE_ELEMENTS, max_pages: int = MAX_PDF_PAGES,
                  budget: Budget | None = None, scans: bool = False) -> LoadedDocument:
    """Title and text of a document; BadDocument (one short line) for anything that cannot be
    indexed, "too complex: ..." for a file that would cost more than the limits to parse.
    ``budget``: one the caller goes on spending after the load (instead of the max_* limits).
    ``scans``: a model can read text in images, so PDF pages without a text layer and image files
    (SCAN_SUFFIXES) come back as pages with a scan (Page.scan) for it to read."""
    suffix = suffix.lower()
    loader = _LOADERS.get(suffix) or (_load_scan if scans and suffix in SCAN_SUFFIXES else None)
    if loader is None:
        raise BadDocument(f"unsupported file type '{suffix}'")
    if not data:
        raise BadDocument("empty file")
    budget = budget or Budget(max_seconds, max_elements, max_pages)
    doc = _load_pdf(data, budget, scans) if loader is _load_pdf else loader(data, budget)
    n_chars = sum(len(p.text) for p in doc.pages)
    if n_chars > max_chars:
        raise BadDocument(f"too much text: {n_chars:,} characters > {max_chars:,} limit (split the file)")
    # A title is stored with every chunk: a megabyte-long first line or heading must not be.
    return LoadedDocument(_bounded(doc.title), doc.pages, doc.encoding)



_LOADERS = {".txt": _load_plain, ".md": _load_markdown, ".markdown": _load_markdown, ".html": _load_html,
            ".htm": _load_html, ".pdf": _load_pdf, ".docx": _load_docx}
