"""Opening a store: the one place that picks a backend (and so the only module that imports both)."""

from __future__ import annotations

from search.errors import StoreUnavailable
from search.store.base import BACKENDS, Store
from search.store.edge import EdgeStore
from search.store.qdrant import QdrantStore


def open_location(backend: str, location: str, *, api_key: str | None = None, prefix: str = "",
                  shards: int | None = None, replicas: int | None = None, quantization: str | None = None,
                  retry_budget_s: float = 0.0) -> Store:
    """A store by backend name and location (a URL for 'server', a folder or ':memory:' for 'local',
    a folder for 'edge'); ``quantization``: "scalar" or None (Store.stored_schema); ``retry_budget_s``:
    how long a server's idempotent calls are tried again (QdrantStore)."""
    if backend == "edge":
        return EdgeStore(location, prefix=prefix, quantization=quantization)
    if backend in ("local", "server"):
        return QdrantStore(location, api_key=api_key, prefix=prefix, shards=shards, replicas=replicas,
                           quantization=quantization, retry_budget_s=retry_budget_s)
    raise StoreUnavailable(f"unknown store backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def open_store(settings) -> Store:
    return open_location(settings.store_backend, settings.qdrant_location, api_key=settings.qdrant_api_key,
                         prefix=settings.collection_prefix, shards=settings.qdrant_shards,
                         replicas=settings.qdrant_replication_factor, quantization=settings.store_quantization,
                         retry_budget_s=settings.store_retry_budget_s)
