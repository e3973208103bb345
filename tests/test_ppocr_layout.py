"""Blocks as read (search.models.ppocr_layout through ``as_read``): columns left to right, each
column's paragraphs top to bottom, a receipt's rows kept whole; the blocks in the services' answer
(``TextRead.blocks``, a blank line between them in its text) and in the text ingest stores. No
server: the boxes are the served model's shape (four corners, tl tr br bl)."""

from __future__ import annotations

from search.models.base import read_as_text
from search.models.ppocr import TextLine, as_read
from search.services.results import TextRead


def word(text: str, x0: float, top: float, width: float, height: float = 30, slope: float = 0.0) -> TextLine:
    dy = slope * width
    return TextLine(text, 0.9, [[x0, top], [x0 + width, top + dy], [x0 + width, top + dy + height], [x0, top + height]])


def column(x0: float, top: float, rows: list[str], pitch: float = 40, slope: float = 0.0) -> list[TextLine]:
    """Rows of words 12 px apart (as v5's word boxes), ``pitch`` px from row to row."""
    out = []
    for k, row in enumerate(rows):
        x = x0
        for w in row.split():
            width = 18 * len(w)
            out.append(word(w, x, top + pitch * k + slope * x, width, slope=slope))
            x += width + 12
    return out


def read(served: list[TextLine]) -> list[tuple[int, str]]:
    return [(line.block, line.text) for line in as_read(served)]


LEFT = ["the left column starts", "here and it runs on", "down the page"]
RIGHT = ["the right column then", "goes on from its top", "to its end"]


def test_two_columns_read_one_after_the_other_not_row_by_row():
    served = column(20, 100, LEFT) + column(520, 100, RIGHT)  # a gutter of ~100 px, 3 text heights
    assert read(served[::-1]) == [(0, t) for t in LEFT] + [(1, t) for t in RIGHT]


def test_paragraphs_are_blocks_top_to_bottom_and_a_slightly_turned_page_keeps_them():
    first, second = ["a first paragraph of", "two lines"], ["and a second one", "after a blank line"]
    for slope in (0.0, 0.04):
        served = column(20, 100, first, slope=slope) + column(20, 100 + 40 * 3, second, slope=slope)
        assert read(served) == [(0, t) for t in first] + [(1, t) for t in second], slope


def test_a_receipts_rows_stay_whole_and_a_title_stays_above_columns_whose_paragraphs_end_level():
    names = column(20, 100, ["Printer paper", "Desk lamp", "Coffee beans", "Total"])
    prices = column(600, 100, ["19.90", "42.50", "9.00", "71.40"])
    assert read(prices + names) == [(0, "Printer paper 19.90"), (0, "Desk lamp 42.50"), (0, "Coffee beans 9.00"),
                                    (0, "Total 71.40")]
    title = "a title that runs right across both of the columns below"
    left = column(20, 100, LEFT[:2]) + column(20, 220, LEFT[2:] * 2)
    right = column(520, 100, RIGHT[:2]) + column(520, 220, RIGHT[2:] * 2)
    got = read(right + left + column(20, 20, [title]))
    assert [text for _, text in got] == [title, *LEFT[:2], *LEFT[2:] * 2, *RIGHT[:2], *RIGHT[2:] * 2]
    assert [block for block, _ in got] == [0, 1, 1, 2, 2, 3, 3, 4, 4]  # paragraphs of a column: blocks of their own


def test_blocks_in_the_answer_and_paragraph_breaks_in_the_stored_text():
    lines = as_read(column(20, 100, LEFT) + column(520, 100, RIGHT))
    assert read_as_text(lines) == "\n".join(LEFT) + "\n\n" + "\n".join(RIGHT)
    other = {"text": "p2", "score": 1.0, "page": 2, "box": [[0, 0], [9, 0], [9, 9], [0, 9]]}  # no block: block 0
    got = TextRead([{**line.as_dict(), "page": 1} for line in lines] + [other], "PP-OCR", pages=2)
    blocks = got.blocks
    assert [(b["page"], b["lines"], b["text"]) for b in blocks] == [(1, [0, 1, 2], "\n".join(LEFT)),
                                                                    (1, [3, 4, 5], "\n".join(RIGHT)), (2, [6], "p2")]
    left = blocks[0]["box"]
    assert left[0] == [20.0, 100.0] and left[2][1] == 100 + 40 * 2 + 30 and left[2][0] < 520
    assert got.text == "\n".join(LEFT) + "\n\n" + "\n".join(RIGHT) + "\n\np2"
    assert got.as_dict()["blocks"] == blocks
    kept = got.confident(0.95)  # the lines under the score are left out, the blocks follow
    assert kept.blocks == [{"page": 2, "lines": [0], "text": "p2", "box": other["box"]}] and kept.text == "p2"
