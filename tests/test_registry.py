"""The model registry drives the generic code: several families may embed one ingest kind, and the
lists the faces show (document modes, embeddings models) come from the families. No server needed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from tritonclient.utils import InferenceServerException

import search.models
from indexer.cli_run import _truncated
from indexer.kinds import KINDS, Photos, make_kind
from indexer.kinds.documents import chunk_tokens
from search.api.schemas import DocumentQuery
from search.config import Settings
from search.errors import BadRequest
from search.models import FAMILIES, MiniLM, for_mode, ingest_kinds
from search.models.base import Encoded, Family, Vector
from search.services.embeddings import MODELS, embedding_model
from search.services.options import MODES
from search.store import images_schema


class _Fake(Family):
    """A family on photos that needs no server: one vector per image, refusing b"bad"."""

    def __init__(self, name: str, value: float) -> None:
        self.family, self.display, self.value = name, name.upper(), value
        self.vectors = {name: Vector("dense", 2)}

    def encode(self, client, items: list) -> Encoded:
        if b"bad" in items:
            raise InferenceServerException("bad image")
        return Encoded([{self.family: np.full(2, self.value, np.float32)} for _ in items])


def test_every_family_on_a_kind_adds_its_vectors(tmp_path):
    kind = Photos(None, tmp_path, [_Fake("one", 1.0), _Fake("two", 2.0)], max_bytes=1, max_pixels=1)
    out = kind.embed([b"a", b"bad", b"c"])
    assert [sorted(v) if v else v for v in out.vectors] == [["one", "two"], None, ["one", "two"]]
    assert out.vectors[2]["two"].tolist() == [2.0, 2.0]
    assert list(out.errors) == [1] and "rejected by the model server" in out.errors[1]


def test_the_faces_lists_come_from_the_registry():
    """The document modes are "auto" then every mode of every family that embeds documents, once
    each, the required family's first; the REST body offers exactly those; every embeddings model
    of every family is listed once and found by its name."""
    documents = [f for f in FAMILIES if "documents" in f.kinds]
    required = [f for f in documents if not f.optional]
    assert len(required) == 1 and MODES[:2] == ("auto", next(iter(required[0].modes)))
    assert sorted(MODES[1:]) == sorted(m for f in documents for m in f.modes)  # each family's, none twice
    assert all(for_mode(m) in documents for m in MODES[1:])
    mode = DocumentQuery.model_json_schema()["properties"]["mode"]
    assert [b["enum"] for b in mode["anyOf"] if "enum" in b] == [list(MODES)]  # the schema offers exactly those
    assert all(DocumentQuery(query="x", mode=m).mode == m for m in MODES)
    with pytest.raises(ValidationError, match="must be one of auto"):
        DocumentQuery(query="x", mode="psychic")
    offered = [m for f in FAMILIES for m in f.embedding_models]
    assert offered and sorted(m.name for m in MODELS) == sorted(m.name for m in offered)
    assert all(embedding_model(m.name) is m for m in offered)


def _owners(path: Path) -> set[str]:
    """The families a file belongs to: its own name or a folder above it starts with the family's."""
    parts = [p.split(".")[0] for p in path.parts]
    return {f.family for f in FAMILIES if any(p == f.family or p.startswith(f.family + "_") for p in parts)}


def _pattern(names: set[str]) -> re.Pattern:
    spelled = ["[-_ ]?".join(re.escape(word) for word in re.split(r"[-_ ]", n)) for n in names]
    return re.compile(r"(?<![a-z0-9.])(?:" + "|".join(spelled) + r")(?![a-z0-9])", re.I)


def test_a_family_is_named_only_in_its_own_files_and_the_registry():
    """Adding a family is its own files plus one registry line (and its weights setting): no other
    module spells a family's name (Family.family, Family.display)."""
    root = Path(__file__).resolve().parent.parent
    registry, config = root / "search/models/__init__.py", root / "search/config.py"
    patterns = {f.family: _pattern({f.family, f.display}) for f in FAMILIES}
    found = []
    files = [p for d in ("search", "indexer", "ui") for p in (root / d).rglob("*.py")]
    for path in [*files, *(root / "triton_repo").rglob("model.py")]:
        if path == registry:
            continue
        rel = path.relative_to(root)
        owners = _owners(rel)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, pattern in patterns.items():
                if name in owners or not pattern.search(line):
                    continue
                if path == config and line.strip().startswith(f"{name}_source:"):
                    continue  # the family's weights setting
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "family names outside their families' files:\n" + "\n".join(found)


class _Psychic(Family):
    """An optional family on documents with a search mode of its own (served by nobody: the lists
    that name modes need no server)."""

    family, display = "psychic_fam", "Psychic"
    kinds, optional = {"documents": "psychic_fam"}, True
    modes, best_mode = {"psychic": "psychic_vec"}, "psychic"
    vectors = {"psychic_vec": Vector("dense", 4)}


def test_a_registered_family_s_mode_is_in_every_list_of_modes(monkeypatch, tmp_path):
    """Registered with one line, a family's mode is offered by the REST/MCP schema, accepted by the
    spec and by the search_mode setting's check, and shown on the page; a mode nobody offers is
    refused in one line that lists the modes, when `search serve` starts too."""
    from search.api import create_app
    from search.services import options
    from ui.app import page_modes

    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, _Psychic()))
    assert options.MODES[0] == "auto" and options.MODES[-1] == "psychic"
    mode = DocumentQuery.model_json_schema()["properties"]["mode"]
    assert [b["enum"] for b in mode["anyOf"] if "enum" in b] == [list(options.MODES)]
    assert DocumentQuery(query="x", mode="psychic").mode == "psychic"
    assert options.check_search_mode("psychic") == "psychic"
    assert [m.doc_mode for m in page_modes() if m.kind == "documents"][-1] == "psychic"
    assert "Documents: psychic" in [m.label for m in page_modes()]
    refusal = f"SEARCH_SEARCH_MODE: must be one of {', '.join(options.MODES)}, got 'telepathic'"
    with pytest.raises(BadRequest) as got:
        options.check_search_mode("telepathic")
    assert str(got.value) == refusal
    with pytest.raises(BadRequest) as got:
        create_app(Settings(data_dir=tmp_path, search_mode="telepathic"))
    assert str(got.value) == refusal
    monkeypatch.undo()
    assert "psychic" not in options.MODES and "psychic" not in [m.doc_mode for m in page_modes()]


class _Narrow(MiniLM):
    """The documents' model with a narrower window: 128 tokens of text and its 2 special ones."""

    display, max_tokens = "Narrow", 130


def test_the_chunk_size_is_bounded_by_the_documents_model_s_window(monkeypatch, tmp_path):
    """Chunks hold at most the window of the family that embeds documents (its tokens less its special
    ones): a larger chunk_tokens is refused in one line naming that family's window, the default is
    cut to it, and a run's note on truncated chunks names it."""
    s = Settings(data_dir=tmp_path, triton_repo=tmp_path / "repo")  # the chunk tokenizer: the weights package's
    assert chunk_tokens(s) == 200 and chunk_tokens(s.model_copy(update={"chunk_tokens": 254})) == 254
    with pytest.raises(BadRequest, match=r"^chunk_tokens .*at most 254, .* MiniLM reads in a chunk \(256 with its 2 "
                                         r"special tokens\), got 255$"):
        chunk_tokens(Settings(data_dir=tmp_path, chunk_tokens=255))
    assert "256 tokens MiniLM reads" in _truncated(3)

    monkeypatch.setattr(search.models, "FAMILIES", tuple(_Narrow() if isinstance(f, MiniLM) else f
                                                         for f in search.models.FAMILIES))
    assert chunk_tokens(s) == 128 and chunk_tokens(s.model_copy(update={"chunk_tokens": 50})) == 50
    with pytest.raises(BadRequest, match=r"at most 128, .* Narrow reads in a chunk \(130 with its 2 special tokens\), got 200$"):
        chunk_tokens(Settings(data_dir=tmp_path, chunk_tokens=200))
    assert _truncated(3) == " (3 truncated to the 130 tokens Narrow reads)"
    kind = make_kind(s, None, "documents", [search.models.required("documents")])
    assert kind.chunker.max_tokens == 128
    chunks = kind.chunker.chunk("word " * 500)
    assert len(chunks) > 1 and all(len(kind.chunker.tokenizer.encode(c.text, add_special_tokens=False).ids) <= 128
                                   for c in chunks)


class _Wide(Family):
    """A family on photos whose vector is as wide as its (fake) served model: ``width``."""

    def __init__(self, name: str, width: int, optional: bool) -> None:
        self.family, self.display, self.width, self.optional = name, name.upper(), width, optional
        self.kinds, self.vectors = {"images": name}, {name: Vector("dense")}

    def encode(self, client, items: list) -> Encoded:
        return Encoded([{self.family: np.ones(self.width, np.float32)} for _ in items])


def test_each_photo_family_s_vector_is_as_wide_as_its_own_model(monkeypatch, tmp_path):
    """The photos' collection gives each vector whose family declares no width its own served width,
    not the first family's."""
    wide, narrow = _Wide("wide", 6, optional=False), _Wide("narrow", 3, optional=True)
    monkeypatch.setattr(search.models, "FAMILIES", (wide, narrow))
    kind = Photos(None, tmp_path, [wide, narrow], max_bytes=1, max_pixels=1)
    assert {n: v.size for n, v in kind.schema.vectors.items()} == {"wide": 6, "narrow": 3}
    assert {n: v.size for n, v in images_schema({"wide": 6}, []).vectors.items()} == {"wide": 6}  # the required one's only


def test_every_ingest_kind_of_the_registry_is_an_indexer_kind():
    assert set(ingest_kinds()) <= set(KINDS) and all(KINDS[k].name == k for k in KINDS)
