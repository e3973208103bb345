"""The vector store: one interface, two backends.

- ``edge`` (the default without ``QDRANT_URL``): Qdrant's own engine in-process (qdrant-edge-py):
  HNSW, payload indexes, a write-ahead log, one shard per collection under ``<data dir>/store-edge``.
- ``qdrant``: qdrant-client, talking to a Qdrant server (``QDRANT_URL``) or running its local mode
  (exact search in Python; ``SEARCH_STORE=local``, or ``:memory:`` in unit tests).

Callers speak qdrant-client's models (PointStruct, Filter, Prefetch, ...) to both; the edge backend
translates them. Collections and payload indexes come only from the schemas in ``schema``.

Modules, imported one way (factory -> backends -> base -> schema; util beside them):
``schema`` (collection schemas, content-derived ids), ``base`` (the ``Store`` interface and the
content-level operations written once), ``edge`` (the engine backend) with ``edge_translate``
(qdrant-client models -> the engine's), ``qdrant`` (the qdrant-client backend), ``factory`` (picks
a backend), ``migration`` (copies one store into another), ``util`` (disk usage).
"""

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
    "folders_of", "image_vector", "images_schema", "match", "migrate", "open_location",
    "open_store", "parse_spec", "point_id", "schema_for", "DEFAULT_KB", "check_kb", "in_kb", "kb_collection", "kb_of",
    "kb_thumbnails",
]
