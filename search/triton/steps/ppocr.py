"""OCR pre/post-processing around three served ONNX models (PP-OCRv4 detector, direction classifier,
recogniser): encoded image bytes -> text lines with boxes and scores.

It follows RapidOCR 1.4.4's in-process pipeline (default config.yaml) step by step, with the same
libraries and dtypes, so results are identical, quirks kept on purpose:
- no EXIF orientation; palette images read as grey indices;
- RGBA (and CMYK): transparent pixels black, the others unblended, then the image inverted unless
  all black (then 255 - alpha is added);
- a max-side resize rounding the short side to 0 is an error (BadImage).
Differences only where RapidOCR would run out of memory or time: the header size is checked
against ``max_pixels`` before decoding; a detector input over ``det_pixels`` (a thin tall image,
whose short side RapidOCR scales up to 736) is scaled down to fit, since the detector's memory grows
with its input's pixels; at most ``max_lines`` boxes are recognised, in reading order."""

from __future__ import annotations

import functools
import io
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace

import cv2
import numpy as np
from PIL import Image

from search.triton.steps.images import BadImage
from search.triton.steps.ppocr_boxes import det_boxes
from search.triton.steps.ppocr_page import page_turns

__all__ = ["BadImage", "Line", "OcrConfig", "bucket", "config_from_json", "config_from_rapidocr",
           "config_to_json", "run"]

Infer = Callable[[str, np.ndarray], np.ndarray]
# One model's batches -> their outputs, in order. The served step sends them at once (the recogniser's
# instances work side by side on one page); the same batches go in either way, so the text is the same.
InferAll = Callable[[str, Iterable[np.ndarray]], list[np.ndarray]]


def in_turn(infer: Infer) -> InferAll:
    """Batches sent one after another (in-process callers)."""
    return lambda role, inputs: [infer(role, x) for x in inputs]


@dataclass(frozen=True)
class OcrConfig:
    characters: list[str]  # the CTC dictionary: "blank" first, " " last
    text_score: float = 0.5
    use_cls: bool = True
    min_height: int = 30
    width_height_ratio: float = 8
    max_side_len: int = 2000
    min_side_len: int = 30
    limit_side_len: int = 736
    limit_type: str = "min"
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    thresh: float = 0.3
    box_thresh: float = 0.5
    max_candidates: int = 1000
    unclip_ratio: float = 1.6
    use_dilation: bool = True
    score_mode: str = "fast"
    cls_image_shape: tuple[int, int, int] = (3, 48, 192)
    cls_batch_num: int = 6
    cls_thresh: float = 0.9
    label_list: tuple[str, ...] = ("0", "180")
    rec_img_shape: tuple[int, int, int] = (3, 48, 320)
    rec_batch_num: int = 6
    max_pixels: int = 100_000_000
    max_lines: int = 1000
    # The detector's input is scaled down to at most this many pixels: its activations take ~200
    # bytes a pixel on the CPU. Every image up to 7:1 (up to 2000×2000) stays as RapidOCR reads it.
    det_pixels: int = 4_194_304
    # A recogniser batch is at most this many heights wide (a crop of 200:1 and longer is squeezed to
    # it): its memory grows with the width (~0.3 GB for one crop 9,600 wide).
    rec_max_ratio: float = 200.0
    # Fixed shapes for a GPU (configs/gpu.pbtxt; empty: RapidOCR's exact shapes): the detector's input
    # sides and the recogniser's batch width are padded up to the next of these (past the last, to a
    # multiple of it), so a GPU host sees a few shapes, not one per image and crop batch (docs/ocr.md).
    det_buckets: tuple[int, ...] = ()
    rec_widths: tuple[int, ...] = ()


@dataclass(frozen=True)
class Line:
    text: str
    score: float
    box: list[list[float]]  # 4 points (x, y) in the original image's pixels: tl, tr, br, bl
    turned: bool = False  # its crop was read turned by 180° (the classifier's decision)


def config_from_rapidocr(config_yaml: dict, characters: list[str], max_pixels: int = 100_000_000) -> OcrConfig:
    """RapidOCR's config.yaml (as loaded) -> OcrConfig. The detector and recogniser are always used."""
    g, det, cls, rec = (config_yaml[k] for k in ("Global", "Det", "Cls", "Rec"))
    if not (g.get("use_det", True) and g.get("use_rec", True)):
        raise ValueError("the OCR step needs use_det and use_rec")
    return OcrConfig(
        characters=list(characters), text_score=g["text_score"], use_cls=g.get("use_cls", True), min_height=g["min_height"],
        width_height_ratio=g["width_height_ratio"], max_side_len=g["max_side_len"], min_side_len=g["min_side_len"],
        limit_side_len=det["limit_side_len"], limit_type=det["limit_type"], mean=tuple(det["mean"]), std=tuple(det["std"]),
        thresh=det.get("thresh", 0.3), box_thresh=det.get("box_thresh", 0.5), max_candidates=det.get("max_candidates", 1000),
        unclip_ratio=det.get("unclip_ratio", 1.6), use_dilation=det.get("use_dilation", True), score_mode=det.get("score_mode", "fast"),
        cls_image_shape=tuple(cls["cls_image_shape"]), cls_batch_num=cls["cls_batch_num"], cls_thresh=cls["cls_thresh"],
        label_list=tuple(cls["label_list"]), rec_img_shape=tuple(rec["rec_img_shape"]), rec_batch_num=rec["rec_batch_num"],
        max_pixels=max_pixels)


def config_to_json(cfg: OcrConfig) -> dict:
    return asdict(cfg)


def config_from_json(d: dict) -> OcrConfig:
    tuples = {"mean", "std", "cls_image_shape", "label_list", "rec_img_shape", "det_buckets", "rec_widths"}
    legacy = {"max_det_pixels"}  # written by earlier builds: det_pixels (its default) bounds the detector now
    return OcrConfig(**{k: tuple(v) if k in tuples else v for k, v in d.items() if k not in legacy})


# --- image loading and whole-image resizing ---------------------------------------------------

def decode(data: bytes, max_pixels: int) -> np.ndarray:
    """Encoded bytes -> the BGR array RapidOCR's LoadImage makes. The size is checked from the header."""
    if not data:
        raise BadImage("the image is empty (0 bytes)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # max_pixels is the limit here
        try:
            image = Image.open(io.BytesIO(data))  # reads the header only
            w, h = image.size
            if w * h > max_pixels:
                raise BadImage(f"the image is {w}×{h} pixels, over the limit of {max_pixels} (max_pixels)")
            if w == 0 or h == 0:
                raise BadImage(f"the image is {w}×{h} pixels (empty)")
            if image.mode == "1":
                image = image.convert("L")
            arr = np.array(image)
        except BadImage:
            raise
        except Image.UnidentifiedImageError:
            raise BadImage("not an image Pillow can read (unknown format or corrupt header)") from None
        except Image.DecompressionBombError as exc:
            raise BadImage(f"the image is over the limit of max_pixels ({exc})") from None
        except Exception as exc:  # truncated or corrupt data
            raise BadImage(f"the image cannot be decoded ({type(exc).__name__}: {exc})") from None
    try:
        return to_bgr(arr)
    except cv2.error:
        raise BadImage(f"unsupported pixel format ({image.mode}, {arr.dtype})") from None


def to_bgr(img: np.ndarray) -> np.ndarray:
    """RapidOCR's convert_img for decoded bytes (greyscale, grey+alpha, RGB, RGBA -> BGR)."""
    if img.ndim == 2 or (img.ndim == 3 and img.shape[2] == 1):
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if img.ndim != 3 or img.shape[2] not in (2, 3, 4):
        raise BadImage(f"unsupported image shape {img.shape}")
    if img.shape[2] == 3:
        return cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    if img.shape[2] == 2:  # grey + alpha: transparent -> white
        bgr = cv2.cvtColor(img[..., 0], cv2.COLOR_GRAY2BGR)
        not_a = cv2.cvtColor(cv2.bitwise_not(img[..., 1]), cv2.COLOR_GRAY2BGR)
        return cv2.add(cv2.bitwise_and(bgr, bgr, mask=img[..., 1]), not_a)
    r, g, b, a = cv2.split(img)
    bgr = cv2.merge((b, g, r))
    not_a = cv2.cvtColor(cv2.bitwise_not(a), cv2.COLOR_GRAY2BGR)
    bgr = cv2.bitwise_and(bgr, bgr, mask=a)
    return cv2.add(bgr, not_a) if np.mean(bgr) <= 0.0 else cv2.bitwise_not(bgr)  # sic: RapidOCR inverts


def _resize_to(img: np.ndarray, side: int, longest: bool) -> tuple[np.ndarray, float, float]:
    """reduce_max_side (longest) / increase_min_side: scale, round each side to a multiple of 32."""
    h, w = img.shape[:2]
    ratio = 1.0
    if (max(h, w) > side) if longest else (min(h, w) < side):
        ratio = float(side) / (h if (h > w) == longest else w)
    rh, rw = int(round(int(h * ratio) / 32) * 32), int(round(int(w * ratio) / 32) * 32)
    if rh <= 0 or rw <= 0:
        raise BadImage(f"the image ({w}×{h} pixels) is too thin to read")
    return cv2.resize(img, (rw, rh)), h / rh, w / rw


def resize_whole(img: np.ndarray, cfg: OcrConfig) -> tuple[np.ndarray, float, float]:
    """RapidOCR.preprocess: longest side down to max_side_len, shortest up to min_side_len."""
    ratio_h = ratio_w = 1.0
    if max(img.shape[:2]) > cfg.max_side_len:
        img, ratio_h, ratio_w = _resize_to(img, cfg.max_side_len, longest=True)
    if min(img.shape[:2]) < cfg.min_side_len:
        img, ratio_h, ratio_w = _resize_to(img, cfg.min_side_len, longest=False)
    return img, ratio_h, ratio_w


def letterbox(img: np.ndarray, cfg: OcrConfig, own_colour: bool = False) -> tuple[np.ndarray, int]:
    """maybe_add_letterbox: black bands above and below a low or very wide image (``own_colour``: bands
    of its background colour, ``background``); returns the band's height."""
    h, w = img.shape[:2]
    too_wide = cfg.width_height_ratio != -1 and w / h > cfg.width_height_ratio
    if h > cfg.min_height and not too_wide:
        return img, 0
    pad = int(abs(max(int(w / cfg.width_height_ratio), cfg.min_height) * 2 - h) / 2)
    colour = background(img) if own_colour else (0, 0, 0)
    return cv2.copyMakeBorder(img, pad, pad, 0, 0, cv2.BORDER_CONSTANT, value=colour), pad


def background(img: np.ndarray) -> tuple[int, ...]:
    """An image's background colour: the median of its edge pixels (white on a page). RapidOCR's black
    bands beside a line of dark text on white read as the edges of letters: the first and last suffer."""
    edge = np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]])
    return tuple(int(v) for v in np.median(edge, axis=0))


# --- detection --------------------------------------------------------------------------------

def bucket(size: int, buckets: tuple[int, ...]) -> int:
    """The first of ``buckets`` that holds ``size``; past the last, the next multiple of it."""
    for b in buckets:
        if size <= b:
            return b
    return -(-size // buckets[-1]) * buckets[-1] if buckets else size


def padded(tensor: np.ndarray, height: int, width: int) -> np.ndarray:
    """[n, c, h, w] padded right and below with 0 (mid-grey once normalised, as the convolutions'
    own padding and RapidOCR's padding of narrow crops)."""
    n, c, h, w = tensor.shape
    if (h, w) == (height, width):
        return tensor
    out = np.zeros((n, c, height, width), dtype=tensor.dtype)
    out[:, :, :h, :w] = tensor
    return out


def detect(tensor: np.ndarray, infer: Infer, cfg: OcrConfig) -> np.ndarray:
    """The detector's probability map for one input, run at its bucket's shape and cut back."""
    h, w = tensor.shape[2:]
    return infer("det", padded(tensor, bucket(h, cfg.det_buckets), bucket(w, cfg.det_buckets)))[:, :, :h, :w]


def det_input(img: np.ndarray, cfg: OcrConfig) -> np.ndarray | None:
    """[1, 3, H, W] float32 for the detector (sides multiples of 32), or None where a side rounds to 0.
    RapidOCR's size, unless over ``det_pixels``: then scaled down to fit, sides rounded down."""
    h, w = img.shape[:2]
    if cfg.limit_type == "min":
        limit = cfg.limit_side_len
        ratio = float(limit) / (h if h < w else w) if min(h, w) < limit else 1.0
    else:  # RapidOCR ignores limit_side_len here
        limit = 960 if max(h, w) < 960 else 1500 if max(h, w) < 1500 else 2000
        ratio = float(limit) / (h if h > w else w) if max(h, w) > limit else 1.0
    rh, rw = int(round(int(h * ratio) / 32) * 32), int(round(int(w * ratio) / 32) * 32)
    if rh * rw > cfg.det_pixels:
        scale = math.sqrt(cfg.det_pixels / (rh * rw))
        rh, rw = int(rh * scale) // 32 * 32, int(rw * scale) // 32 * 32
    if rh <= 0 or rw <= 0:
        return None
    resized = cv2.resize(img, (rw, rh))
    table = _normalise_table(tuple(cfg.mean), tuple(cfg.std))
    out = np.empty((1, 3, rh, rw), np.float32)
    for c in range(3):  # a lookup per channel: RapidOCR's float64 arithmetic would take ~60 bytes a pixel
        np.take(table[c], resized[..., c], out=out[0, c])
    return out


@functools.lru_cache(maxsize=4)
def _normalise_table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """[3, 256] float32: each 8-bit value of each channel normalised with RapidOCR's own expression,
    so looking values up gives its bits exactly."""
    levels = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)  # a 1×256 "image"
    norm = (levels.astype("float32") * (1 / 255.0) - np.array(mean)) / np.array(std)
    return np.ascontiguousarray(norm[0].T.astype(np.float32))


# --- crops, classifier, recogniser ------------------------------------------------------------

def crop(img: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The box's perspective crop; a crop 1.5 times taller than wide is turned 90° counter-clockwise."""
    w = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    h = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    dst = np.array([[0, 0], [w, 0], [w, h], [0, h]]).astype(np.float32)
    out = cv2.warpPerspective(img, cv2.getPerspectiveTransform(box, dst), (w, h), borderMode=cv2.BORDER_REPLICATE,
                              flags=cv2.INTER_CUBIC)
    return np.rot90(out) if out.shape[0] * 1.0 / out.shape[1] >= 1.5 else out


def batches(imgs: list[np.ndarray], size: int) -> list[list[int]]:
    """The crops' indices in RapidOCR's batches: sorted by width/height ratio (np.argsort), then cut."""
    order = np.argsort(np.array([img.shape[1] / float(img.shape[0]) for img in imgs]))
    return [[int(k) for k in order[i:i + size]] for i in range(0, len(imgs), size)]


def _resize_norm(img: np.ndarray, shape: tuple[int, int, int], width: int) -> np.ndarray:
    c, h, _ = shape
    ratio = img.shape[1] / float(img.shape[0])
    rw = width if math.ceil(h * ratio) > width else int(math.ceil(h * ratio))
    resized = cv2.resize(img, (rw, h)).astype("float32").transpose((2, 0, 1)) / 255
    resized -= 0.5
    resized /= 0.5
    out = np.zeros((c, h, width), dtype=np.float32)
    out[:, :, :rw] = resized
    return out


def cls_input(imgs: list[np.ndarray], cfg: OcrConfig) -> np.ndarray:
    """One classifier batch: [n, 3, 48, 192], each crop resized to height 48 and right-padded with 0."""
    return np.stack([_resize_norm(img, cfg.cls_image_shape, cfg.cls_image_shape[2]) for img in imgs]).astype(np.float32)


def crop_turns(crops: list[np.ndarray], infer_all: InferAll, cfg: OcrConfig) -> list[bool]:
    """RapidOCR's decision, crop by crop: turn by 180° those the classifier is sure are upside down."""
    turns = [False] * len(crops)
    groups = batches(crops, cfg.cls_batch_num)
    outputs = infer_all("cls", (cls_input([crops[k] for k in group], cfg) for group in groups))
    for group, probs in zip(groups, outputs):
        for k, p in zip(group, probs):
            best = int(p.argmax())
            turns[k] = "180" in cfg.label_list[best] and bool(p[best] > cfg.cls_thresh)
    return turns


def rec_input(imgs: list[np.ndarray], cfg: OcrConfig) -> np.ndarray:
    """One recogniser batch: [n, 3, 48, W], W from the batch's widest ratio (at least 320/48, at most rec_max_ratio)."""
    c, h, w = cfg.rec_img_shape
    max_ratio = min(max([w / h] + [img.shape[1] * 1.0 / img.shape[0] for img in imgs]), cfg.rec_max_ratio)
    batch = np.stack([_resize_norm(img, cfg.rec_img_shape, int(h * max_ratio)) for img in imgs]).astype(np.float32)
    return padded(batch, h, bucket(batch.shape[3], cfg.rec_widths))


def ctc_decode(preds: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """Greedy CTC: repeats merged, blanks (0) dropped; the score is the mean of the kept steps' max probs.
    ``preds``: per step the probabilities of every class, or (as the served recogniser gives them, its
    graph reducing them; `search models build`) the best class and its probability."""
    if preds.shape[2] == 2 and len(characters) != 2:
        idx, prob = preds[:, :, 0].astype(np.int64), preds[:, :, 1]
    else:
        idx, prob = preds.argmax(axis=2), preds.max(axis=2)
    out = []
    for t, p in zip(idx, prob):
        keep = np.ones(len(t), dtype=bool)
        keep[1:] = t[1:] != t[:-1]
        keep &= t != 0
        conf = np.array(p[keep]).tolist() or [0]
        out.append(("".join(characters[k] for k in t[keep]), np.mean(conf).tolist()))
    return out


def origin_boxes(boxes: list[np.ndarray], top: int, ratio_h: float, ratio_w: float, raw_h: int, raw_w: int) -> np.ndarray:
    """Boxes in the resized, letterboxed image -> the original image's pixels (float32, clipped)."""
    arr = np.array(boxes).astype(np.float32)
    arr[:, :, 1] -= top
    arr[:, :, 0] *= ratio_w
    arr[:, :, 1] *= ratio_h
    arr = np.where(arr < 0, 0, arr)
    arr[..., 0] = np.where(arr[..., 0] > raw_w, raw_w, arr[..., 0])
    arr[..., 1] = np.where(arr[..., 1] > raw_h, raw_h, arr[..., 1])
    return arr


def run(data: bytes, infer: Infer, cfg: OcrConfig, as_read: bool = False, infer_all: InferAll | None = None) -> list[Line]:
    """Image bytes -> the lines RapidOCR finds, in its order, those scoring under text_score left out.
    ``as_read``: read as a person would rather than exactly as RapidOCR does: the page turned as a whole
    (``ppocr_page``), a box scored over its own outline ("slow", PaddleOCR's option) rather than its
    rectangle, in which a long, slightly curved line on a scan scores under box_thresh and is lost, and
    a thin image letterboxed with its own background colour rather than black. ``infer_all`` sends a
    model's batches (classifier, recogniser) at once; by default one after another."""
    infer_all = infer_all or in_turn(infer)
    if as_read:
        cfg = replace(cfg, score_mode="slow")
    img = decode(data, cfg.max_pixels)
    raw_h, raw_w = img.shape[:2]
    img, ratio_h, ratio_w = resize_whole(img, cfg)
    img, top = letterbox(img, cfg, own_colour=as_read)
    tensor = det_input(img, cfg)
    if tensor is None:
        return []
    boxes = det_boxes(detect(tensor, infer, cfg), img.shape[:2], cfg)[:cfg.max_lines]
    if not boxes:
        return []
    crops = [crop(img, box) for box in boxes]
    turns = [False] * len(crops)
    if cfg.use_cls:
        turns = (page_turns(crops, lambda groups: infer_all("cls", (cls_input(g, cfg) for g in groups)), cfg)
                 if as_read else crop_turns(crops, infer_all, cfg))
        crops = [cv2.rotate(c, cv2.ROTATE_180) if t else c for c, t in zip(crops, turns)]
    texts: list[tuple[str, float]] = [("", 0.0)] * len(crops)
    groups = batches(crops, cfg.rec_batch_num)
    outputs = infer_all("rec", (rec_input([crops[k] for k in group], cfg) for group in groups))
    for group, preds in zip(groups, outputs):
        for k, res in zip(group, ctc_decode(preds, cfg.characters)):
            texts[k] = res
    points = origin_boxes(boxes, top, ratio_h, ratio_w, raw_h, raw_w)
    return [Line(text, score, box.tolist(), t) for box, (text, score), t in zip(points, texts, turns)
            if float(score) >= cfg.text_score]
