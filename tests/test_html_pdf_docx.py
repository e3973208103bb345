"""load_document on HTML, PDF and DOCX: text, titles, pages and headings, and each format's bad files as one clear line."""

from __future__ import annotations

import io
import re
import zipfile

import docx
import pytest
from doc_fixtures import UNICODE_FONT, make_docx, make_html, make_pdf, make_scanned_pdf
from document_helpers import reason, text_of

from indexer.loaders import Page, load_document
from indexer.loaders import docx as docx_loader

# --- HTML ---

def test_html_structure():
    body = """
      <h1>Main  heading</h1>
      <p>First   paragraph,
         wrapped <b>bold</b> and <a href="#">linked</a>.</p>
      <div>A div<br>with a break</div>
      <h3>Sub</h3>
      <ul><li>one</li><li>two <em>items</em></li></ul>
      <table><tr><th>Name</th><th>Qty</th></tr><tr><td>apple</td><td>3</td></tr></table>
      <pre>code  line</pre>
    """
    doc = load_document(".html", make_html(body, title="The  Page\nTitle"))
    assert doc.title == "The Page Title"
    assert doc.pages == [Page(None, (
        "# Main heading\n\n"
        "First paragraph, wrapped bold and linked.\n\n"
        "A div\nwith a break\n\n"
        "### Sub\n\n"
        "- one\n- two items\n\n"
        "Name | Qty\napple | 3\n\n"
        "code line"))]


def test_html_title_falls_back_to_first_h1():
    assert load_document(".htm", make_html("<h2>Second</h2><h1>First</h1><p>x</p>")).title == "First"
    assert load_document(".html", make_html("<p>no headings</p>")).title is None


def test_html_hidden_text_is_dropped():
    head = "<style>.a { color: red }</style><script>var headScript = 1;</script>"
    body = """<p>visible</p>
      <script>alert("script text")</script><style>p { color: blue }</style>
      <noscript>noscript text</noscript><template><p>template text</p></template>
      <div hidden><p>hidden attribute text</p></div><span aria-hidden="true">aria text</span>
      <p style="display: none">display none text</p><svg><text>svg text</text></svg>
      <!-- comment text --><p>also visible</p>"""
    doc = load_document(".html", make_html(body, head_extra=head))
    assert text_of(doc) == "visible\n\nalso visible"


def test_html_without_visible_text():
    assert reason(".html", make_html("<script>x()</script><div hidden>secret</div>", title="Only a title")) == "no visible text"


@pytest.mark.parametrize("charset", ["windows-1252", "ISO-8859-1", "latin1"])
def test_html_charset_from_meta(charset):
    assert text_of(load_document(".html", make_html("<p>café</p>", charset=charset))) == "café"


def test_html_latin1_label_means_windows_1252():
    # Browsers read iso-8859-1 pages as windows-1252, so 0x93/0x94 are curly quotes, not controls.
    data = b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><p>\x93caf\xe9\x94</p>'
    assert text_of(load_document(".html", data)) == "“café”"


def test_html_bom_wins_over_meta():
    data = "\ufeff<meta charset='windows-1252'><p>Grüße</p>".encode("utf-16-le")
    assert text_of(load_document(".html", data)) == "Grüße"


def test_html_invalid_bytes():
    # Undeclared and not UTF-8: detected (before: "not valid UTF-8 (byte 0xe9 at offset 6)").
    assert text_of(load_document(".html", b"<p>caf\xe9 cr\xe8me br\xfbl\xe9e</p>")) == "café crème brûlée"
    assert reason(".html", b'<meta charset="utf-8"><p>\xff</p>') == "not valid UTF-8 (byte 0xff at offset 25)"
    assert reason(".html", b'<meta charset="windows-1252"><p>\x81</p>') == "not valid windows-1252 (byte 0x81 at offset 32)"


@pytest.mark.parametrize("charset", ["klingon-8", "base64", "rot13", "undefined"])
def test_html_unknown_charset(charset):
    # Python's bytes-to-bytes codecs and its "undefined" codec are not text encodings either.
    data = f'<meta charset="{charset}"><p>x</p>'.encode()
    assert reason(".html", data) == f"unknown charset '{charset}'"


def test_html_non_english():
    body = "<h1>Überschrift</h1><p>Grüße aus Köln</p><p>Καλημέρα κόσμε</p><p>你好，世界。</p>"
    doc = load_document(".html", make_html(body, title="多语言"))
    assert doc.title == "多语言"
    assert text_of(doc) == "# Überschrift\n\nGrüße aus Köln\n\nΚαλημέρα κόσμε\n\n你好，世界。"


def test_html_lists_and_tables_are_one_paragraph_each():
    body = """<ul><li><p>one</p></li><li>two<ol><li>two.a</li></ol></li></ul><ul><li>other list</li></ul>
      <table><thead><tr><th>h</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table>"""
    assert text_of(load_document(".html", make_html(body))) == "- one\n- two\n- two.a\n\n- other list\n\nh\n1"


def test_html_deep_nesting_does_not_overflow():
    assert text_of(load_document(".html", b"<div>" * 5000 + b"deep")) == "deep"


# --- PDF ---

def test_pdf_pages_and_title():
    data = make_pdf(["Page one text.\n\nSecond paragraph.", "", "Page three."], title="A PDF Title")
    doc = load_document(".pdf", data)
    assert doc.title == "A PDF Title"
    assert [p.number for p in doc.pages] == [1, 3]  # the blank page is left out
    assert "Page one text." in doc.pages[0].text and "Second paragraph." in doc.pages[0].text
    assert doc.pages[1].text == "Page three."


def test_pdf_without_title():
    assert load_document(".pdf", make_pdf(["x y z"])).title is None


def test_pdf_text_is_normalised():
    page = load_document(".pdf", make_pdf(["wide     gap\n\n\n\n\nafter"])).pages[0].text
    assert "  " not in page and "\n\n\n" not in page
    assert all(line == line.strip() for line in page.split("\n"))


@pytest.mark.skipif(not UNICODE_FONT.exists(), reason="no Unicode TTF for fpdf2")
def test_pdf_non_latin1():
    doc = load_document(".pdf", make_pdf(["Grüße aus Köln. Καλημέρα κόσμε."], font_path=UNICODE_FONT))
    assert doc.pages[0].text == "Grüße aus Köln. Καλημέρα κόσμε."


def test_pdf_with_user_password():
    assert reason(".pdf", make_pdf(["secret"], password="hunter2")) == "encrypted PDF: needs a password"


def test_pdf_encrypted_for_the_owner_only_still_loads():
    doc = load_document(".pdf", make_pdf(["readable by anyone"], title="Locked", owner_only=True))
    assert text_of(doc) == "readable by anyone"


def test_scanned_pdf():
    assert reason(".pdf", make_scanned_pdf()) == "no text layer (a scanned PDF? serve an OCR model: `search models build`)"


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_pdf(fraction):
    data = make_pdf(["first page", "second page", "third page"])
    assert reason(".pdf", data[: int(len(data) * fraction)]) == "broken PDF: truncated (no %%EOF marker)"


def test_pdf_with_one_corrupt_page_keeps_the_others():
    data = bytearray(make_pdf(["first page", "second page", "third page"]))
    second_stream = [m.end() for m in re.finditer(rb"stream\n", data)][1]
    data[second_stream + 2:second_stream + 30] = b"A" * 28
    assert [p.text for p in load_document(".pdf", bytes(data)).pages] == ["first page", "third page"]


@pytest.mark.parametrize("data", [
    b"%PDF-1.7\nnothing else\n%%EOF\n",
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n",
    b"%PDF-1.4\n" + bytes(range(256)) * 20 + b"\n%%EOF",
])
def test_broken_pdf(data):
    assert reason(".pdf", data).startswith("broken PDF: ")


def test_random_bytes_named_pdf():
    msg = reason(".pdf", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert msg == r"not a PDF (wrong extension?): starts with b'\x89PNG\r\n\x1a\n\x00\x00\x00\r'"


# --- DOCX ---

def test_docx_in_document_order():
    data = make_docx([
        ("title", "Quarterly Report"),
        ("p", "Intro   paragraph."),
        ("h1", "Results"),
        ("table", [["Region", "Sales"], ["North", "10"], ["South", "20"]]),
        ("p", "After the table."),
        ("h2", "Details"),
        ("h3", "Deeper"),
        ("p", "The end."),
    ])
    doc = load_document(".docx", data)
    assert doc.title == "Quarterly Report"
    assert doc.pages == [Page(None, (
        "# Quarterly Report\n\nIntro paragraph.\n\n# Results\n\n"
        "Region | Sales\nNorth | 10\nSouth | 20\n\n"
        "After the table.\n\n## Details\n\n### Deeper\n\nThe end."))]


def test_docx_title_from_core_properties():
    doc = load_document(".docx", make_docx([("h1", "Heading"), ("p", "x")], title="Metadata Title"))
    assert doc.title == "Metadata Title"


def test_docx_title_falls_back_to_first_h1_or_none():
    assert load_document(".docx", make_docx([("h2", "Minor"), ("h1", "Major")])).title == "Major"
    assert load_document(".docx", make_docx([("p", "plain")])).title is None


def test_docx_merged_cells_and_empty_rows():
    document = docx.Document()
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "wide"
    table.cell(0, 2).text = "narrow"
    table.cell(2, 0).text = "last row"
    buf = io.BytesIO()
    document.save(buf)
    assert text_of(load_document(".docx", buf.getvalue())) == "wide | narrow\nlast row"


def test_docx_non_english():
    doc = load_document(".docx", make_docx([("h1", "Überblick"), ("p", "Καλημέρα κόσμε"), ("table", [["名前", "値"]])]))
    assert text_of(doc) == "# Überblick\n\nΚαλημέρα κόσμε\n\n名前 | 値"


def test_docx_without_text():
    assert reason(".docx", make_docx([("p", ""), ("table", [["", ""]])])) == "no text"


def test_text_named_docx():
    assert reason(".docx", b"just some text") == "not a DOCX (wrong extension?): starts with b'just some te'"


def test_zip_that_is_not_a_docx():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "hello")
    assert reason(".docx", buf.getvalue()).startswith("broken DOCX: ")


def test_docx_that_would_inflate_too_far(monkeypatch):
    monkeypatch.setattr(docx_loader, "MAX_DOCX_XML_BYTES", 1000)  # read where _check_unpacked reads it
    data = make_docx([("p", "x" * 5000)])
    assert reason(".docx", data).startswith("too large unpacked: ")


def test_truncated_docx():
    data = make_docx([("p", "hello " * 1000)])
    assert reason(".docx", data[: len(data) // 2]) == "broken DOCX: File is not a zip file"
