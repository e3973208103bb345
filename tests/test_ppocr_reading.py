"""Text as people read it (search.models.ppocr_reading, ``as_read``): the served model's boxes of one
row joined left to right with spaces, rows top to bottom, the boxes kept as words; the v5 dictionary
file read as RapidOCR reads it. No server: the boxes are the served model's shape (four corners, tl tr br bl)."""

from __future__ import annotations

from search.models.export.ppocr import SOURCES, V4, V5, _dictionary, find_models
from search.models.ppocr import TextLine, as_read


def word(text: str, x0: float, top: float, width: float, height: float = 30, slope: float = 0.0) -> TextLine:
    dy = slope * width
    return TextLine(text, 0.9, [[x0, top], [x0 + width, top + dy], [x0 + width, top + dy + height], [x0, top + height]])


def texts(lines: list[TextLine]) -> list[str]:
    return [line.text for line in as_read(lines)]


def test_words_of_a_row_are_one_line_left_to_right_and_rows_top_to_bottom():
    # as RapidOCR orders them (by top, then left within 10 px): "9.00" sits 12 px higher than "Total:",
    # so it came first, and the second row's words came before the first row's last one
    served = [word("9.00", 400, 88, 60), word("levels", 20, 40, 80), word("that", 110, 46, 50),
              word("Total:", 20, 100, 70), word("the", 170, 42, 40)]
    got = as_read(served)
    assert [line.text for line in got] == ["levels that the", "Total: 9.00"]
    assert [w.text for w in got[1].words] == ["Total:", "9.00"]  # the served boxes kept, in reading order
    total = got[1].as_dict()
    assert total["box"] == [[20, 100], [460, 88], [460, 118], [20, 130]] and len(total["words"]) == 2
    assert "words" not in total["words"][0] and abs(total["score"] - 0.9) < 1e-9


def test_a_slightly_turned_page_keeps_its_rows():
    # 3° of slope: the last word of the first row is lower than the first word of the second row's top
    slope = 0.05
    row1 = [word(w, 20 + 220 * k, 100 + 220 * k * slope, 200, slope=slope) for k, w in enumerate(["alpha", "beta", "gamma", "delta"])]
    row2 = [word(w, 20 + 220 * k, 145 + 220 * k * slope, 200, slope=slope) for k, w in enumerate(["one", "two", "three", "four"])]
    assert texts(row2[::-1] + row1) == ["alpha beta gamma delta", "one two three four"]


def test_one_word_cut_in_two_boxes_gets_no_space_but_neighbouring_words_do():
    # unclipped boxes of words a space apart overlap a little; a word found twice overlaps by more than its height
    assert texts([word("Grüße", 20, 10, 100), word("aus", 110, 10, 60)]) == ["Grüße aus"]
    assert texts([word("Stra", 20, 10, 100), word("ße", 70, 10, 60)]) == ["Straße"]
    assert texts([]) == []


def test_a_dictionary_file_is_read_as_rapidocr_reads_it(tmp_path):
    from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode

    path = tmp_path / "dict.txt"
    path.write_bytes("a\r\n\u2028\nß\n€\n\x85\n".encode())  # line breaks str.splitlines knows, readlines does not
    assert _dictionary(path) == CTCLabelDecode(character_path=str(path)).character == ["blank", "a", "\u2028", "ß", "€", "\x85", " "]


def test_the_offline_sources():
    assert SOURCES == {"ppocrv5": V5, "ppocrv4": V4, "package": V4}  # "package" keeps meaning what it built before
    models, dictionary, config = find_models("ppocrv5")
    chars = _dictionary(dictionary)
    assert len(chars) == 18_383 + 2 and all(c in chars for c in "äöüßçñé€ÄÖÜ") and config.name == "ppocrv5.yaml"
    assert all(p.exists() for p in models.values())
    assert find_models("package") == find_models("ppocrv4")


def test_a_page_read_upside_down_comes_in_the_turned_pages_order():
    # most boxes turned: the row lowest in the image is read first, its rightmost box first
    served = [TextLine(w.text, w.score, w.box, turned=True) for w in
              [word("Total", 300, 10, 80), word("9.00", 20, 10, 60), word("levels", 400, 100, 80), word("that", 200, 100, 60)]]
    got = as_read(served)
    assert [line.text for line in got] == ["levels that", "Total 9.00"]
    assert got[0].turned and got[0].box == [[200, 100], [480, 100], [480, 130], [200, 130]]  # the image's own corners
