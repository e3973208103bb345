"""Blocks as a reader sees them on a page (docTR's and Surya's blocks -> lines -> words): the served
model's boxes grouped into columns and paragraphs before their rows are joined, so a row of a
two-column page does not run across both columns, and a blank line between paragraphs survives.

A recursive XY cut: a region is cut into columns at a vertical gutter (a strip no box crosses, wide
for the text's height) when both sides read as columns of text (several rows, each side's rows wide:
a receipt's narrow price column is no column, its rows stay whole), else into paragraphs at the
vertical gaps clearly wider than its lines' own spacing. Paragraphs of two columns that happen to
end level (a gap across the whole page) are cut as columns first. A slightly turned page is cut
along its slope."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from search.models.ppocr_reading import geometry

GUTTER = 1.2  # a column gutter is at least this many text heights wide (a space between words is ~0.3)
COLUMN_ROWS = 2  # each side of a gutter holds at least this many rows
COLUMN_WIDTH = 6.0  # and its rows are this many text heights wide (a median): a price or a code is ~2-4
PARAGRAPH_GAP = 0.8  # a gap between rows of at least this many text heights ends a paragraph
SPACING = 1.8  # ... and this many times the region's usual gap between its rows (its lower quartile: double spacing)
MAX_DEPTH = 16  # cuts within cuts: a real page needs a few; an odd one stops here, its rest one block


@dataclass(frozen=True)
class _Item:
    index: int
    x0: float
    x1: float
    y0: float  # top and bottom along the page's slope
    y1: float


def blocks(boxes: list) -> list[list[int]]:
    """The boxes' indices (four corners each, tl tr br bl) in blocks, each block's in their order
    here, the blocks in reading order (columns left to right, paragraphs top to bottom)."""
    if not boxes:
        return []
    geos = [geometry(i, b) for i, b in enumerate(boxes)]
    height = float(np.median([g.height for g in geos]))
    steady = [g.slope for g in geos if g.x1 - g.x0 > 3 * g.height]  # wide boxes' slopes: the page's
    slope = float(np.median(steady)) if steady else 0.0
    items = []
    for i, box in enumerate(boxes):
        p = np.asarray(box, dtype=np.float64).reshape(4, 2)
        level = p[:, 1] - slope * p[:, 0]
        items.append(_Item(i, float(p[:, 0].min()), float(p[:, 0].max()), float(level.min()), float(level.max())))
    return [sorted(b.index for b in block) for block in _cut(items, height)]


def _cut(items: list[_Item], height: float, depth: int = 0) -> list[list[_Item]]:
    if len(items) < 2 or depth > MAX_DEPTH:
        return [items]
    columns = _columns(items, height)
    if columns:
        return [block for column in columns for block in _cut(column, height, depth + 1)]
    bands = _bands(items, height)
    if len(bands) == 1:
        return [items]
    out, k = [], 0
    while k < len(bands):
        j = k + 1  # the bands from k to j together stand in columns: their level gaps are paragraph ends
        while j < len(bands) and _columns([i for band in bands[k:j + 1] for i in band], height):
            j += 1
        region = [i for band in bands[k:j] for i in band]
        out += _cut(region, height, depth + 1) if len(region) < len(items) else [region]
        k = j
    return out


def _columns(items: list[_Item], height: float) -> list[list[_Item]] | None:
    """The region cut at its widest gutter into two sides that both read as columns of text, or None."""
    spans = sorted(items, key=lambda i: i.x0)
    gutters, right = [], spans[0].x1
    for item in spans[1:]:
        if item.x0 - right >= GUTTER * height:
            gutters.append((item.x0 - right, (right + item.x0) / 2))
        right = max(right, item.x1)
    for _, x in sorted(gutters, reverse=True):
        sides = [[i for i in items if i.x1 <= x], [i for i in items if i.x0 >= x]]
        if all(_is_column(side, height) for side in sides):
            return sides
    return None


def _is_column(items: list[_Item], height: float) -> bool:
    rows = _rows(items)
    widths = sorted(max(i.x1 for i in row) - min(i.x0 for i in row) for row in rows)
    return len(rows) >= COLUMN_ROWS and widths[len(widths) // 2] >= COLUMN_WIDTH * height


def _rows(items: list[_Item]) -> list[list[_Item]]:
    """The items in rows, roughly (for counting and measuring only): top to bottom, an item whose
    centre lies above the bottom of the row's first item joins that row."""
    out: list[list[_Item]] = []
    for item in sorted(items, key=lambda i: i.y0 + i.y1):
        if out and (item.y0 + item.y1) / 2 < out[-1][0].y1:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def _bands(items: list[_Item], height: float) -> list[list[_Item]]:
    """The region cut across at the gaps between its rows that end paragraphs, top to bottom (a gap
    is negative where the boxes of two rows overlap)."""
    rows = _rows(items)
    gaps, bottom = [], max(i.y1 for i in rows[0])
    for row in rows[1:]:
        gaps.append(min(i.y0 for i in row) - bottom)
        bottom = max(bottom, *(i.y1 for i in row))
    if not gaps:
        return [items]
    usual = float(np.percentile(gaps, 25)) if len(gaps) > 1 else 0.0  # the spacing of a paragraph's lines
    limit = max(PARAGRAPH_GAP * height, SPACING * usual)
    out = [list(rows[0])]
    for gap, row in zip(gaps, rows[1:]):
        if gap >= limit:
            out.append(list(row))
        else:
            out[-1].extend(row)
    return out
