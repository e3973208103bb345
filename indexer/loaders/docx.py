"""DOCX: paragraphs, headings and tables read linearly, after checking what the zip would unpack to."""

from __future__ import annotations

import io
import re
import zipfile

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import qn
from docx.styles import BabelFish
from docx.table import Table
from docx.text.paragraph import Paragraph

from indexer.loaders.base import (
    BadDocument,
    Budget,
    LoadedDocument,
    Page,
    _first_h1,
    _normalise,
    _one_line,
    _preview,
    _reason,
)

# A DOCX is a zip: refuse one whose XML would inflate past this before parsing it.
MAX_DOCX_XML_BYTES = 500_000_000


_HEADING_STYLE = re.compile(r"heading ([1-9])$", re.I)
_RUN_TAGS = frozenset({qn("w:r"), qn("w:hyperlink")})
_P_TAG = qn("w:p")


def _load_docx(data: bytes, budget: Budget) -> LoadedDocument:
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


def _check_unpacked(data: bytes, budget: Budget) -> None:
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
    """What python-docx's paragraph.text joins, without its XPath (compiled anew on each call)."""
    return "".join(e.text for e in p if e.tag in _RUN_TAGS)


def _docx_paragraph(paragraph: Paragraph, level: int | None) -> str:
    text = _normalise(_run_text(paragraph._p))
    if level and text:
        return "#" * level + " " + " ".join(text.split())
    return text


def _docx_table(table: Table, budget: Budget) -> str:
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
