"""Read a document as text, or say in one line why it cannot be indexed."""

from __future__ import annotations

import codecs
import io
import logging
import re
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docx
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf import PdfReader
from pypdf.errors import DependencyError


class BadDocument(Exception):
    """A file that cannot be indexed; str(exc) is a short human reason."""


TEXT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md"})

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


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
    if not data:
        raise BadDocument("empty file")
    if data.startswith(_UTF16_BOMS):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise BadDocument(f"not valid UTF-16 ({exc.reason} at offset {exc.start})") from exc
        if "\x00" in text[:8192]:  # e.g. UTF-32, whose BOM starts like UTF-16 LE's
            raise BadDocument("binary content, not text")
    else:
        if b"\x00" in data[:8192]:
            raise BadDocument("binary content, not text")
        # Strip the BOM by hand: utf-8-sig reports error offsets relative to the stripped bytes.
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        try:
            text = data[bom:].decode("utf-8")
        except UnicodeDecodeError as exc:
            pos = bom + exc.start
            raise BadDocument(f"not valid UTF-8 (byte 0x{data[pos]:02x} at offset {pos})") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise BadDocument("empty file")
    return text


# --- Documents: any supported file -> title + pages of normalised text ---

DOCUMENT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"})
MAX_CHARS = 5_000_000
# A DOCX is a zip: refuse one whose XML would inflate past this before parsing it.
MAX_DOCX_XML_BYTES = 500_000_000


@dataclass(frozen=True)
class Page:
    number: int | None  # 1-based for PDFs; None for formats without pages
    text: str


@dataclass(frozen=True)
class LoadedDocument:
    title: str | None
    pages: list[Page]  # never empty; every page has text


def load_document(suffix: str, data: bytes, *, max_chars: int = MAX_CHARS) -> LoadedDocument:
    """Title and text of a document; BadDocument (one short line) for anything that cannot be indexed."""
    loader = _LOADERS.get(suffix.lower())
    if loader is None:
        raise BadDocument(f"unsupported file type '{suffix}'")
    if not data:
        raise BadDocument("empty file")
    doc = loader(data)
    n_chars = sum(len(p.text) for p in doc.pages)
    if n_chars > max_chars:
        raise BadDocument(f"too much text: {n_chars:,} characters > {max_chars:,} limit (split the file)")
    return doc


def _load_plain(data: bytes) -> LoadedDocument:
    return LoadedDocument(None, [Page(None, decode_text(data))])


def _load_markdown(data: bytes) -> LoadedDocument:
    text = decode_text(data)
    # A '# comment' inside a fenced code block is not a heading.
    return LoadedDocument(_first_h1(_FENCED_CODE.sub("", text)), [Page(None, text)])


_FENCED_CODE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.M | re.S)
_H1 = re.compile(r"^# +(.*\S)", re.M)
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def _first_h1(text: str) -> str | None:
    m = _H1.search(text)
    return m.group(1).strip() if m else None


def _normalise(text: str) -> str:
    """One space between words, no blank runs: lines kept, paragraphs split by one blank line."""
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


def _load_html(data: bytes) -> LoadedDocument:
    soup = BeautifulSoup(_decode_html(data), "html.parser")
    title = _one_line(soup.title.get_text()) if soup.title else None
    for tag in soup.find_all(_is_hidden):
        if not tag.decomposed:  # already gone with a hidden ancestor
            tag.decompose()
    text = _normalise(_HtmlText().render(soup))
    if not text:
        raise BadDocument("no visible text")
    return LoadedDocument(title or _first_h1(text), [Page(None, text)])


def _decode_html(data: bytes) -> str:
    """BOM, else the <meta> charset in the first 1024 bytes, else UTF-8."""
    m = None if data.startswith((codecs.BOM_UTF8, *_UTF16_BOMS)) else _META_CHARSET.search(data[:1024])
    if m is None:
        return decode_text(data)
    label = m.group(1).decode("ascii", "replace").lower()
    charset = _CHARSET_ALIASES.get(label, label)
    try:
        if codecs.lookup(charset).name == "utf-8":
            return decode_text(data)
        text = data.decode(charset)
    except UnicodeDecodeError as exc:
        raise BadDocument(f"not valid {charset} (byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc
    except (LookupError, UnicodeError):  # no such codec, or not a text one (base64, "undefined")
        raise BadDocument(f"unknown charset '{label[:40]}'") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _is_hidden(tag: Tag) -> bool:
    return (tag.name in _HIDDEN_TAGS or tag.has_attr("hidden")
            or str(tag.get("aria-hidden", "")).lower() == "true"
            or bool(_DISPLAY_NONE.search(str(tag.get("style", "")))))


class _HtmlText:
    """Visible text of a parsed page: headings as '#' lines, blocks as paragraphs, list items and
    table rows as lines of one paragraph per list or table. Walks with a stack, not recursion,
    so deep nesting cannot overflow."""

    def __init__(self) -> None:
        self.parts: list[tuple[int | None, str]] = []  # (list or table the line belongs to, text)
        self.inline: list[str] = []
        self.lists: list[int] = []  # the lists of the open list items, outermost first
        self.prefix = ""  # "- " waiting for a list item's first text

    def render(self, soup: BeautifulSoup) -> str:
        stack: list = [soup]
        while stack:
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

def _load_pdf(data: bytes) -> LoadedDocument:
    if b"%PDF-" not in data[:1024]:
        raise BadDocument(f"not a PDF (wrong extension?): starts with {_preview(data)}")
    with _quiet_pypdf():
        reader, n_pages = _open_pdf(data)
        pages, errors = [], []
        for i in range(n_pages):
            try:
                text = _normalise(reader.pages[i].extract_text())
            except Exception as exc:  # pypdf raises many kinds; one bad page should not lose the others
                errors.append(exc)
                continue
            if text:
                pages.append(Page(i + 1, text))
        title = _pdf_title(reader)
    if len(errors) == n_pages:
        raise BadDocument(f"broken PDF: {_reason(errors[0])}")
    if not pages:
        raise BadDocument("no text layer (a scanned PDF? run OCR first)")
    return LoadedDocument(title, pages)


def _open_pdf(data: bytes) -> tuple[PdfReader, int]:
    try:
        reader = PdfReader(io.BytesIO(data))
        # Many PDFs are encrypted only against editing, with an empty password for reading.
        if reader.is_encrypted and not reader.decrypt(""):
            raise BadDocument("encrypted PDF: needs a password")
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
    return reader, n_pages


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


def _load_docx(data: bytes) -> LoadedDocument:
    if not data.startswith(b"PK"):
        raise BadDocument(f"not a DOCX (wrong extension?): starts with {_preview(data)}")
    try:
        _check_unpacked_size(data)
        doc = docx.Document(io.BytesIO(data))
        blocks = [_docx_block(b) for b in doc.iter_inner_content()]
        title = _one_line(doc.core_properties.title)
    except BadDocument:
        raise
    except Exception as exc:
        raise BadDocument(f"broken DOCX: {_reason(exc)}") from exc
    text = "\n\n".join(b for b in blocks if b)
    if not text:
        raise BadDocument("no text")
    return LoadedDocument(title or _first_h1(text), [Page(None, text)])


def _check_unpacked_size(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        size = sum(i.file_size for i in z.infolist() if i.filename.endswith((".xml", ".rels")))
    if size > MAX_DOCX_XML_BYTES:
        raise BadDocument(f"too large unpacked: {size / 1e6:.0f} MB of XML > {MAX_DOCX_XML_BYTES / 1e6:.0f} MB limit")


def _docx_block(block: Paragraph | Table) -> str:
    if isinstance(block, Table):
        return _normalise("\n".join(filter(None, (_docx_row(row) for row in block.rows))))
    text = _normalise(block.text)
    level = _docx_heading_level(block)
    if level and text:
        return "#" * level + " " + " ".join(text.split())
    return text


def _docx_heading_level(paragraph: Paragraph) -> int | None:
    name = (paragraph.style.name if paragraph.style is not None else None) or ""
    if name == "Title":
        return 1
    m = _HEADING_STYLE.match(name)
    return min(int(m.group(1)), 6) if m else None  # markdown stops at six levels


def _docx_row(row) -> str:
    cells, seen = [], set()
    for cell in row.cells:
        if cell._tc in seen:  # a merged cell is listed once per grid column it spans
            continue
        seen.add(cell._tc)
        text = " ".join(cell.text.split())
        if text:
            cells.append(text)
    return " | ".join(cells)


_LOADERS = {".txt": _load_plain, ".md": _load_markdown, ".markdown": _load_markdown, ".html": _load_html,
            ".htm": _load_html, ".pdf": _load_pdf, ".docx": _load_docx}
