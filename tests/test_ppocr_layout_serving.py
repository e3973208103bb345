"""Blocks as read by the served PP-OCR (the default weights): a rendered page with a title over two
columns of two paragraphs each is read title, left column, right column, each paragraph a block;
the blocks in `search ocr --json`, POST /ocr and the service's answer, and a blank line between
paragraphs in the text ingest stores (so chunks end at paragraphs)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from api_helpers import make_client
from fpdf import FPDF
from ingest_helper import ingest
from PIL import Image, ImageDraw, ImageFont
from processes import run_cli

pytestmark = pytest.mark.served("ppocr")
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

TITLE = "Notes from the office move in March"
LEFT = (["The printers move to the", "second floor on Monday."], ["Desks are labelled with", "the new room numbers."])
RIGHT = (["Guest wifi stays the same", "during the whole week."], ["Parking is free for all", "visitors until Friday."])
BLOCKS = [TITLE, *("\n".join(p) for p in (*LEFT, *RIGHT))]


def page() -> Image.Image:
    """The title across the page, then two columns 90 px apart, a blank line between paragraphs."""
    font, pitch = ImageFont.truetype(str(DEJAVU), 28), 42
    img = Image.new("RGB", (900, 440), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.text((40, 30), TITLE, font=font, fill=(0, 0, 0))  # 40 to 551 px: across the gutter (389 to 480)
    for x, column in ((40, LEFT), (480, RIGHT)):
        y = 30 + 3 * pitch
        for paragraph in column:
            for text in paragraph:
                draw.text((x, y), text, font=font, fill=(0, 0, 0))
                y += pitch
            y += pitch
    return img


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.skipif(not DEJAVU.exists(), reason="no DejaVu font (Debian fonts-dejavu-core) to render with")
def test_a_two_column_page_is_read_column_by_column_in_paragraphs(service, settings, tmp_path):
    """The rows of the two columns were joined across the gutter ("The printers move to the Guest wifi
    stays the same"), and the text had no paragraphs."""
    image = tmp_path / "notes.png"
    image.write_bytes(png(page()))
    got = service.read_text(image)
    assert [b["text"] for b in got.blocks] == BLOCKS, got.lines
    assert got.text == "\n\n".join(BLOCKS) and [line["block"] for line in got.lines] == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    left, right = got.blocks[1]["box"], got.blocks[3]["box"]
    assert left[1][0] < 480 < right[0][0] + 10 and got.blocks[1]["lines"] == [1, 2]
    proc = run_cli("search", "ocr", str(image), "--json", settings=settings)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert [b["text"] for b in answer["blocks"]] == BLOCKS and answer["text"] == got.text
    with make_client(settings) as api:
        r = api.post("/ocr", files={"image": ("notes.png", image.read_bytes(), "image/png")})
    assert r.status_code == 200, r.text
    assert [b["text"] for b in r.json()["blocks"]] == BLOCKS and r.json()["text"] == got.text
    plain = run_cli("search", "ocr", str(image), settings=settings)
    assert plain.returncode == 0 and len([line for line in plain.stdout.splitlines() if not line.strip()]) == 4, plain


@pytest.mark.skipif(not DEJAVU.exists(), reason="no DejaVu font (Debian fonts-dejavu-core) to render with")
def test_ingest_stores_a_scanned_pages_paragraphs(service, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    img = page()
    pdf = FPDF(unit="pt")
    pdf.add_page(format=(img.width * 0.36, img.height * 0.36))  # as scanned at 200 dpi
    pdf.image(img, x=0, y=0, w=img.width * 0.36, h=img.height * 0.36)
    (folder / "notes.pdf").write_bytes(bytes(pdf.output()))
    ingest(service, [folder])
    hit = service.search_documents("where do the printers move", top_k=1, mode="semantic")[0]
    assert hit.text.split("\n\n") == BLOCKS, hit.text
