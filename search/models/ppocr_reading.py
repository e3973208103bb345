"""Text as people read it, from the lines the served PP-OCR model returns (on the client side, so the
served model still gives exactly what RapidOCR gives, as with EXIF orientation): the detector's boxes
of one row (PP-OCRv5 finds words and runs of words, v4 mostly whole lines) joined left to right into
one line with a space between them, rows top to bottom; and thin images padded with their own
background colour rather than RapidOCR's black bands."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

# RapidOCR's defaults (config.yaml: Global): a whole image is brought to a longest side of at most
# MAX_SIDE, then one lower than MIN_HEIGHT or wider than WIDTH_HEIGHT_RATIO times its height gets black
# bands above and below (letterbox) before detection.
MAX_SIDE, MIN_HEIGHT, WIDTH_HEIGHT_RATIO = 2000, 30, 8
MAX_PADDED_PIXELS = 40_000_000  # past this the image goes as it is (the served step bounds its input itself)
ROW_TOLERANCE = 0.5  # a box joins a row when its centre is within this share of the text height of the row's line
JOIN_OVERLAP = 1.0  # boxes overlapping by more than this share of the height: one word cut in two, no space
# (the unclipped boxes of words a space apart overlap by up to ~0.6 of the height)


@dataclass(frozen=True)
class _Box:
    index: int
    x0: float  # left edge
    x1: float  # right edge
    cx: float
    cy: float
    height: float
    slope: float  # dy/dx of the top edge (a slightly turned page)


def _geometry(index: int, box) -> _Box:
    p = np.asarray(box, dtype=np.float64).reshape(4, 2)  # tl, tr, br, bl
    height = (np.linalg.norm(p[0] - p[3]) + np.linalg.norm(p[1] - p[2])) / 2
    dx = p[1, 0] - p[0, 0]
    slope = float(np.clip((p[1, 1] - p[0, 1]) / dx, -0.3, 0.3)) if dx > 1 else 0.0
    return _Box(index, float(min(p[0, 0], p[3, 0])), float(max(p[1, 0], p[2, 0])), float(p[:, 0].mean()),
                float(p[:, 1].mean()), max(float(height), 1.0), slope)


def rows(boxes: list) -> list[list[int]]:
    """The boxes' indices grouped in rows, each row left to right, the rows top to bottom. Boxes are
    taken left to right; each joins the row whose last box it continues (its centre within
    ROW_TOLERANCE of the text height from where that box's line, followed at its slope, runs)."""
    geos = sorted((_geometry(i, b) for i, b in enumerate(boxes)), key=lambda g: (g.x0, g.cy))
    found: list[list[_Box]] = []
    for g in geos:
        best, best_dy = None, math.inf
        for row in found:
            last = row[-1]
            if g.cx <= last.cx:
                continue
            slope = max(row, key=lambda b: b.x1 - b.x0).slope  # the widest box's: the steadiest
            dy = abs(g.cy - (last.cy + slope * (g.cx - last.cx)))
            if dy <= ROW_TOLERANCE * min(g.height, last.height) and dy < best_dy:
                best, best_dy = row, dy
        if best is None:
            found.append([g])
        else:
            best.append(g)
    found.sort(key=lambda row: sum(b.cy for b in row) / len(row))
    return [[b.index for b in row] for row in found]


def turned_box(box) -> list[list[float]]:
    """A box (tl, tr, br, bl) as seen on the page turned by 180° (negated coordinates: only their order
    matters), its corners renamed accordingly; its own inverse."""
    p = [[-float(x), -float(y)] for x, y in box]
    return p[2:] + p[:2]


def join(texts: list[str], boxes: list) -> str:
    """One row's texts, left to right, a space between boxes unless they overlap (one word cut in two)."""
    out = texts[0]
    geos = [_geometry(i, b) for i, b in enumerate(boxes)]
    for prev, cur, text in zip(geos, geos[1:], texts[1:]):
        overlap = prev.x1 - cur.x0
        out += ("" if overlap > JOIN_OVERLAP * min(prev.height, cur.height) else " ") + text
    return out


def thin_padding(data: bytes) -> tuple[bytes, int, int]:
    """An image RapidOCR would letterbox (low, or very wide for its height), padded above and below to
    the same shape with its own background colour (the median of its edge pixels: white on a page),
    as PNG, with the band's height and the image's own height in its pixels; any other image
    unchanged, 0, 0. RapidOCR's black bands read as text edges: the first and last letters suffer."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            scale = min(1.0, MAX_SIDE / max(w, h))
            if (w / h <= WIDTH_HEIGHT_RATIO and h * scale > MIN_HEIGHT) or w * h > MAX_PADDED_PIXELS:
                return data, 0, 0
            rgb = np.asarray(img.convert("RGB"))
    except Exception:  # not an image Pillow reads: the served step says why
        return data, 0, 0
    target = max(math.ceil(w / (WIDTH_HEIGHT_RATIO / 2)), math.ceil(2 * MIN_HEIGHT / scale) + 2)
    top = max((target - h) // 2, 0)
    if top * 2 * w > MAX_PADDED_PIXELS:
        return data, 0, 0
    edge = np.concatenate([rgb[0], rgb[-1], rgb[:, 0], rgb[:, -1]])
    colour = np.median(edge, axis=0).astype(np.uint8)
    out = np.empty((h + 2 * top, w, 3), np.uint8)
    out[:] = colour
    out[top:top + h] = rgb
    buf = io.BytesIO()
    Image.fromarray(out).save(buf, "PNG", compress_level=1)
    return buf.getvalue(), top, h


def unpadded(box: list[list[float]], top: int, height: int) -> list[list[float]]:
    """A box found in the padded image, in the original image's pixels."""
    return [[x, min(max(y - top, 0.0), float(height))] for x, y in box]
