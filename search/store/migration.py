"""Copying a store into another (any backend to any backend), and naming a store on the command line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qdrant_client import models

from search.errors import StoreUnavailable
from search.models import for_kind
from search.store.base import Store
from search.store.schema import (
    COLLECTIONS,
    DOCUMENTS,
    IMAGES,
    CollectionSchema,
    documents_schema,
    image_vector,
    images_schema,
    in_kb,
    kb_of,
)


def parse_spec(spec: str, settings) -> tuple[str, str]:
    """'edge', 'local', 'edge:PATH', 'local:PATH' or a server URL -> (backend, location); a bare
    backend name means its default folder under the data dir."""
    if spec.startswith(("http://", "https://")):
        return "server", spec
    backend, _, path = spec.partition(":")
    if backend not in ("edge", "local"):
        raise StoreUnavailable(f"store: expected edge[:PATH], local[:PATH] or http(s)://HOST:PORT, got {spec!r}")
    return backend, path or str(settings.default_store_path(backend))


def schema_for(store: Store, collection: str) -> CollectionSchema:
    """The project's schema of a stored collection, in any knowledge base (the photo vector size is
    read from a point)."""
    kb, kind = kb_of(collection) or (None, None)
    if kind == DOCUMENTS.name:  # the optional families some point has vectors of
        kept = (f.family for f in for_kind(kind) if f.optional and any(_has(store, collection, v) for v in f.vectors))
        return in_kb(documents_schema(kept), kb)
    if kind == IMAGES:  # the widths of its vectors as a point holds them (a family's served width)
        points, _ = store.scroll(collection, limit=1, with_payload=False, with_vectors=True)
        if not points:
            raise StoreUnavailable(f"the {collection} collection has no points to take the vector sizes from")
        vec = points[0].vector
        vec = vec if isinstance(vec, dict) else {image_vector(): vec}
        widths = {n: len(v) for n, v in vec.items() if isinstance(v, list) and v and not isinstance(v[0], list)}  # dense
        kept = (f.family for f in for_kind(kind) if all(n in widths for n in f.vectors))
        return in_kb(images_schema(widths, kept), kb)
    raise StoreUnavailable(f"collection '{collection}' is not one of this project's ({', '.join(COLLECTIONS)}, "
                           "or those of a knowledge base)")


def _has(store: Store, collection: str, vector: str) -> bool:
    flt = models.Filter(must=[models.HasVectorCondition(has_vector=vector)])
    return bool(store.scroll(collection, flt, limit=1, with_payload=False)[0])


@dataclass
class Migrated:
    collection: str
    source: int
    copied: int
    target: int


def migrate(src: Store, dst: Store, *, batch: int = 256,
            progress: Callable[[str, int, int], None] | None = None) -> list[Migrated]:
    """Copy every collection (ids, payload, all named/sparse/multi vectors) from ``src`` to ``dst``.

    Point ids are kept, so running it again after an interruption resumes without duplicates.
    Raises StoreUnavailable when the counts differ afterwards."""
    done = []
    for name in [c for c in src.collections() if kb_of(c)]:  # every knowledge base's
        total = src.count(name)
        if total == 0:
            continue
        dst.ensure(schema_for(src, name))
        copied = 0
        for chunk in _batches(src.all_points(name, with_vectors=True, batch=batch), batch):
            dst.upsert(name, [models.PointStruct(id=p.id, vector=p.vector or {}, payload=p.payload) for p in chunk])
            copied += len(chunk)
            if progress:
                progress(name, copied, total)
        dst.optimize(name)
        result = Migrated(name, total, copied, dst.count(name))
        if result.target != total:
            raise StoreUnavailable(f"migration of '{name}' did not verify: {total} points in the source, "
                                   f"{result.target} in the target")
        done.append(result)
    return done


def _batches(items, n):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
