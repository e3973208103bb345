"""The served model families: one module each (client code; export code in ``export/``), one
registry here. Adding a family = its module, its triton_repo/ folders and one line in FAMILIES."""

from __future__ import annotations

from pathlib import Path

from search.models.base import PRECISIONS, BuildReport, Encoded, Family, Int8Quality, Vector, WeightsUnavailable
from search.models.bge_m3 import BGEM3
from search.models.clip import CLIP
from search.models.minilm import MiniLM
from search.models.ofa import OFA
from search.models.ppocr import PPOCR

FAMILIES: tuple[Family, ...] = (
    MiniLM(),
    CLIP(),
    BGEM3(),
    OFA(),
    PPOCR(),
)


def family(name: str) -> Family:
    """The family called ``name`` ("minilm", "clip", "bge_m3", "ofa")."""
    for fam in FAMILIES:
        if fam.family == name:
            return fam
    raise KeyError(f"no model family '{name}' (families: {', '.join(f.family for f in FAMILIES)})")


def for_kind(kind: str) -> list[Family]:
    """The families whose vectors an ingest kind stores, the one it needs first, optional ones after."""
    return sorted((f for f in FAMILIES if kind in f.kinds), key=lambda f: f.optional)


def for_mode(mode: str) -> Family | None:
    """The family a search mode needs (None: a mode no family claims, e.g. "auto")."""
    return next((f for f in FAMILIES if mode in f.modes), None)


def text_readers() -> list[Family]:
    """The families that read the text in images (scans, photos): ``Family.read_text``."""
    return [f for f in FAMILIES if f.reads_text]


def ingest_kinds() -> list[str]:
    """The ingest kinds some family embeds, in registry order."""
    return list(dict.fromkeys(k for f in FAMILIES for k in f.kinds))


def built_triton_models(repo: Path) -> list[str]:
    """Triton models whose generated files exist; the local server loads only these."""
    return [name for fam in FAMILIES if fam.is_built(repo) for name in fam.triton_models]


__all__ = ["BGEM3", "CLIP", "FAMILIES", "PPOCR", "PRECISIONS", "BuildReport", "Encoded", "Family", "Int8Quality", "MiniLM", "OFA", "Vector",
           "WeightsUnavailable", "built_triton_models", "family", "for_kind", "for_mode", "ingest_kinds", "text_readers"]
