"""The model registry drives the generic code: several families may embed one ingest kind, and the
lists the faces show (document modes, embeddings models) come from the families. No server needed."""

from __future__ import annotations

import numpy as np
from tritonclient.utils import InferenceServerException

from indexer.kinds import Photos
from search.models import FAMILIES, for_kind, for_mode
from search.models.base import Encoded, Family, Vector
from search.services.embeddings import MODELS
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
    assert MODES == ("auto", *(m for f in for_kind("documents") for m in f.modes))
    assert {m.name for m in MODELS} == {m.name for f in FAMILIES for m in f.embedding_models}
    assert all(for_mode(m) is not None for m in MODES[1:])
