"""Small documents of every supported format, made in memory, for loader and ingest tests."""

from __future__ import annotations

import html
import io
from pathlib import Path

import docx
from fpdf import FPDF
from PIL import Image, ImageDraw
from pypdf import PdfReader, PdfWriter

# A Unicode TTF for PDFs with non-latin-1 text; tests that need it skip when it is missing.
UNICODE_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def make_pdf(pages: list[str], *, title: str | None = None, password: str | None = None,
             owner_only: bool = False, font_path: Path | str | None = None) -> bytes:
    """One page per string ("\\n\\n" between paragraphs). Helvetica (latin-1 only) unless font_path
    names a TTF. password: encrypted so it needs that password to open; owner_only: encrypted
    against editing only, with an empty password for reading."""
    pdf = FPDF()
    if font_path:
        pdf.add_font("body", fname=str(font_path))
        pdf.set_font("body", size=12)
    else:
        pdf.set_font("Helvetica", size=12)
    if title is not None:
        pdf.set_title(title)
    for page in pages:
        pdf.add_page()
        for paragraph in page.split("\n\n"):
            pdf.multi_cell(0, 7, paragraph, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(5)
    data = bytes(pdf.output())
    if password is None and not owner_only:
        return data
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password="" if owner_only else password, owner_password=password or "owner-secret")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_scanned_pdf() -> bytes:
    """One page holding only a picture of text: nothing to extract without OCR."""
    image = Image.new("RGB", (400, 120), "white")
    ImageDraw.Draw(image).text((20, 50), "a scanned page, no text layer", fill="black")
    pdf = FPDF()
    pdf.add_page()
    pdf.image(image, x=10, y=10, w=150)
    return bytes(pdf.output())


def make_docx(blocks: list[tuple[str, object]], *, title: str | None = None) -> bytes:
    """blocks in order: ("title", str), ("h1".."h3", str), ("p", str), ("table", list of rows of cells)."""
    document = docx.Document()
    if title is not None:
        document.core_properties.title = title
    for kind, value in blocks:
        if kind == "title":
            document.add_heading(value, level=0)
        elif kind in ("h1", "h2", "h3"):
            document.add_heading(value, level=int(kind[1]))
        elif kind == "p":
            document.add_paragraph(value)
        elif kind == "table":
            table = document.add_table(rows=len(value), cols=max(len(row) for row in value))
            for cells, row in zip(table.rows, value):
                for cell, text in zip(cells.cells, row):
                    cell.text = text
        else:
            raise ValueError(f"unknown block kind {kind!r}")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_html(body: str, *, title: str | None = None, charset: str = "utf-8", head_extra: str = "") -> bytes:
    """A page whose <meta charset> matches its encoding; body is raw HTML."""
    head = f'<meta charset="{charset}">'
    if title is not None:
        head += f"<title>{html.escape(title)}</title>"
    page = f"<!DOCTYPE html>\n<html><head>{head}{head_extra}</head>\n<body>\n{body}\n</body></html>\n"
    return page.encode(charset)
