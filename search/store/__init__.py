"""The vector store: one interface, two backends.

- ``edge`` (default without ``QDRANT_URL``): Qdrant's engine in-process (qdrant-edge-py), one
  shard per collection under ``<data dir>/store-edge``.
- ``qdrant``: qdrant-client, to a Qdrant server (``QDRANT_URL``) or its local mode (exact search
  in Python; ``SEARCH_STORE=local``, or ``:memory:`` in unit tests).

Callers speak qdrant-client's models to both; ``edge_translate`` translates for the engine.
Collections and payload indexes come only from ``schema``. Imports go one way: factory ->
backends -> base -> schema (``util`` beside them); ``migration`` copies one store into another."""

from search.store.base import BACKENDS, CollectionStats, PointGroup, Store, StoredFile, match
from search.store.factory import open_location, open_store
from search.store.migration import Migrated, migrate, parse_spec, schema_for
from search.store.schema import (
    COLLECTIONS,
    DEFAULT_KB,
    DOCUMENTS,
    ID_NAMESPACE,
    IMAGES,
    PARTIAL,
    CollectionSchema,
    check_kb,
    documents_schema,
    folders_of,
    image_vector,
    images_schema,
    in_kb,
    kb_collection,
    kb_of,
    kb_thumbnails,
    point_id,
)

__all__ = [
    "BACKENDS", "COLLECTIONS", "DOCUMENTS", "IMAGES", "ID_NAMESPACE", "PARTIAL", "CollectionSchema", "CollectionStats",
    "Migrated", "PointGroup", "Store", "StoredFile",
    "documents_schema", "folders_of", "image_vector", "images_schema", "match", "migrate", "open_location",
    "open_store", "parse_spec", "point_id", "schema_for", "DEFAULT_KB", "check_kb", "in_kb", "kb_collection", "kb_of",
    "kb_thumbnails",
]
