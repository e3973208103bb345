"""The vector store: one interface, two backends.

- ``edge`` (the default without ``QDRANT_URL``): Qdrant's own engine in-process (qdrant-edge-py):
  HNSW, payload indexes, a write-ahead log, one shard per collection under ``<data dir>/store-edge``.
- ``qdrant``: qdrant-client, talking to a Qdrant server (``QDRANT_URL``) or running its local mode
  (exact search in Python; ``SEARCH_STORE=local``, or ``:memory:`` in unit tests).

Callers speak qdrant-client's models (PointStruct, Filter, Prefetch, ...) to both; the edge backend
translates them. Collections and payload indexes come only from the schemas defined here.

Content-derived ids: a point id is a UUID5 of (file sha256, chunker signature, chunk index), so
ingesting the same content again overwrites instead of duplicating. One point per chunk stores
all paths the content was seen at. The chunk-0 point of a file is written last and acts as the
"file complete" record, so an interrupted ingest never looks finished.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qdrant_client import models

from search.errors import StoreUnavailable

ID_NAMESPACE = uuid.UUID("6f1c1f3e-3b7a-4c1e-9a57-4d0c2e8b9a11")
BACKENDS = ("edge", "local", "server")


@dataclass(frozen=True)
class CollectionSchema:
    name: str
    vectors: dict[str, models.VectorParams]
    payload_indexes: dict[str, models.PayloadSchemaType] = field(default_factory=dict)
    sparse_vectors: dict[str, models.SparseVectorParams] = field(default_factory=dict)


BGE_DIM = 1024
# Documents: every chunk has a MiniLM vector; chunks embedded while BGE-M3 is served also have its
# three (a point may lack named vectors, so one collection serves both set-ups).
DOCUMENTS = CollectionSchema(
    name="documents",
    vectors={
        "minilm": models.VectorParams(size=384, distance=models.Distance.COSINE),
        "bge_dense": models.VectorParams(size=BGE_DIM, distance=models.Distance.COSINE),
        # Only used to re-rank what the other vectors found: no HNSW graph (m=0), kept on disk.
        "bge_colbert": models.VectorParams(
            size=BGE_DIM, distance=models.Distance.DOT, on_disk=True, hnsw_config=models.HnswConfigDiff(m=0),
            multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)),
    },
    sparse_vectors={"bge_sparse": models.SparseVectorParams(modifier=models.Modifier.IDF)},
    # Every field the code filters on (folders, suffix, sha256, chunk, chunker, models) or may order by.
    payload_indexes={
        "paths": models.PayloadSchemaType.KEYWORD,
        "folders": models.PayloadSchemaType.KEYWORD,
        "sha256": models.PayloadSchemaType.KEYWORD,
        "chunk": models.PayloadSchemaType.INTEGER,
        "suffix": models.PayloadSchemaType.KEYWORD,
        "mtime": models.PayloadSchemaType.FLOAT,
        "chunker": models.PayloadSchemaType.KEYWORD,
        "models": models.PayloadSchemaType.KEYWORD,
        "page": models.PayloadSchemaType.INTEGER,
    },
)


def images_schema(dim: int) -> CollectionSchema:
    """Photos: one CLIP vector each; the dimension is the served model's."""
    return CollectionSchema(
        name="images",
        vectors={"clip": models.VectorParams(size=dim, distance=models.Distance.COSINE)},
        payload_indexes={
            "paths": models.PayloadSchemaType.KEYWORD,
            "folders": models.PayloadSchemaType.KEYWORD,
            "sha256": models.PayloadSchemaType.KEYWORD,
            "chunk": models.PayloadSchemaType.INTEGER,
            "chunker": models.PayloadSchemaType.KEYWORD,
            "suffix": models.PayloadSchemaType.KEYWORD,
            "taken_at": models.PayloadSchemaType.FLOAT,
            "camera_terms": models.PayloadSchemaType.KEYWORD,
            "location": models.PayloadSchemaType.GEO,
        },
    )


COLLECTIONS = (DOCUMENTS.name, "images")


def point_id(sha256: str, chunker: str, chunk: int) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{sha256}:{chunker}:{chunk}"))


def folders_of(path: str) -> list[str]:
    """Every ancestor folder of a path, so a folder filter is one keyword match."""
    return [str(p) for p in Path(path).parents if str(p) not in (".", "")]


@dataclass(frozen=True)
class StoredFile:
    """What the store knows about one piece of content (from its chunk-0 point)."""

    sha256: str
    paths: tuple[str, ...]
    size: int
    mtime: float
    chunker: str
    chunks: int


@dataclass
class CollectionStats:
    points: int
    segments: int | None
    indexed_vectors: int | None  # vectors in an HNSW graph (all named dense vectors together)
    status: str  # "indexed", "not indexed yet (exact search)", "optimizing", ...
    payload_indexes: list[str]
    disk_bytes: int | None  # None where the store is a server


class Store(ABC):
    """The operations the project uses. Backends implement the primitives; the content-level
    operations (files, delete_content, set_paths) are written once, here."""

    backend: str  # one of BACKENDS
    location: str

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def name(self, collection: str) -> str:
        return f"{self.prefix}{collection}"

    def describe(self) -> str:
        return f"{self.backend} store at {self.location}"

    # -- primitives
    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def ensure(self, schema: CollectionSchema) -> None:
        """Create the collection and its payload indexes, or check that an existing one has the
        schema's vectors (StoreUnavailable 'different vector layout' if not)."""

    @abstractmethod
    def exists(self, collection: str) -> bool: ...

    @abstractmethod
    def collections(self) -> list[str]:
        """The collections this store holds (names without the prefix)."""

    @abstractmethod
    def count(self, collection: str, flt: models.Filter | None = None) -> int: ...

    @abstractmethod
    def upsert(self, collection: str, points: list[models.PointStruct]) -> None:
        """One batch, applied whole (edge: one WAL record) and visible when this returns."""

    @abstractmethod
    def delete(self, collection: str, flt: models.Filter) -> None: ...

    @abstractmethod
    def set_payload(self, collection: str, payload: dict, flt: models.Filter) -> None: ...

    @abstractmethod
    def scroll(self, collection: str, flt: models.Filter | None = None, *, limit: int = 512, offset=None,
               with_payload: bool | list[str] = True, with_vectors: bool | list[str] = False,
               ) -> tuple[list[models.Record], object]: ...

    @abstractmethod
    def search(self, collection: str, vector_name: str | None, query, *, limit: int,
               query_filter: models.Filter | None = None, score_threshold: float | None = None,
               prefetch: list[models.Prefetch] | None = None,
               params: models.SearchParams | None = None) -> list[models.ScoredPoint]:
        """One query: a dense vector, a sparse vector, a multivector, or a fusion over ``prefetch``."""

    @abstractmethod
    def stats(self, collection: str) -> CollectionStats: ...

    def optimize(self, collection: str) -> None:
        """Build indexes after a bulk write (a server does this in the background)."""

    # -- content-level operations, the same on every backend
    def delete_content(self, collection: str, sha256: str, *, keep_chunker: str | None = None) -> None:
        """Delete one content's points; with ``keep_chunker``, only those chunked differently."""
        flt = match("sha256", sha256)
        if keep_chunker is not None:
            flt.must_not = [models.FieldCondition(key="chunker", match=models.MatchValue(value=keep_chunker))]
        self.delete(collection, flt)

    def set_paths(self, collection: str, sha256: str, paths: list[str], **extra: object) -> None:
        """Re-point every chunk of one content at ``paths`` (rename, duplicate, removal)."""
        payload = {"paths": paths, "path": paths[0], "folders": sorted({f for p in paths for f in folders_of(p)}), **extra}
        self.set_payload(collection, payload, match("sha256", sha256))

    def files(self, collection: str) -> Iterator[StoredFile]:
        """Every completely written piece of content (its chunk-0 point exists)."""
        if not self.exists(collection):
            return
        offset = None
        while True:
            points, offset = self.scroll(collection, match("chunk", 0), limit=512, offset=offset,
                                         with_payload=["sha256", "paths", "size", "mtime", "chunker", "n_chunks"])
            for p in points:
                pl = p.payload or {}
                yield StoredFile(pl["sha256"], tuple(pl.get("paths", ())), int(pl.get("size", -1)),
                                 float(pl.get("mtime", -1)), pl.get("chunker", ""), int(pl.get("n_chunks", 0)))
            if offset is None:
                return

    def count_where(self, collection: str, key: str, value: object) -> int:
        if not self.exists(collection):
            return 0
        return self.count(collection, match(key, value))

    def all_points(self, collection: str, *, with_vectors: bool = False, batch: int = 256) -> Iterator[models.Record]:
        offset = None
        while self.exists(collection):
            points, offset = self.scroll(collection, limit=batch, offset=offset, with_vectors=with_vectors)
            yield from points
            if offset is None:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def match(key: str, value: object) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key=key, match=models.MatchValue(value=value))])


def open_location(backend: str, location: str, *, api_key: str | None = None, prefix: str = "",
                  shards: int | None = None, replicas: int | None = None) -> Store:
    """A store by backend name and location (a URL for 'server', a folder or ':memory:' for 'local',
    a folder for 'edge')."""
    if backend == "edge":
        from search.store_edge import EdgeStore  # noqa: PLC0415

        return EdgeStore(location, prefix=prefix)
    if backend in ("local", "server"):
        from search.store_qdrant import QdrantStore  # noqa: PLC0415

        return QdrantStore(location, api_key=api_key, prefix=prefix, shards=shards, replicas=replicas)
    raise StoreUnavailable(f"unknown store backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def open_store(settings) -> Store:
    return open_location(settings.store_backend, settings.qdrant_location, api_key=settings.qdrant_api_key,
                         prefix=settings.collection_prefix, shards=settings.qdrant_shards,
                         replicas=settings.qdrant_replication_factor)


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
    """The project's schema of a stored collection (the photo vector size is read from the store)."""
    if collection == DOCUMENTS.name:
        return DOCUMENTS
    if collection == "images":
        points, _ = store.scroll("images", limit=1, with_payload=False, with_vectors=["clip"])
        if not points:
            raise StoreUnavailable("the images collection has no points to take the vector size from")
        vec = points[0].vector
        return images_schema(len(vec["clip"] if isinstance(vec, dict) else vec))
    raise StoreUnavailable(f"collection '{collection}' is not one of this project's ({', '.join(COLLECTIONS)})")


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
    for name in [c for c in COLLECTIONS if c in src.collections()]:
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
