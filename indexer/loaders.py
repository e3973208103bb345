"""Read a document as text, or say in one line why it cannot be indexed."""

from __future__ import annotations

import codecs
import io
import logging
import re
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import charset_normalizer
import docx
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import qn
from docx.styles import BabelFish
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf import PdfReader
from pypdf.errors import DependencyError


class BadDocument(Exception):
    """A file that cannot be indexed; str(exc) is a short human reason."""


TEXT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md"})

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_UTF32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)


def load_text(path: Path, max_bytes: int = 20_000_000) -> str:
    return decode_text(read_bytes(path, max_bytes))


def read_bytes(path: Path, max_bytes: int = 20_000_000) -> bytes:
    """The file's bytes; its size is checked before anything is read."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadDocument(f"too large: {size / 1e6:.1f} MB > {max_bytes / 1e6:.1f} MB limit")
        return path.read_bytes()
    except OSError as exc:
        raise BadDocument(f"unreadable: {exc.strerror or exc}") from exc


def decode_text(data: bytes) -> str:
    return _decode(data)[0]


def _decode(data: bytes, *, detect: bool = True) -> tuple[str, str]:
    """Text and the name of its encoding: a BOM, else UTF-8, else what charset-normalizer finds
    (``detect``); binary content is refused."""
    if not data:
        raise BadDocument("empty file")
    if data.startswith(_UTF32_BOMS):  # before UTF-16: the UTF-32 LE BOM begins with UTF-16 LE's
        text, encoding = _strict(data, "utf-32"), "utf-32"
    elif data.startswith(_UTF16_BOMS):
        text, encoding = _strict(data, "utf-16"), "utf-16"
    elif detect and b"\x00" in data[:8192]:  # valid UTF-8, but means UTF-16/32 without a BOM, or binary
        text, encoding = _detected(data)
    else:
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        try:
            # Strip the BOM by hand: utf-8-sig reports error offsets relative to the stripped bytes.
            text, encoding = data[bom:].decode("utf-8"), "utf-8"
        except UnicodeDecodeError as exc:
            pos = bom + exc.start
            if bom or not detect:
                raise BadDocument(f"not valid UTF-8 (byte 0x{data[pos]:02x} at offset {pos})") from exc
            text, encoding = _detected(data, f"byte 0x{data[pos]:02x} at offset {pos}")
    if "\x00" in text[:8192]:
        raise BadDocument("binary content, not text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise BadDocument("empty file")
    return text, encoding


def _strict(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise BadDocument(f"not valid {encoding.upper()} ({exc.reason} at offset {exc.start})") from exc


def _detected(data: bytes, not_utf8: str = "") -> tuple[str, str]:
    # No fallback: with none, no match means binary (charset_normalizer.is_binary's rule); a
    # lower mess threshold than the default 0.2 keeps noise from passing as some code page.
    matches = charset_normalizer.from_bytes(data, threshold=0.1, enable_fallback=False)
    best = matches.best()
    if best is None:
        if not not_utf8 or _CONTROL_BYTES.search(data[:8192]):
            raise BadDocument("binary content, not text")
        raise BadDocument(f"unknown encoding: not UTF-8 ({not_utf8}) nor any other recognised")
    encoding = best.encoding
    # Short Western text fits several code pages equally well and the detector then picks one by
    # name (cp1250 reads "naïve" as "naďve"): prefer windows-1252 when it is as good, as browsers do.
    for m in matches:
        if "cp1252" in m.could_be_from_charset and m.chaos <= best.chaos and m.coherence >= best.coherence:
            encoding = "cp1252"
            break
    try:
        return data.decode(encoding), codecs.lookup(encoding).name
    except (UnicodeDecodeError, LookupError) as exc:
        raise BadDocument(f"unknown encoding: not UTF-8 nor {encoding}") from exc


_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")


# --- Documents: any supported file -> title + pages of normalised text ---

DOCUMENT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"})
MAX_CHARS = 5_000_000
# A DOCX is a zip: refuse one whose XML would inflate past this before parsing it.
MAX_DOCX_XML_BYTES = 500_000_000
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


@dataclass(frozen=True)
class LoadedDocument:
    title: str | None
    pages: list[Page]  # never empty; every page has text
    encoding: str | None = None  # of text formats (.txt, .md, .html): the one it was read with


class _Budget:
    """What one file may still cost. A thread cannot be stopped from outside, so the loaders
    call this inside their loops and give up themselves once a limit is passed."""

    def __init__(self, max_seconds: float, max_elements: int, max_pages: int) -> None:
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


def load_document(suffix: str, data: bytes, *, max_chars: int = MAX_CHARS, max_seconds: float = MAX_PARSE_SECONDS,
                  max_elements: int = MAX_PARSE_ELEMENTS, max_pages: int = MAX_PDF_PAGES) -> LoadedDocument:
    """Title and text of a document; BadDocument (one short line) for anything that cannot be
    indexed, "too complex: ..." for a file that would cost more than the limits to parse."""
    loader = _LOADERS.get(suffix.lower())
    if loader is None:
        raise BadDocument(f"unsupported file type '{suffix}'")
    if not data:
        raise BadDocument("empty file")
    budget = _Budget(max_seconds, max_elements, max_pages)
    doc = loader(data, budget)
    n_chars = sum(len(p.text) for p in doc.pages)
    if n_chars > max_chars:
        raise BadDocument(f"too much text: {n_chars:,} characters > {max_chars:,} limit (split the file)")
    # A title is stored with every chunk: a megabyte-long first line or heading must not be.
    return LoadedDocument(_bounded(doc.title), doc.pages, doc.encoding)


def _load_plain(data: bytes, budget: _Budget) -> LoadedDocument:
    text, encoding = _decode(data)
    return LoadedDocument(_first_line(text), [Page(None, text)], encoding)


def _load_markdown(data: bytes, budget: _Budget) -> LoadedDocument:
    text, encoding = _decode(data)
    # A '# comment' inside a fenced code block is not a heading.
    return LoadedDocument(_first_h1(_FENCED_CODE.sub("", text)), [Page(None, text)], encoding)


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


# --- HTML ---

# The WHATWG encoding standard: these labels mean windows-1252, and a meta tag readable as ASCII
# cannot really be UTF-16.
_CHARSET_ALIASES = {"iso-8859-1": "windows-1252", "latin1": "windows-1252", "latin-1": "windows-1252",
                    "us-ascii": "windows-1252", "ascii": "windows-1252",
                    "utf-16": "utf-8", "utf-16le": "utf-8", "utf-16be": "utf-8"}
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([^\s"'/>;]+)""", re.I)
_HIDDEN_TAGS = ("script", "style", "noscript", "template", "head", "title", "svg", "iframe", "object")
_DISPLAY_NONE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAGS = frozenset("""address article aside blockquote body caption dd details dialog div dl dt fieldset
    figcaption figure footer form header hgroup hr html legend li main nav ol p section summary table tbody
    tfoot thead ul""".split())


def _load_html(data: bytes, budget: _Budget) -> LoadedDocument:
    markup, encoding = _decode_html(data)
    # Every start tag has a '<' not followed by '/': counted at C speed before the slow part
    # (BeautifulSoup builds ~30k elements a second).
    budget.count(markup.count("<") - markup.count("</"), "HTML elements")
    soup = _BudgetedSoup(markup, budget)
    title = _one_line(soup.title.get_text()) if soup.title else None
    for tag in soup.find_all(lambda t: budget.tick() or _is_hidden(t)):
        if not tag.decomposed:  # already gone with a hidden ancestor
            tag.decompose()
    text = _normalise(_HtmlText(budget).render(soup))
    if not text:
        raise BadDocument("no visible text")
    return LoadedDocument(title or _first_h1(text), [Page(None, text)], encoding)


class _BudgetedSoup(BeautifulSoup):
    """BeautifulSoup with html.parser, checking the deadline as the parser hands it tags and text."""

    def __init__(self, markup: str, budget: _Budget) -> None:
        self.budget = budget
        super().__init__(markup, "html.parser")

    def handle_starttag(self, *args, **kwargs):
        self.budget.tick()
        return super().handle_starttag(*args, **kwargs)

    def handle_data(self, *args, **kwargs):
        self.budget.tick()
        return super().handle_data(*args, **kwargs)


def _decode_html(data: bytes) -> tuple[str, str]:
    """BOM, else the <meta> charset in the first 1024 bytes, else UTF-8, else detected."""
    m = None if data.startswith((codecs.BOM_UTF8, *_UTF16_BOMS)) else _META_CHARSET.search(data[:1024])
    if m is None:
        return _decode(data)
    label = m.group(1).decode("ascii", "replace").lower()
    charset = _CHARSET_ALIASES.get(label, label)
    try:
        if codecs.lookup(charset).name == "utf-8":
            return _decode(data, detect=False)  # declared: invalid bytes are an error, not a hint
        text = data.decode(charset)
    except UnicodeDecodeError as exc:
        raise BadDocument(f"not valid {charset} (byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc
    except (LookupError, UnicodeError):  # no such codec, or not a text one (base64, "undefined")
        raise BadDocument(f"unknown charset '{label[:40]}'") from None
    return text.replace("\r\n", "\n").replace("\r", "\n"), codecs.lookup(charset).name


def _is_hidden(tag: Tag) -> bool:
    return (tag.name in _HIDDEN_TAGS or tag.has_attr("hidden")
            or str(tag.get("aria-hidden", "")).lower() == "true"
            or bool(_DISPLAY_NONE.search(str(tag.get("style", "")))))


class _HtmlText:
    """Visible text of a parsed page: headings as '#' lines, blocks as paragraphs, list items and
    table rows as lines of one paragraph per list or table. Walks with a stack, not recursion,
    so deep nesting cannot overflow."""

    def __init__(self, budget: _Budget) -> None:
        self.budget = budget
        self.parts: list[tuple[int | None, str]] = []  # (list or table the line belongs to, text)
        self.inline: list[str] = []
        self.lists: list[int] = []  # the lists of the open list items, outermost first
        self.prefix = ""  # "- " waiting for a list item's first text

    def render(self, soup: BeautifulSoup) -> str:
        stack: list = [soup]
        while stack:
            self.budget.tick()
            node = stack.pop()
            if isinstance(node, NavigableString):
                if not isinstance(node, PreformattedString):  # comments, doctype, CDATA
                    self.inline.append(str(node).replace("\n", " "))  # only <br> breaks a line
            elif not isinstance(node, Tag):  # a block's closing action
                node()
            elif node.name in _HEADINGS:
                self.flush()
                heading = " ".join(node.get_text(" ").split())
                self.add(None, heading and "#" * _HEADINGS[node.name] + " " + heading)
            elif node.name == "pre":
                self.flush()
                self.add(None, node.get_text())
            elif node.name == "tr":
                self.flush()
                cells = (" ".join(c.get_text(" ").split()) for c in node.find_all(["td", "th"], recursive=False))
                self.add(id(node.find_parent("table") or node.parent), " | ".join(c for c in cells if c))
            elif node.name == "br":
                self.inline.append("\n")
            else:
                if node.name == "li":
                    self.flush()
                    self.lists.append(id(node.parent))
                    self.prefix = "- "
                    stack.append(self.end_item)
                elif node.name in _BLOCK_TAGS:
                    self.flush()
                    stack.append(self.flush)
                stack.extend(reversed(node.contents))
        self.flush()
        out: list[str] = []
        for i, (group, text) in enumerate(self.parts):
            if i:
                out.append("\n" if group is not None and group == self.parts[i - 1][0] else "\n\n")
            out.append(text)
        return "".join(out)

    def flush(self) -> None:
        lines = (" ".join(line.split()) for line in "".join(self.inline).split("\n"))
        text = "\n".join(line for line in lines if line)
        self.inline = []
        if text:
            self.add(self.lists[0] if self.lists else None, self.prefix + text)
            self.prefix = ""

    def add(self, group: int | None, text: str) -> None:
        if text.strip():
            self.parts.append((group, text))

    def end_item(self) -> None:
        self.flush()
        self.lists.pop()
        self.prefix = ""


# --- PDF ---

def _load_pdf(data: bytes, budget: _Budget) -> LoadedDocument:
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
            if text:
                pages.append(Page(i + 1, text))
        budget.check_time()
        title = _pdf_title(reader)
    if len(errors) == n_pages:
        raise BadDocument(f"broken PDF: {_reason(errors[0])}")
    if not pages:
        raise BadDocument("no text layer (a scanned PDF? run OCR first)")
    return LoadedDocument(title, pages)


def _open_pdf(data: bytes, budget: _Budget) -> tuple[PdfReader, int]:
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


# --- DOCX ---

_HEADING_STYLE = re.compile(r"heading ([1-9])$", re.I)
_RUN_TAGS = frozenset({qn("w:r"), qn("w:hyperlink")})
_P_TAG = qn("w:p")


def _load_docx(data: bytes, budget: _Budget) -> LoadedDocument:
    if not data.startswith(b"PK"):
        raise BadDocument(f"not a DOCX (wrong extension?): starts with {_preview(data)}")
    try:
        _check_unpacked(data, budget)
        doc = docx.Document(io.BytesIO(data))
        levels, default = _docx_heading_levels(doc)
        blocks = []
        for block in doc.iter_inner_content():
            budget.tick()
            if isinstance(block, Table):
                blocks.append(_docx_table(block, budget))
            else:
                # The pStyle id straight from the XML: paragraph.style searches every style, each time.
                style_id = block._p.style
                blocks.append(_docx_paragraph(block, levels[style_id] if style_id in levels else default))
        title = _one_line(doc.core_properties.title)
    except BadDocument:
        raise
    except Exception as exc:
        raise BadDocument(f"broken DOCX: {_reason(exc)}") from exc
    text = "\n\n".join(b for b in blocks if b)
    if not text:
        raise BadDocument("no text")
    return LoadedDocument(title or _first_h1(text), [Page(None, text)])


def _check_unpacked(data: bytes, budget: _Budget) -> None:
    """Refuse a DOCX that would inflate too far or hold too many XML elements, before parsing
    it: a few KB of zip can hold millions of empty paragraphs. Every part counts, whatever its
    name (python-docx parses parts by content type); images add a stray '<' per 256 bytes."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        parts = z.infolist()
        # zipfile stops at the declared size (a bigger stream fails its CRC check): trust it.
        size = sum(i.file_size for i in parts)
        if size > MAX_DOCX_XML_BYTES:
            raise BadDocument(f"too large unpacked: {size / 1e6:.0f} MB > {MAX_DOCX_XML_BYTES / 1e6:.0f} MB limit")
        for info in parts:
            with z.open(info) as f:
                last = b""
                while chunk := f.read(1 << 20):
                    # Start tags: every '<' but those of end tags (the '/' may open the next chunk).
                    budget.count(chunk.count(b"<") - (last + chunk).count(b"</"), "XML elements")
                    budget.check_time()
                    last = chunk[-1:]


def _docx_heading_levels(doc) -> tuple[dict[str, int | None], int | None]:
    """Heading level of every paragraph style id, and of the default paragraph style (what a
    paragraph without a known paragraph style has), read once from the styles part."""
    levels: dict[str, int | None] = {}
    default = None
    for style in doc.styles.element.style_lst:
        if style.type != WD_STYLE_TYPE.PARAGRAPH:
            continue
        level = _heading_level(BabelFish.internal2ui(style.name_val or ""))
        levels.setdefault(style.styleId, level)  # the first of duplicate ids wins, as in python-docx
        if style.default:
            default = level  # the last default wins (the spec; python-docx too)
    return levels, default


def _heading_level(style_name: str) -> int | None:
    if style_name == "Title":
        return 1
    m = _HEADING_STYLE.match(style_name)
    return min(int(m.group(1)), 6) if m else None  # markdown stops at six levels


def _run_text(p) -> str:
    """What python-docx's paragraph.text joins, without its XPath (compiled anew each call: ~40 us)."""
    return "".join(e.text for e in p if e.tag in _RUN_TAGS)


def _docx_paragraph(paragraph: Paragraph, level: int | None) -> str:
    text = _normalise(_run_text(paragraph._p))
    if level and text:
        return "#" * level + " " + " ".join(text.split())
    return text


def _docx_table(table: Table, budget: _Budget) -> str:
    """Rows as lines of " | "-joined cells, read linearly: python-docx's row.cells repeats a
    merged cell once per grid column it spans (a gridSpan of 10^9 loops 10^9 times) and walks up
    through every row of a vertical merge for each of its cells."""
    rows = []
    above: dict[int, str] = {}  # grid column -> text of the last cell starting there, for vertical merges
    for tr in table._tbl.tr_lst:
        cells, col = [], tr.grid_before
        for tc in tr.tc_lst:
            budget.tick()
            if tc.vMerge == "continue":  # the merged cell's text again, as python-docx gives it
                text = above.get(col, "")
            else:
                text = above[col] = " ".join("\n".join(_run_text(p) for p in tc if p.tag == _P_TAG).split())
            col += tc.grid_span
            if text:
                cells.append(text)
        if cells:
            rows.append(" | ".join(cells))
    return _normalise("\n".join(rows))


_LOADERS = {".txt": _load_plain, ".md": _load_markdown, ".markdown": _load_markdown, ".html": _load_html,
            ".htm": _load_html, ".pdf": _load_pdf, ".docx": _load_docx}
