"""The served model families: one module each (client code; export code in ``export/``), one
registry here. Adding a family = its module, its triton_repo/ folders and one line in FAMILIES.

The rest of the product asks the registry who does what, never "the first family": ``required``
(the family an ingest kind needs), ``for_kind`` (every family that adds vectors to it), ``for_mode``
(who ranks a search mode), ``search_modes`` (the modes a kind is searched in), ``text_reader``
(who reads text: a setting chooses among several), ``capabilities`` (what every face offers
beyond the searches: a family's own commands, routes, tools and page sections)."""

from __future__ import annotations

from pathlib import Path

from search.errors import ModelNotReady
from search.models.base import PRECISIONS, BuildReport, Encoded, Family, Int8Quality, Vector, WeightsUnavailable
from search.models.bge_m3 import BGEM3
from search.models.capability import Capability
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


def required(kind: str) -> Family:
    """The family an ingest kind cannot do without (the others on it are ``optional``): its vectors
    define the kind's collection; tests/test_registry.py holds each kind to exactly one."""
    needed = [f for f in FAMILIES if kind in f.kinds and not f.optional]
    if len(needed) != 1:
        raise LookupError(f"ingest kind '{kind}' needs exactly one required family, the registry has "
                          f"{', '.join(f.family for f in needed) or 'none'}")
    return needed[0]


def for_mode(mode: str) -> Family | None:
    """The family a search mode needs (None: a mode no family claims, e.g. "auto")."""
    return next((f for f in FAMILIES if mode in f.modes), None)


def search_modes(kind: str) -> tuple[str, ...]:
    """The modes an ingest kind's collection is searched in: "auto" (the best mode of the families
    served, ``Family.best_mode``), then every mode of every family that embeds the kind, the required
    family's first. Read at each call, so a family registered later is in it."""
    return ("auto", *(m for f in for_kind(kind) for m in f.modes))


def text_readers() -> list[Family]:
    """The families that read the text in images (scans, photos): ``Family.read_text``."""
    return [f for f in FAMILIES if f.reads_text]


def text_reader(name: str | None = None) -> Family | None:
    """The family that reads text: ``name`` (the text_reader setting, SEARCH_TEXT_READER), else the
    one registered (None: none is). Several and none named: the caller must choose."""
    readers = text_readers()
    if name:
        for fam in readers:
            if fam.family == name:
                return fam
        raise ModelNotReady(f"SEARCH_TEXT_READER '{name}': no such reader (readers: "
                            f"{', '.join(f.family for f in readers) or 'none'})")
    if len(readers) > 1:
        raise ModelNotReady(f"several models read text ({', '.join(f.family for f in readers)}): choose one with "
                          "SEARCH_TEXT_READER")
    return readers[0] if readers else None


def ingest_kinds() -> list[str]:
    """The ingest kinds some family embeds, in registry order."""
    return list(dict.fromkeys(k for f in FAMILIES for k in f.kinds))


def capabilities() -> list[Capability]:
    """What the registered families can do beyond the searches, in registry order: each face offers
    every one (a command, a route, an MCP tool, a section of the page). Names are unique."""
    found = [c for f in FAMILIES for c in f.capabilities()]
    names = [c.name for c in found]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise LookupError(f"capabilities offered by several families: {', '.join(twice)}")
    return found


def built_triton_models(repo: Path) -> list[str]:
    """Triton models whose generated files exist; the local server loads only these."""
    return [name for fam in FAMILIES if fam.is_built(repo) for name in fam.triton_models]


__all__ = ["BGEM3", "CLIP", "FAMILIES", "OFA", "PPOCR", "PRECISIONS", "BuildReport", "Capability", "Encoded", "Family",
           "Int8Quality", "MiniLM", "Vector", "WeightsUnavailable", "built_triton_models", "capabilities", "family", "for_kind",
           "for_mode", "ingest_kinds", "required", "search_modes", "text_reader", "text_readers"]
