"""load_document: text and markdown, what every format shares (empty, unsupported, too much text,
garbage), and the parse budgets; one clear line for bad files. HTML, PDF and DOCX themselves:
tests/test_html_pdf_docx.py."""

from __future__ import annotations

import codecs
import io
import random
import time
import zipfile

import pytest
from attack_corpus import docx_with_body, docx_with_empty_paragraphs, docx_with_wide_cell, html_with_elements, pdf_with_pages
from doc_fixtures import make_docx, make_html, make_pdf
from document_helpers import reason, text_of

from indexer.loaders import DOCUMENT_SUFFIXES, BadDocument, LoadedDocument, Page, load_document


def test_document_suffixes():
    assert DOCUMENT_SUFFIXES == {".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"}


# --- text and markdown ---

def test_plain_text_is_one_page_titled_by_its_first_line():
    # Before: title None. '#' means nothing in .txt: the line is the title as it is.
    assert load_document(".txt", b"\n  \n # not a   heading\n\nhello\r\n") == LoadedDocument(
        "# not a heading", [Page(None, "\n  \n # not a   heading\n\nhello\n")], "utf-8")


def test_plain_text_title_is_bounded():
    doc = load_document(".txt", ("word " * 10_000 + "\nsecond line").encode())
    assert doc.title == ("word " * 23).strip() + "…" and len(doc.title) <= 120
    assert load_document(".txt", b"x" * 1_000_000).title == "x" * 119 + "…"
    assert load_document(".md", b"# " + b"y" * 500_000 + b"\n\ntext").title == "y" * 119 + "…"


@pytest.mark.parametrize("suffix", [".md", ".markdown", ".MD"])
def test_markdown_title_is_its_first_h1(suffix):
    data = b"```sh\n# install first\n```\n\n## Intro\n\n# Real Title\n\nbody"
    doc = load_document(suffix, data)
    assert doc.title == "Real Title"
    assert doc.pages == [Page(None, data.decode())]


def test_text_errors_are_the_text_loaders():
    assert reason(".md", b"\xef\xbb\xbfcaf\xe9") == "not valid UTF-8 (byte 0xe9 at offset 6)"
    assert reason(".txt", bytes(range(256)) * 4) == "binary content, not text"


@pytest.mark.parametrize("suffix", [".txt", ".md", ".html"])
def test_encoding_is_recorded(suffix):
    # Before: None for every format (no such field), and cp1252 text was refused.
    text = "Le café – naïve ‘quotes’ “and” more… 5 €"
    assert load_document(suffix, text.encode("cp1252")).encoding == "cp1252"
    assert load_document(suffix, text.encode("utf-8")).encoding == "utf-8"
    assert load_document(suffix, text.encode("utf-16-le")).encoding == "utf-16-le"
    assert load_document(suffix, codecs.BOM_UTF16_BE + text.encode("utf-16-be")).encoding == "utf-16"


def test_encoding_of_html_from_its_meta():
    assert load_document(".html", make_html("<p>café</p>", charset="latin1")).encoding == "cp1252"
    assert load_document(".pdf", make_pdf(["x"])).encoding is None
    assert load_document(".docx", make_docx([("p", "x")])).encoding is None


# --- every format ---

@pytest.mark.parametrize("suffix", sorted(DOCUMENT_SUFFIXES))
def test_empty_file(suffix):
    assert reason(suffix, b"") == "empty file"


@pytest.mark.parametrize("suffix", [".doc", ".rtf", "", ".pdf.bak"])
def test_unsupported_type(suffix):
    assert reason(suffix, b"anything") == f"unsupported file type '{suffix}'"


def test_suffix_case_does_not_matter():
    assert load_document(".PDF", make_pdf(["upper"])).pages[0].text == "upper"


@pytest.mark.parametrize("suffix, data", [
    (".txt", b"x" * 101),
    (".html", make_html("<p>" + "x" * 101 + "</p>")),
    (".pdf", make_pdf(["x" * 50, "y" * 51])),  # the limit counts every page
    (".docx", make_docx([("p", "x" * 101)])),
], ids=["txt", "html", "pdf", "docx"])
def test_too_much_text(suffix, data):
    assert reason(suffix, data, max_chars=100) == "too much text: 101 characters > 100 limit (split the file)"
    assert sum(len(p.text) for p in load_document(suffix, data, max_chars=101).pages) == 101


def test_default_text_limit_message():
    msg = reason(".txt", b"ab" * 2_500_001)
    assert msg == "too much text: 5,000,002 characters > 5,000,000 limit (split the file)"


@pytest.mark.parametrize("suffix", sorted(DOCUMENT_SUFFIXES))
@pytest.mark.parametrize("seed", range(3))
def test_garbage_only_ever_raises_bad_document(suffix, seed):
    data = random.Random(seed).randbytes(2000)
    for prefix in (b"", b"%PDF-1.4\n", b"PK\x03\x04", b"<html>"):
        try:
            load_document(suffix, prefix + data)
        except BadDocument as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 200


# --- budgets: a file that would cost too much to parse is "too complex", and says which limit ---

def timed_reason(suffix: str, data: bytes, **kw) -> tuple[str, float]:
    started = time.perf_counter()
    msg = reason(suffix, data, **kw)
    return msg, time.perf_counter() - started


def test_docx_paragraphs_cost_linear_time():
    # Before: paragraph.style scanned every style for each paragraph, ~190 s for these 100,000.
    data = docx_with_empty_paragraphs(100_000, "Only this paragraph has text.")
    assert len(data) < 60_000
    started = time.perf_counter()
    assert text_of(load_document(".docx", data)) == "Only this paragraph has text."
    assert time.perf_counter() - started < 15


def test_docx_element_bomb():
    data = docx_with_empty_paragraphs(2_000_000)  # 12 MB of XML in ~50 KB
    assert len(data) < 100_000
    msg, seconds = timed_reason(".docx", data)
    assert msg == "too complex: more than 500,000 XML elements (limit SEARCH_MAX_PARSE_ELEMENTS)"
    assert seconds < 5
    assert reason(".docx", docx_with_empty_paragraphs(2_000), max_elements=1_000).startswith("too complex: more than 1,000 XML")


def test_docx_cell_spanning_two_billion_columns():
    # Before: python-docx's row.cells yielded the cell once per spanned column, 2*10^9 times.
    started = time.perf_counter()
    assert text_of(load_document(".docx", docx_with_wide_cell(2_000_000_000, "wide cell"))) == "wide cell"
    assert time.perf_counter() - started < 5


def test_docx_tall_vertical_merge():
    # Before: python-docx walked up the merge recursively for every row: "broken DOCX: maximum recursion depth exceeded".
    rows = ['<w:tr><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p><w:r><w:t>merged</w:t></w:r></w:p></w:tc>'
            '<w:tc><w:p><w:r><w:t>row 0</w:t></w:r></w:p></w:tc></w:tr>']
    rows += [f'<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc><w:tc><w:p><w:r><w:t>row {i}</w:t></w:r></w:p></w:tc></w:tr>'
             for i in range(1, 3000)]
    data = docx_with_body("<w:tbl><w:tblGrid><w:gridCol/><w:gridCol/></w:tblGrid>" + "".join(rows) + "</w:tbl>")
    assert text_of(load_document(".docx", data)) == "\n".join(f"merged | row {i}" for i in range(3000))


def test_html_element_bomb():
    msg, seconds = timed_reason(".html", html_with_elements(1_000_000))
    assert msg == "too complex: more than 500,000 HTML elements (limit SEARCH_MAX_PARSE_ELEMENTS)"
    assert seconds < 5
    assert text_of(load_document(".html", html_with_elements(1_000, "fine"), max_elements=1_010)) == "fine"


def test_pdf_page_bomb():
    msg, seconds = timed_reason(".pdf", pdf_with_pages(5_000))
    assert msg == "too complex: 5,000 pages > 2,000 (limit SEARCH_MAX_PDF_PAGES)"
    assert seconds < 5
    # A page tree whose /Count says 1 is walked and counted.
    assert reason(".pdf", pdf_with_pages(5_000, declared=1)) == msg
    assert reason(".pdf", pdf_with_pages(30), max_pages=20) == "too complex: 30 pages > 20 (limit SEARCH_MAX_PDF_PAGES)"


def test_pdf_object_limit():
    assert reason(".pdf", pdf_with_pages(1_500), max_elements=1_000) == \
        "too complex: more than 1,000 PDF objects (limit SEARCH_MAX_PARSE_ELEMENTS)"


@pytest.mark.parametrize("suffix, make", [
    (".html", lambda: html_with_elements(400_000)),  # under the element limit, ~10 s to parse
    (".docx", lambda: docx_with_empty_paragraphs(400_000)),
    (".pdf", lambda: pdf_with_pages(1_900)),
], ids=["html", "docx", "pdf"])
def test_cpu_time_budget(suffix, make):
    data = make()
    msg, seconds = timed_reason(suffix, data, max_seconds=0.01)
    assert msg == "too complex: parsing took over 0.01 s of CPU time (limit SEARCH_MAX_PARSE_SECONDS)"
    assert seconds < 10  # CPU time: wall time is longer when the cores are shared


def with_body_renamed(data: bytes) -> bytes:
    """The package with its body part renamed word/body.bin, relationships and content types to match."""
    src = zipfile.ZipFile(io.BytesIO(data))
    renamed = {"word/document.xml": "word/body.bin", "word/_rels/document.xml.rels": "word/_rels/body.bin.rels"}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for item in src.infolist():
            part = src.read(item.filename)
            if item.filename in ("[Content_Types].xml", "_rels/.rels"):
                part = part.replace(b"word/document.xml", b"word/body.bin")
            z.writestr(renamed.get(item.filename, item.filename), part)
    return out.getvalue()


def test_docx_bomb_in_a_part_not_named_xml():
    # python-docx finds the body through the package's relationships and content types, whatever its name.
    assert text_of(load_document(".docx", with_body_renamed(docx_with_empty_paragraphs(10, "renamed body")))) == "renamed body"
    bomb = with_body_renamed(docx_with_empty_paragraphs(2_000_000))
    assert "word/document.xml" not in zipfile.ZipFile(io.BytesIO(bomb)).namelist()
    msg, seconds = timed_reason(".docx", bomb)
    assert msg.startswith("too complex: more than 500,000 XML elements") and seconds < 5
