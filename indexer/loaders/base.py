"""What every loader shares: the error, the result types, the parse budget, the limits and the text helpers."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass


class BadDocument(Exception):
    """A file that cannot be indexed; str(exc) is a short human reason."""


DOCUMENT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"})
MAX_CHARS = 5_000_000
# What parsing one file may cost (the defaults of the SEARCH_MAX_PARSE_* / SEARCH_MAX_PDF_PAGES
# settings; see search/config.py for why these values).
MAX_PARSE_SECONDS = 30.0  # CPU time of the loading thread
MAX_PARSE_ELEMENTS = 500_000  # DOCX XML elements, HTML elements, PDF objects
MAX_PDF_PAGES = 2_000
MAX_TITLE_CHARS = 120


@dataclass(frozen=True)
class Page:
    number: int | None  # 1-based for PDFs; None for formats without pages
    text: str
    scan: bytes | None = None  # a page without a text layer, as an encoded image for OCR to read (text is "")


@dataclass(frozen=True)
class LoadedDocument:
    title: str | None
    pages: list[Page]  # never empty; every page has text, or a scan to read
    encoding: str | None = None  # of text formats (.txt, .md, .html): the one it was read with


class Budget:
    """What one file may still cost. A thread cannot be stopped from outside, so the loaders
    call this inside their loops and give up themselves once a limit is passed. Documents.units
    goes on spending the same one on the file's split into chunks."""

    def __init__(self, max_seconds: float = MAX_PARSE_SECONDS, max_elements: int = MAX_PARSE_ELEMENTS,
                 max_pages: int = MAX_PDF_PAGES) -> None:
        self.max_seconds, self.max_elements, self.max_pages = max_seconds, max_elements, max_pages
        # CPU time of this thread: other files' embedding in the pool threads does not count.
        self.deadline = time.thread_time() + max_seconds
        self.elements = 0
        self._ticks = 0

    def tick(self) -> None:
        self._ticks += 1
        if not self._ticks & 31:  # reading the clock costs about a microsecond
            self.check_time()

    def check_time(self) -> None:
        if time.thread_time() > self.deadline:
            raise BadDocument(f"too complex: parsing took over {self.max_seconds:g} s of CPU time "
                              "(limit SEARCH_MAX_PARSE_SECONDS)")

    def count(self, n: int, what: str) -> None:
        self.elements += n
        if self.elements > self.max_elements:
            raise BadDocument(f"too complex: more than {self.max_elements:,} {what} (limit SEARCH_MAX_PARSE_ELEMENTS)")
        self.tick()

    def pages(self, n: int) -> None:
        if n > self.max_pages:
            raise BadDocument(f"too complex: {n:,} pages > {self.max_pages:,} (limit SEARCH_MAX_PDF_PAGES)")


def _first_line(text: str) -> str | None:
    m = _NON_BLANK_LINE.search(text)
    return _one_line(_CONTROL_CHARS.sub("", m.group(0)[:4 * MAX_TITLE_CHARS])) if m else None


def _bounded(title: str | None) -> str | None:
    """At most MAX_TITLE_CHARS, cut at a word when one ends in the second half."""
    if title is None or len(title) <= MAX_TITLE_CHARS:
        return title
    cut = title[:MAX_TITLE_CHARS - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_TITLE_CHARS // 2 else cut).rstrip() + "…"


_NON_BLANK_LINE = re.compile(r"^.*\S.*$", re.M)
_FENCED_CODE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.M | re.S)
_H1 = re.compile(r"^# +(.*\S)", re.M)
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def _first_h1(text: str) -> str | None:
    m = _H1.search(text)
    return m.group(1).strip() if m else None


def _normalise(text: str) -> str:
    """One space between words, no blank runs: lines kept, paragraphs split by one blank line."""
    if not text:
        return text
    text = _CONTROL_CHARS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def _one_line(text: str | None) -> str | None:
    text = " ".join(str(text or "").split())
    return text or None


def _reason(exc: Exception) -> str:
    """An exception as a short line: its message, never a traceback or repr."""
    msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    line = msg.strip().split("\n", 1)[0].strip() or type(exc).__name__
    return line if len(line) <= 150 else line[:147] + "..."


def _preview(data: bytes) -> str:
    return repr(data[:12])
