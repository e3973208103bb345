"""Text as people read it, from the lines the served PP-OCR model returns (on the client side, so the
served model still gives exactly what RapidOCR gives, as with EXIF orientation): the detector's boxes
of one row (PP-OCRv5 finds words and runs of words, v4 mostly whole lines) joined left to right into
one line with a space between them, rows top to bottom."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROW_TOLERANCE = 0.5  # a box joins a row when its centre is within this share of the text height of the row's line
JOIN_OVERLAP = 1.0  # boxes overlapping by more than this share of the height: one word cut in two, no space
# (the unclipped boxes of words a space apart overlap by up to ~0.6 of the height)


@dataclass(frozen=True)
class Box:
    index: int
    x0: float  # left edge
    x1: float  # right edge
    cx: float
    cy: float
    height: float
    slope: float  # dy/dx of the top edge (a slightly turned page)


def geometry(index: int, box) -> Box:
    """A box's edges, centre, text height and slope."""
    p = np.asarray(box, dtype=np.float64).reshape(4, 2)  # tl, tr, br, bl
    height = (np.linalg.norm(p[0] - p[3]) + np.linalg.norm(p[1] - p[2])) / 2
    dx = p[1, 0] - p[0, 0]
    slope = float(np.clip((p[1, 1] - p[0, 1]) / dx, -0.3, 0.3)) if dx > 1 else 0.0
    return Box(index, float(min(p[0, 0], p[3, 0])), float(max(p[1, 0], p[2, 0])), float(p[:, 0].mean()),
                float(p[:, 1].mean()), max(float(height), 1.0), slope)


def rows(boxes: list) -> list[list[int]]:
    """The boxes' indices grouped in rows, each row left to right, the rows top to bottom. Boxes are
    taken left to right; each joins the row whose last box it continues (its centre within
    ROW_TOLERANCE of the text height from where that box's line, followed at its slope, runs)."""
    geos = sorted((geometry(i, b) for i, b in enumerate(boxes)), key=lambda g: (g.x0, g.cy))
    found: list[list[Box]] = []
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
    geos = [geometry(i, b) for i, b in enumerate(boxes)]
    for prev, cur, text in zip(geos, geos[1:], texts[1:]):
        overlap = prev.x1 - cur.x0
        out += ("" if overlap > JOIN_OVERLAP * min(prev.height, cur.height) else " ") + text
    return out
