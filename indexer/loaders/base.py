"""What every loader shares: the error, the result types, the parse budget, the limits and the text helpers."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass


class BadDocument(Exception):
    """A file that cannot be indexed; str(exc) is a short human reason."""


class Cancelled(Exception):  # noqa: N818  (a stop asked for, not an error)
    """The run was asked to stop (a cancelled job, a server shutting down) while a file was read:
    the file is left for the next run, not reported."""


DOCUMENT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"})
MAX_CHARS = 5_000_000
# What parsing one file may cost (the defaults of the SEARCH_MAX_PARSE_* / SEARCH_MAX_PDF_PAGES
# settings; see search/config.py for why these values).
MAX_PARSE_SECONDS = 30.0  # CPU time of the loading thread
MAX_PARSE_ELEMENTS = 500_000  # DOCX XML elements, HTML elements, PDF objects
MAX_PDF_PAGES = 2_000
# What reading the text in one file's images (OCR, in Triton) may take, wall time: the defaults of
# SEARCH_MAX_OCR_SECONDS and SEARCH_MAX_OCR_PAGE_SECONDS (see search/config.py).
MAX_OCR_SECONDS = 600.0
MAX_OCR_PAGE_SECONDS = 60.0
OCR_PACE_PAGES = 3  # pages read before their pace may tell that a file's scans cannot fit in the budget
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
    goes on spending the same one on the file's split into chunks, and on reading its scans (OCR).
    ``stop``: asked with the clock, so a cancelled run leaves a long file within seconds (Cancelled)."""

    def __init__(self, max_seconds: float = MAX_PARSE_SECONDS, max_elements: int = MAX_PARSE_ELEMENTS,
                 max_pages: int = MAX_PDF_PAGES, max_ocr_seconds: float = MAX_OCR_SECONDS,
                 max_ocr_page_seconds: float = MAX_OCR_PAGE_SECONDS, stop: Callable[[], bool] | None = None) -> None:
        self.max_seconds, self.max_elements, self.max_pages = max_seconds, max_elements, max_pages
        self.max_ocr_seconds, self.max_ocr_page_seconds, self.stop = max_ocr_seconds, max_ocr_page_seconds, stop
        # CPU time of this thread: other files' embedding in the pool threads does not count.
        self.deadline = time.thread_time() + max_seconds
        self.elements = 0
        self.ocr_seconds = 0.0  # wall time spent reading this file's scans (Triton's, not this thread's CPU)
        self.ocr_pages = 0
        self._ticks = 0

    # A file read on one Ray worker may have its scans read and be split on another (indexer/ray_workers.py):
    # the budget travels as the CPU time it has left, counted again on the thread that takes it; a stop
    # (the local run's) does not travel.
    def __getstate__(self) -> dict:
        return {**vars(self), "deadline": self.deadline - time.thread_time(), "stop": None}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state, deadline=time.thread_time() + state["deadline"])

    def tick(self) -> None:
        self._ticks += 1
        if not self._ticks & 31:  # reading the clock costs about a microsecond
            self.check_time()

    def check_time(self) -> None:
        if self.stop is not None and self.stop():
            raise Cancelled
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

    def ocr(self, seconds: float, scans: int) -> None:
        """One more of the file's ``scans`` pages read in ``seconds``. Past the file's OCR budget, or
        once the pace of its first pages says the rest cannot fit in it (a 2,000-page scan is refused
        after a few pages, not after the whole budget), the file is too long to read."""
        self.ocr_seconds += seconds
        self.ocr_pages += 1
        projected = self.ocr_seconds * scans / self.ocr_pages if self.ocr_pages >= OCR_PACE_PAGES else 0.0
        if max(self.ocr_seconds, projected) > self.max_ocr_seconds:
            raise self.too_long(scans)
        self.check_time()

    def too_long(self, scans: int, page: int | None = None) -> BadDocument:
        if page is not None:
            return BadDocument(f"too long to read: {_pages(scans)}, page {page} over {self.max_ocr_page_seconds:g} s "
                               "(limit SEARCH_MAX_OCR_PAGE_SECONDS)")
        return BadDocument(f"too long to read: {_pages(scans)}, budget {self.max_ocr_seconds:g} s "
                           f"(read {self.ocr_pages:,} in {self.ocr_seconds:.1f} s; limit SEARCH_MAX_OCR_SECONDS)")


def _pages(n: int) -> str:
    return f"{n:,} page" + ("" if n == 1 else "s")


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
