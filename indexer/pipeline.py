"""Ingest: discover files -> load -> split into units -> embed (Triton, batched across files) -> upsert.

One pipeline for every kind of file; a ``Kind`` (indexer/kinds.py) says how a file becomes units
and how they are embedded. The engine (indexer/engine.py) runs them through stages, content rules
and writer on threads or a Ray cluster. This module is the entry point other code imports."""

from __future__ import annotations

from indexer.engine import ingest

__all__ = ["ingest"]
