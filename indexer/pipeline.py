"""Ingest: discover files -> load -> split into units -> embed (Triton, batched across files) -> upsert.

One pipeline for every kind of file; a ``Kind`` (indexer/kinds.py) says how a file becomes units
and how they are embedded. The engine (indexer/engine.py) runs them through stages, content rules
and writer on threads or a Ray cluster. This module is the entry point other code imports."""

from __future__ import annotations

from indexer.discover import discover
from indexer.engine import Ingestor, ingest, listing
from indexer.ledger import STALE_PARTIAL_S
from indexer.report import FileOutcome, IngestReport
from indexer.stages import (
    Read,
    bounded_runs,
    build_points,
    content_paths,
    embed_units,
    last_requests,
    read_file,
    split,
    values,
)
from indexer.writer import WRITE_BATCH, WRITE_VALUES, write_marked

_last_requests, _values = last_requests, values  # the names the tests knew them by

__all__ = ["STALE_PARTIAL_S", "WRITE_BATCH", "WRITE_VALUES", "FileOutcome", "IngestReport", "Ingestor", "Read",
           "bounded_runs", "build_points", "content_paths", "discover", "embed_units", "ingest", "listing",
           "read_file", "split", "write_marked"]
