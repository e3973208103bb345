"""Bad and odd document files, made at test time (nothing large is committed): parse bombs, bad
encodings, a giant word, wrong extensions, broken and empty files, next to a few good files.

write_corpus(folder) writes them all and says, for each file, what ingest must do with it: the
good ones must be searchable (a query that finds each), the bad ones reported with a reason."""

from __future__ import annotations

import codecs
import io
import random
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import docx
from doc_fixtures import make_docx, make_html, make_pdf, make_scanned_pdf

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def docx_with_body(body: str) -> bytes:
    """python-docx's blank document with ``body`` (raw WordprocessingML) as its body."""
    buf = io.BytesIO()
    docx.Document().save(buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "word/document.xml":
                xml = data.decode()
                start = xml.index("<w:body>") + len("<w:body>")
                data = (xml[:start] + body + xml[start:]).encode()
            z.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _p(text: str) -> str:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>"


def docx_with_empty_paragraphs(n: int, text: str = "Some text before the empty paragraphs.") -> bytes:
    """One paragraph of text, then ``n`` empty ones: 2 million zip to about 40 KB."""
    return docx_with_body(_p(text) + "<w:p/>" * n)


def docx_with_wide_cell(span: int = 2_000_000_000, text: str = "Quarterly budget table for the facilities team.") -> bytes:
    """A table cell that claims to span ``span`` grid columns (python-docx's row.cells loops that often)."""
    cell = f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>{_p(text)}</w:tc>'
    return docx_with_body(f"<w:tbl><w:tblGrid><w:gridCol/></w:tblGrid><w:tr>{cell}</w:tr></w:tbl>")


def html_with_elements(n: int, text: str = "A page of many tags.") -> bytes:
    return f"<html><body><p>{text}</p>".encode() + b"<b></b>" * n + b"</body></html>"


def html_nested(depth: int, text: str) -> bytes:
    return b"<html><body>" + b"<div>" * depth + text.encode() + b"</div>" * depth + b"</body></html>"


def pdf_with_pages(n: int, *, declared: int | None = None) -> bytes:
    """A hand-written PDF of ``n`` empty pages (fpdf2 takes minutes for thousands); ``declared``:
    the page count the page tree claims, when it should lie."""
    kids = " ".join(f"{i + 3} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Count {n if declared is None else declared} /Kids [{kids}] >>".encode()]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>"] * n
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for k, obj in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{k} 0 obj\n".encode() + obj + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out.write(b"".join(f"{off:010d} 00000 n \n".encode() for off in offsets))
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def _zip_of(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(name, data)
    return buf.getvalue()


@dataclass
class Corpus:
    good: dict[str, str] = field(default_factory=dict)  # file name -> a query that must find it
    bad: dict[str, str] = field(default_factory=dict)  # file name -> how its reason starts


# Ten 2,000-character pieces. Not the 2 MB of the original report (the chunker's own tests use
# that): ingest keeps every chunk's BGE-M3 ColBERT vectors (~500 x 1024 floats, ~17 MB as Python
# lists) until its file is done, so 1,000 pieces would need ~17 GB.
GIANT_WORD_CHARS = 20_000


def write_corpus(folder: Path) -> Corpus:
    folder.mkdir(parents=True, exist_ok=True)
    c = Corpus()

    def good(name: str, data: bytes, query: str) -> None:
        (folder / name).write_bytes(data)
        c.good[name] = query

    def bad(name: str, data: bytes, reason: str) -> None:
        (folder / name).write_bytes(data)
        c.bad[name] = reason

    # Good files, one distinct topic each.
    good("bicycles.md", b"# Bicycle storage\n\nBicycles are kept in the locked basement cage; "
         b"security hands out the key cards for it.\n", "where can I store my bicycle")
    good("fire-drill.pdf", make_pdf(["Fire drill\n\nWhen the alarm sounds, leave by the stairs and gather "
                                     "at the fire assembly point in the north car park."]),
         "fire alarm assembly point")
    good("canteen.docx", make_docx([("h1", "Canteen"), ("p", "The canteen serves lunch from noon until two; "
                                     "vegetarian dishes are marked green on the menu.")]),
         "canteen lunch opening hours")
    good("library.html", make_html("<h1>Library loans</h1><p>Books from the office library may be borrowed "
                                   "for three weeks and renewed once at the desk.</p>", title="Library"),
         "how long can I borrow a library book")
    # Odd but good: legacy and BOM-less encodings, deep nesting, a giant word, a huge cell span.
    good("espresso-cp1252.txt", ("Espresso machine – the café’s “naïve” barista guide\n\nDescale the espresso "
                                 "machine every Friday; the crème cleaner is in the café cupboard.\n").encode("cp1252"),
         "descale the espresso machine")
    good("resume-latin1.md", ("# Résumé workshop\n\nThe careers team reviews résumés every Thursday afternoon; "
                              "bring a printed copy and your cover letter. Entrée is free.\n").encode("latin-1"),
         "careers team reviews resumes")
    good("garage-utf16le.txt", ("Parking garage hours\n\nThe parking garage closes at midnight and reopens "
                                "at six in the morning. Night staff use the side gate.\n").encode("utf-16-le"),
         "when does the parking garage close")
    good("badges-utf16be.md", ("# Visitor badges\n\nVisitors collect a temporary badge at reception "
                               "and return it when they leave the building.\n").encode("utf-16-be"),
         "visitor badge at reception")
    good("nested.html", html_nested(20_000, "Deep inside: the server room temperature alarm rings above 27 degrees."),
         "server room temperature alarm")
    good("telescope.txt", b"Telescope maintenance log\n\nClean the telescope mirror twice a year.\n\n"
         + b"a" * GIANT_WORD_CHARS + b"\n", "telescope mirror cleaning")
    good("budget-table.docx", docx_with_wide_cell(), "facilities quarterly budget")

    # Bombs: stopped by the element and page limits before the expensive part.
    bad("bomb.docx", docx_with_empty_paragraphs(2_000_000), "too complex: more than 500,000 XML elements")
    bad("bomb.html", html_with_elements(1_000_000), "too complex: more than 500,000 HTML elements")
    bad("bomb.pdf", pdf_with_pages(5_000), "too complex: 5,000 pages > 2,000")
    bad("lying-bomb.pdf", pdf_with_pages(5_000, declared=1), "too complex: 5,000 pages > 2,000")
    # Broken, empty, mislabelled.
    for suffix in (".txt", ".md", ".html", ".pdf", ".docx"):
        bad(f"empty{suffix}", b"", "empty file")
    bad("blank.txt", b" \n\t\n  \n", "empty file")
    pdf = make_pdf(["one", "two", "three"])
    bad("truncated.pdf", pdf[: len(pdf) // 2], "broken PDF: truncated (no %%EOF marker)")
    bad("text-named.pdf", b"just some words in a file with the wrong name\n", "not a PDF (wrong extension?)")
    bad("zip-named.docx", _zip_of("notes.txt", b"hello"), "broken DOCX: ")
    bad("text-named.docx", b"plain text is not a zip\n", "not a DOCX (wrong extension?)")
    bad("truncated.docx", make_docx([("p", "hello " * 500)])[:1500], "broken DOCX: ")
    good("scanned.pdf", make_scanned_pdf(), "a scanned page, no text layer")  # no text layer: read by OCR
    bad("encrypted.pdf", make_pdf(["secret"], password="hunter2"), "encrypted PDF: needs a password")
    bad("hidden-only.html", make_html("<script>x()</script><div hidden>secret</div>"), "no visible text")
    # Binary content named as text, and bytes no encoding explains.
    bad("binary.txt", bytes(range(256)) * 40, "binary content, not text")
    bad("random.md", random.Random(0).randbytes(20_000), "binary content, not text")
    rng = random.Random(0)
    bad("noise.txt", bytes(rng.choice([*range(0x20, 0x7f), *range(0x80, 0x100)]) for _ in range(2000)),
        "unknown encoding: not UTF-8")
    bad("utf8-bom-then-latin1.md", codecs.BOM_UTF8 + "café".encode("latin-1"), "not valid UTF-8")
    bad("too-much-text.txt", b"ab " * 1_700_000, "too much text: ")
    return c
