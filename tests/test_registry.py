"""The model registry drives the generic code: several families may embed one ingest kind, and the
lists the faces show (document modes, embeddings models) come from the families. No server needed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from tritonclient.utils import InferenceServerException

from indexer.kinds import Photos
from search.api.schemas import DocumentQuery
from search.models import FAMILIES, for_mode
from search.models.base import Encoded, Family, Vector
from search.services.embeddings import MODELS, embedding_model
from search.services.options import MODES


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
