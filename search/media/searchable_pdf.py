"""A searchable PDF from scanned pages and the text read in them: each page is its image, with the
lines laid over it as invisible text (PDF text render mode 3), as OCRmyPDF's output is, so a PDF
viewer selects and finds the words where they stand on the page (fpdf2 writes it)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from search.media.pages import ScanPage

# A Unicode font for the text layer where the system has one (its glyphs are never drawn: only which
# characters stand where counts); else the PDF core font Helvetica, whose Windows-1252 characters
# (Latin accents, €) are kept and others written as "?".
UNICODE_FONTS = (Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
                 Path("/usr/share/fonts/dejavu/DejaVuSans.ttf"))
DEFAULT_DPI = 200  # an image without a resolution of its own is laid out as a scan at this one
POINTS_PER_INCH = 72


@dataclass(frozen=True)
class ReadPage:
    """One page: its image (encoded bytes) and the lines read in it (``text`` and ``box``: four (x, y)
    corners in the image's pixels, clockwise from top left)."""

    image: bytes
    lines: Sequence[dict]
    dpi: float | None = None  # the image's resolution; None: its own, else DEFAULT_DPI


def write(pages: Iterable[ReadPage], out: io.BufferedIOBase | Path) -> int:
    """Write the pages as one PDF to ``out`` (a path or a binary file); returns the number of pages."""
    from fpdf import FPDF  # noqa: PLC0415  (fpdf2 takes ~0.4 s to import: only a PDF written needs it)

    pdf = FPDF(unit="pt")
    pdf.set_auto_page_break(False)
    pdf.set_margin(0)
    font = _font(pdf)
    count = 0
    for page in pages:
        _add_page(pdf, page, font)
        count += 1
    data = bytes(pdf.output())
    if isinstance(out, Path):
        out.write_bytes(data)
    else:
        out.write(data)
    return count


def write_pages(pages: Sequence[ScanPage], lines: Sequence[dict], out: io.BufferedIOBase | Path) -> int:
    """``pages`` (search.media.pages) with the ``lines`` read in them (each with its "page", 1-based)."""
    by_page: dict[int, list[dict]] = {}
    for line in lines:
        by_page.setdefault(line.get("page", 1), []).append(line)
    return write((ReadPage(p.image, by_page.get(p.number, []), p.dpi) for p in pages), out)


def _font(pdf) -> str:
    for path in UNICODE_FONTS:
        if path.is_file():
            pdf.add_font("textlayer", fname=str(path))
            return "textlayer"
    return "helvetica"


def _add_page(pdf, page: ReadPage, font: str) -> None:
    with Image.open(io.BytesIO(page.image)) as img:
        dpi = page.dpi or _own_dpi(img) or DEFAULT_DPI
        width, height = img.size
        img.load()
        rgb = img.convert("RGB") if img.mode not in ("RGB", "L", "1") else img.copy()
    scale = POINTS_PER_INCH / dpi  # image pixels -> points
    pdf.add_page(format=(width * scale, height * scale))
    pdf.image(rgb, x=0, y=0, w=width * scale, h=height * scale)
    pdf.text_mode = "INVISIBLE"  # fpdf.enums.TextMode: render mode 3, neither filled nor stroked
    for line in page.lines:
        _place(pdf, font, line, scale)
    pdf.text_mode = "FILL"


def _place(pdf, font: str, line: dict, scale: float) -> None:
    """The line's text on its box: baseline near the box's bottom, stretched to the box's width."""
    text = " ".join(str(line.get("text", "")).split())
    box = line.get("box")
    if not text or not box:
        return
    if font == "helvetica":
        text = text.encode("cp1252", "replace").decode("cp1252")
    xs, ys = [p[0] for p in box], [p[1] for p in box]
    left, top, right, bottom = min(xs) * scale, min(ys) * scale, max(xs) * scale, max(ys) * scale
    size = max(bottom - top, 1.0) * 0.8  # a line's box holds its ascenders and descenders
    pdf.set_font(font, size=size)
    natural = pdf.get_string_width(text)
    pdf.set_stretching(100.0 * (right - left) / natural if natural > 0 else 100.0)
    pdf.text(left, bottom - (bottom - top) * 0.2, text)
    pdf.set_stretching(100.0)


def _own_dpi(img: Image.Image) -> float | None:
    dpi = img.info.get("dpi")
    try:
        x = float(dpi[0]) if dpi else 0.0
    except (TypeError, ValueError, IndexError):
        return None
    return x if 30 <= x <= 2400 else None  # a missing or absurd resolution: the default
