"""The OCR step's pure functions (search.triton.steps.ppocr) against RapidOCR 1.4.4's in-process pipeline,
over the wheel's own ONNX models on onnxruntime: same lines, texts, boxes and scores. No Triton."""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

rapidocr = pytest.importorskip("rapidocr_onnxruntime")
ort = pytest.importorskip("onnxruntime")
yaml = pytest.importorskip("yaml")

from search.models.export.ppocr import characters_from_onnx  # noqa: E402
from search.triton.steps import ppocr as ocr  # noqa: E402
from search.triton.steps import ppocr_boxes  # noqa: E402

WHEEL = Path(rapidocr.__file__).resolve().parent
MODELS = {"det": "ch_PP-OCRv4_det_infer.onnx", "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx", "rec": "ch_PP-OCRv4_rec_infer.onnx"}
TESTPAGE = Path("/work/shared/data/ocr/testpage.png")


@pytest.fixture(scope="module")
def cfg() -> ocr.OcrConfig:
    config = yaml.safe_load((WHEEL / "config.yaml").read_text())
    return ocr.config_from_rapidocr(config, characters_from_onnx(WHEEL / "models" / MODELS["rec"]))


@pytest.fixture(scope="module")
def infer():
    """Sessions with RapidOCR's own options, so the two pipelines differ only in the code around them."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.enable_cpu_mem_arena = False
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = {k: ort.InferenceSession(str(WHEEL / "models" / name), opts, providers=["CPUExecutionProvider"])
                for k, name in MODELS.items()}
    calls = []

    def run(model: str, batch: np.ndarray) -> np.ndarray:
        assert batch.dtype == np.float32 and batch.ndim == 4
        calls.append((model, batch.shape))
        s = sessions[model]
        return s.run(None, {s.get_inputs()[0].name: batch})[0]

    run.calls = calls
    return run


@pytest.fixture(scope="module")
def engine():
    return rapidocr.RapidOCR()


def font(size: int):
    for path in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf"):
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size=size)


def encode(image: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    return buf.getvalue()


def page(fg=(20, 20, 20), bg=(250, 250, 245)) -> Image.Image:
    """Lines in several sizes, two on one row, and one upside down (so the classifier matters)."""
    im = Image.new("RGB", (900, 640), bg)
    d = ImageDraw.Draw(im)
    d.text((30, 20), "Quarterly report RE16", font=font(40), fill=fg)
    d.text((30, 90), "wifi password: hunter2", font=font(28), fill=fg)
    d.text((30, 140), "left column", font=font(22), fill=fg)
    d.text((480, 143), "right column", font=font(22), fill=fg)
    d.text((30, 190), "The quick brown fox jumps over the lazy dog 0123456789", font=font(18), fill=fg)
    d.text((30, 230), "small print: terms and conditions apply", font=font(14), fill=fg)
    for k in range(5):
        d.text((30 + 160 * k, 270), f"item {k + 1}", font=font(20), fill=fg)
    flipped = Image.new("RGB", (700, 70), bg)
    ImageDraw.Draw(flipped).text((10, 10), "This line is upside down", font=font(36), fill=fg)
    im.paste(flipped.rotate(180), (30, 340))
    d.text((30, 450), "Invoice No. 2024-00317  Total: $1,234.56", font=font(26), fill=fg)
    return im


def strip(text: str, size: tuple[int, int], font_size: int) -> Image.Image:
    im = Image.new("RGB", size, "white")
    ImageDraw.Draw(im).text((4, 2), text, font=font(font_size), fill="black")
    return im


def reference(engine, data: bytes) -> list:
    result, _ = engine(data)
    return result or []


def assert_same(mine: list[ocr.Line], ref: list) -> tuple[float, float]:
    assert [line.text for line in mine] == [r[1] for r in ref]
    box_diff = max((float(np.abs(np.array(a.box) - np.array(r[0])).max()) for a, r in zip(mine, ref)), default=0.0)
    score_diff = max((abs(a.score - r[2]) for a, r in zip(mine, ref)), default=0.0)
    assert box_diff <= 2 and score_diff <= 1e-3, (box_diff, score_diff)
    return box_diff, score_diff


def _exif_orientation(value: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


def rendered_cases() -> dict[str, bytes]:
    rgba = page().convert("RGBA")
    alpha = np.array(rgba)
    alpha[:, :450, 3] = 0  # the left half transparent
    tiny = Image.new("RGB", (200, 18), "white")
    ImageDraw.Draw(tiny).text((2, 1), "RE16 tiny", font=font(14), fill="black")
    return {
        "dark_on_light": encode(page()),
        "light_on_dark": encode(page(fg=(240, 240, 240), bg=(15, 25, 40))),
        "alpha": encode(Image.fromarray(alpha, "RGBA")),
        "grey": encode(page().convert("L")),
        "jpeg": encode(page(), "JPEG", quality=85),
        "jpeg_exif_rotated": encode(page(), "JPEG", quality=85, exif=_exif_orientation(6)),  # RapidOCR ignores EXIF
        "grey_alpha": encode(Image.fromarray(np.stack([np.array(page().convert("L")), alpha[..., 3]], -1), "LA")),
        "wide_letterboxed": encode(strip("wifi password: hunter2", (640, 44), 30)),
        "tiny_upscaled": encode(tiny),
        "large_downscaled": encode(page().resize((2700, 1920))),
        "palette": encode(page().convert("P", palette=Image.Palette.ADAPTIVE, colors=16)),
        "one_bit": encode(page().convert("1")),
    }


CASES = rendered_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_rapidocr(name, cfg, infer, engine):
    data = CASES[name]
    ref = reference(engine, data)
    mine = ocr.run(data, infer, cfg)
    assert len(mine) == len(ref)
    assert_same(mine, ref)
    texts = " | ".join(line.text for line in mine)
    if name in ("dark_on_light", "light_on_dark", "grey", "large_downscaled"):
        assert "wifi password: hunter2" in texts and "RE16" in texts.replace("REl6", "RE16"), texts
    if name in ("dark_on_light", "light_on_dark"):  # the classifier turned the upside-down line
        assert "This line is upside down" in texts, texts


def test_batches_as_rapidocr(cfg, infer):
    """det once; cls and rec in batches of 6 of crops sorted by width/height ratio."""
    infer.calls.clear()
    lines = ocr.run(CASES["dark_on_light"], infer, cfg)
    models = [m for m, _ in infer.calls]
    assert models[0] == "det" and models.count("det") == 1
    n = len(ocr.det_boxes(*_det(cfg, infer, CASES["dark_on_light"])))
    assert models.count("cls") == models.count("rec") == -(-n // 6)
    assert all(shape[0] <= 6 and shape[2] == 48 for m, shape in infer.calls if m != "det")
    assert len(lines) <= n


def _det(cfg, infer, data):
    img = ocr.decode(data, cfg.max_pixels)
    img, _, _ = ocr.resize_whole(img, cfg)
    img, _ = ocr.letterbox(img, cfg)
    return infer("det", ocr.det_input(img, cfg)), img.shape[:2], cfg


@pytest.mark.skipif(not TESTPAGE.exists(), reason="needs the shared OCR data (/work/shared)")
def test_testpage(cfg, infer, engine):
    data = TESTPAGE.read_bytes()
    ref = reference(engine, data)
    mine = ocr.run(data, infer, cfg)
    assert len(mine) == len(ref) > 20
    assert_same(mine, ref)


def test_blank_images_give_no_lines(cfg, infer, engine):
    for image in (Image.new("RGB", (1, 1), "white"), Image.new("RGB", (640, 480), "black"), Image.new("L", (300, 5), 255)):
        data = encode(image)
        assert reference(engine, data) == []
        assert ocr.run(data, infer, cfg) == []


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    # a valid header, then a few bytes of pixel data: decoding it would fail as truncated, not as too large
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"not an image", "not an image"),
    (encode(page())[:3000], "cannot be decoded"),
    (_png_header(12_000, 9_000), "max_pixels"),  # 108 M pixels claimed, no pixel data: refused from the header
    (_png_header(40_000, 40_000), "max_pixels"),
])
def test_bad_input(data, message, cfg, infer):
    with pytest.raises(ocr.BadImage, match=message):
        ocr.run(data, infer, cfg)


def test_thin_tall_images_are_scaled_to_the_detector_budget(cfg, infer, engine):
    """RapidOCR scales a 30×2000 strip's short side up to 736: a 736×49056 detector input, GBs of
    activations. The step scales it down to det_pixels instead, and still reads it; a 1×2000 strip
    (736×1380000 in RapidOCR) gives a detector input within the budget too."""
    strip_ = Image.new("RGB", (30, 2000), "white")
    for y in range(0, 2000, 100):
        ImageDraw.Draw(strip_).text((4, y), "A", font=font(22), fill="black")
    for image in (strip_, Image.new("RGB", (1, 2000), "white")):
        infer.calls.clear()
        ocr.run(encode(image), infer, cfg)
        (model, shape), = [c for c in infer.calls if c[0] == "det"]
        assert shape[2] * shape[3] <= cfg.det_pixels and shape[2] % 32 == shape[3] % 32 == 0, shape
    assert cfg.det_pixels < 736 * 49056 // 8
    assert [line.text for line in ocr.run(encode(strip_.rotate(90, expand=True)), infer, cfg)]  # ordinary: unchanged


def test_ordinary_images_keep_rapidocr_detector_input(cfg, infer):
    """Up to 7:1 and up to 2000×2000, the detector's input is RapidOCR's own size."""
    for size in ((2000, 2000), (30, 210), (736 * 7, 736), (4032, 3024)):
        img = np.zeros((size[1], size[0], 3), np.uint8)
        h, w = ocr.det_input(ocr.letterbox(ocr.resize_whole(img, cfg)[0], cfg)[0], cfg).shape[2:]
        full = replace(cfg, det_pixels=10**12)
        assert (h, w) == ocr.det_input(ocr.letterbox(ocr.resize_whole(img, full)[0], full)[0], full).shape[2:], size


def test_the_served_recognisers_reduced_output_decodes_as_the_full_one():
    """The served graph gives each step's best class and its probability (`search models build`):
    decoded, the same text and score as from every class's probability, ties included."""
    probs = np.random.default_rng(0).random((3, 40, 50)).astype(np.float32)
    probs[0, :5] = 0.5  # equal values: both take the first
    characters = ["blank", *(chr(0x61 + k) for k in range(48)), " "]
    reduced = np.stack([probs.argmax(axis=2).astype(np.float32), probs.max(axis=2)], axis=2)
    assert ocr.ctc_decode(reduced, characters) == ocr.ctc_decode(probs, characters)


def test_recogniser_batches_are_bounded_in_width(cfg):
    """A 10×20000 crop (a 1×2000 image scaled up to a short side of 30 gives such boxes) would be a
    [1, 3, 48, 96000] batch, GBs in the recogniser: squeezed to rec_max_ratio heights instead."""
    assert ocr.rec_input([np.zeros((10, 20000, 3), np.uint8)], cfg).shape == (1, 3, 48, int(48 * cfg.rec_max_ratio))
    assert ocr.rec_input([np.zeros((20, 3000, 3), np.uint8)], cfg).shape == (1, 3, 48, 7200)  # 150:1: as RapidOCR


def test_small_max_pixels(cfg, infer):
    small = ocr.config_from_json({**ocr.config_to_json(cfg), "max_pixels": 1000})
    with pytest.raises(ocr.BadImage, match="max_pixels"):
        ocr.run(encode(page()), infer, small)


def test_config_round_trip(cfg):
    import json

    d = json.loads(json.dumps(ocr.config_to_json(cfg)))
    assert ocr.config_from_json(d) == cfg
    assert cfg.characters[0] == "blank" and cfg.characters[-1] == " " and len(cfg.characters) > 6000
    assert cfg.max_lines == 1000 and cfg.limit_side_len == 736 and cfg.rec_img_shape == (3, 48, 320)


def test_ctc_decode():
    chars = ["blank", "a", "b", " "]
    preds = np.zeros((2, 6, 4), np.float32)
    for t, (k, p) in enumerate([(1, 0.9), (1, 0.8), (0, 0.99), (1, 0.7), (2, 0.6), (3, 0.5)]):
        preds[0, t, k] = p
    preds[1, :, 0] = 1.0
    (text, score), (empty, zero) = ocr.ctc_decode(preds, chars)
    assert text == "aab " and score == pytest.approx(np.mean([0.9, 0.7, 0.6, 0.5]))
    assert empty == "" and zero == 0.0


def test_sort_boxes_reading_order():
    def box(x, y):
        return np.array([[x, y], [x + 50, y], [x + 50, y + 20], [x, y + 20]], np.float32)

    boxes = [box(300, 105), box(10, 100), box(10, 200), box(150, 103)]
    assert [b[0].tolist() for b in ppocr_boxes.sort_boxes(boxes)] == [[10, 100], [150, 103], [300, 105], [10, 200]]


def test_fixed_shapes_are_opt_in_and_pad_to_the_buckets(cfg, infer, engine):
    """Off by default (exact shapes: the reference's). When set, the detector and recogniser see only
    the bucket shapes, the lines are found again at the same places; their text may differ (a
    space: docs/ocr.md), which is why no shipped config sets them."""
    from dataclasses import replace

    assert cfg.det_buckets == () and cfg.rec_widths == ()
    bucketed = replace(cfg, det_buckets=(736, 1024, 1280, 1536, 2048), rec_widths=(320, 480, 640, 960, 1280, 1920))
    infer.calls.clear()
    mine = ocr.run(CASES["dark_on_light"], infer, bucketed)
    ref = reference(engine, CASES["dark_on_light"])
    assert len(mine) == len(ref)
    assert max(float(np.abs(np.array(a.box) - np.array(r[0])).max()) for a, r in zip(mine, ref)) <= 2
    assert all(side in (736, 1024, 1280, 1536, 2048) for model, shape in infer.calls if model == "det" for side in shape[2:])
    assert all(shape[3] in (320, 480, 640, 960, 1280, 1920) for model, shape in infer.calls if model == "rec")


def test_bucket():
    assert [ocr.bucket(s, (736, 1024)) for s in (32, 736, 737, 1024, 1056, 2049)] == [736, 736, 1024, 1024, 2048, 3072]
    assert ocr.bucket(544, ()) == 544


@pytest.mark.parametrize("turn", [0, 180])
def test_as_read_turns_the_page_as_a_whole_but_keeps_a_line_pasted_the_other_way(turn, cfg, infer):
    """As read, the classifier votes on pieces of each crop and the page is turned once; the long
    line pasted upside down on it is read the right way up, whichever way the page lies."""
    data = encode(page().rotate(turn))
    lines = ocr.run(data, infer, cfg, as_read=True)
    texts = " | ".join(line.text for line in lines)
    assert "This line is upside down" in texts and "wifi password: hunter2" in texts, texts
    flipped = [line for line in lines if "upside down" in line.text]
    assert [line.turned for line in lines if line not in flipped] == [turn == 180] * (len(lines) - 1)
    assert flipped[0].turned == (turn == 0)


def test_as_read_letterboxes_a_thin_image_with_its_own_background(cfg, infer):
    """RapidOCR letterboxes a thin image with black bands, which read as the edges of letters; as read,
    the bands are the image's own background colour (it was black there too), and the boxes come back
    in the image's own pixels."""
    line = np.ascontiguousarray(np.asarray(strip("wifi password: hunter2", (640, 44), 30))[..., ::-1])  # BGR
    black, top = ocr.letterbox(line, cfg)
    own, same = ocr.letterbox(line, cfg, own_colour=True)
    assert top == same > 0 and (black[:top] == 0).all() and (black[-top:] == 0).all()
    assert (own[:top] == 255).all() and (own[-top:] == 255).all() and (own[top:-top] == line).all()
    dark = np.full((20, 400, 3), (60, 20, 20), np.uint8)
    assert (ocr.letterbox(dark, cfg, own_colour=True)[0][0] == (60, 20, 20)).all()
    lines = ocr.run(CASES["wide_letterboxed"], infer, cfg, as_read=True)
    assert "hunter2" in " ".join(x.text for x in lines) and all(0 <= y <= 44 for x in lines for _, y in x.box), lines


def test_pieces_cut_a_long_crop_to_the_classifiers_shape():
    from search.triton.steps.ppocr_page import pieces  # noqa: PLC0415
    crop = np.zeros((48, 48 * 37, 3), np.uint8)
    cut = pieces(crop, 4.0)
    assert len(cut) == 9 and sum(p.shape[1] for p in cut) == crop.shape[1]
    assert all(3.5 < p.shape[1] / 48 < 4.5 for p in cut)
    assert len(pieces(crop[:, :100], 4.0)) == 1
