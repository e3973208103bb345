"""Ingest: discover files -> load -> split into units -> embed (Triton, batched across files) -> upsert.

One pipeline for every kind of file; a ``Kind`` (indexer/kinds/) says how a file becomes units
and how they are embedded. The engine (indexer/engine.py) runs them through stages, content rules
and writer; this module runs it on this machine's threads (indexer/local.py), the Ray executor
is indexer/distributed.py. This module is the entry point other code imports."""

from __future__ import annotations

from pathlib import Path

from indexer import engine
from indexer.kinds import Kind
from indexer.local import run_local
from indexer.report import IngestReport
from search.store import Store

__all__ = ["ingest"]


def ingest(store: Store, kinds: list[Kind], roots: list[Path], **options) -> IngestReport:
    """``engine.ingest`` (its options) with the local executor."""
    return engine.ingest(store, kinds, roots, execute=run_local, **options)
