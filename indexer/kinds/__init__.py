"""What differs between kinds of files: how a file becomes units and how units are embedded, one
module per kind (documents, photos) on what they share (base).

Everything else (incremental rules, batching, crash-safe writes) is the pipeline's, shared.
"""

from __future__ import annotations

from indexer.kinds.base import THUMBNAIL_DRAFT, THUMBNAIL_SIZE, Embedded, Kind, Loaded, Unit
from indexer.kinds.documents import Documents, chunk_tokenizer
from indexer.kinds.photos import Photos
from search.config import Settings
from search.models import Family
from search.triton.client import TritonClient

# The indexer's kinds by name: the ingest kinds the model registry's families may embed
KINDS: dict[str, type[Documents | Photos]] = {k.name: k for k in (Documents, Photos)}


def make_kind(settings: Settings, triton: TritonClient, name: str, families: list[Family], kb: str | None = None) -> Kind:
    """The kind called ``name`` (a key of KINDS) of knowledge base ``kb`` (None: the default one) on
    ``settings``, embedding through ``triton``. ``families``: the served ones it uses, those that
    embed it and, for documents, those that read the text in images (``Family.reads_text``)."""
    return KINDS[name].made(settings, triton, families, kb)


__all__ = ["KINDS", "THUMBNAIL_DRAFT", "THUMBNAIL_SIZE", "Documents", "Embedded", "Kind", "Loaded", "Photos", "Unit",
           "chunk_tokenizer", "make_kind"]
