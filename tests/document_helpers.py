"""load_document checks shared by tests/test_document_formats.py and tests/test_html_pdf_docx.py: a bad file's one-line reason, the text."""

from __future__ import annotations

import re

import pytest

from indexer.loaders import BadDocument, LoadedDocument, load_document


def reason(suffix: str, data: bytes, **kw) -> str:
    with pytest.raises(BadDocument) as exc:
        load_document(suffix, data, **kw)
    msg = str(exc.value)
    assert msg and "\n" not in msg and len(msg) < 200
    assert "Traceback" not in msg and not re.search(r"\w+(Error|Exception)\(", msg)
    return msg


def text_of(doc: LoadedDocument) -> str:
    return "\n\n".join(p.text for p in doc.pages)
