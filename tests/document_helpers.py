"""load_document checks shared by tests/test_document_formats.py and tests/test_html_pdf_docx.py: a bad file's one-line reason, the text."""

from __future__ import annotations

import re
from pathlib import Path

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


def long_doc(folder: Path, parts: int = 12) -> Path:
    folder.mkdir(exist_ok=True)
    doc = folder / "long.md"
    doc.write_text("\n\n".join(f"Part {i}: " + " ".join(f"term{(i * 7 + k) % 97}" for k in range(150))
                               for i in range(parts)))
    return doc


def many_docs(root: Path, n: int) -> Path:
    """``n`` short, distinct help-desk notes: enough files for a job that runs a few seconds."""
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"note-{i:04d}.txt").write_text(
            f"Note {i}. Ticket {i * 7919 % 10007} was about printer queue {i % 13} on floor {i % 9}. "
            f"The fix was to restart spooler number {i} and clear job {i * 31}.\n")
    return root
