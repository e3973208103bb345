"""The served model families: one module each, one catalogue here."""

from search.models.base import BuildReport, ServedModel, WeightsUnavailable
from search.models.bge_m3 import BGEM3
from search.models.clip import CLIP
from search.models.minilm import MiniLM
from search.models.ofa import OFA

FAMILIES: tuple[ServedModel, ...] = (MiniLM(), CLIP(), BGEM3(), OFA())


def built_triton_models(repo) -> list[str]:
    """Triton models whose generated files exist; the local server loads only these."""
    return [name for fam in FAMILIES if fam.is_built(repo) for name in fam.triton_models]


__all__ = ["BGEM3", "CLIP", "FAMILIES", "BuildReport", "MiniLM", "OFA", "ServedModel", "WeightsUnavailable", "built_triton_models"]
