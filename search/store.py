"""The vector store: Qdrant through qdrant-client.

A Qdrant server when ``QDRANT_URL`` is set, else the embedded local store under the data dir
(``:memory:`` in unit tests). Collections and payload indexes come only from the schemas defined here.

Content-derived ids: a point id is a UUID5 of (file sha256, chunker signature, chunk index), so
ingesting the same content again overwrites instead of duplicating. One point per chunk stores
all paths the content was seen at. The chunk-0 point of a file is written last and acts as the
"file complete" record, so an interrupted ingest never looks finished.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qdrant_client import QdrantClient, models

from search.errors import StoreUnavailable

ID_NAMESPACE = uuid.UUID("6f1c1f3e-3b7a-4c1e-9a57-4d0c2e8b9a11")


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


class Store:
    def __init__(self, location: str, *, api_key: str | None = None, prefix: str = "",
                 shards: int | None = None, replicas: int | None = None) -> None:
        self.location = location
        self.prefix = prefix
        # New collections on a Qdrant cluster: shards spread over the nodes, copies of each shard
        # (None: the server's defaults; local mode ignores both).
        self.sharding = {k: v for k, v in (("shard_number", shards), ("replication_factor", replicas)) if v}
        try:
            if location.startswith(("http://", "https://")):
                self.client = QdrantClient(url=location, api_key=api_key, timeout=10)
            elif location == ":memory:":
                self.client = QdrantClient(location=":memory:")
            else:
                Path(location).mkdir(parents=True, exist_ok=True)
                self.client = QdrantClient(path=location)
        except RuntimeError as exc:  # local mode: another process holds the folder
            raise StoreUnavailable(f"the embedded store at {location} is in use by another process ({exc})") from exc
        except Exception as exc:
            raise StoreUnavailable(f"cannot open the Qdrant store at {location}: {exc}") from exc

    def close(self) -> None:
        self.client.close()

    def name(self, collection: str) -> str:
        return f"{self.prefix}{collection}"

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, KeyError):
            raise
        except Exception as exc:
            if "Not found" in str(exc) or "not found" in str(exc):
                raise
            raise StoreUnavailable(f"Qdrant at {self.location} is not reachable: {str(exc).splitlines()[0][:200]}") from exc

    # -- schema
    def ensure(self, schema: CollectionSchema) -> None:
        name = self.name(schema.name)
        if not self._call(self.client.collection_exists, name):
            self._call(self.client.create_collection, name, vectors_config=schema.vectors,
                       sparse_vectors_config=schema.sparse_vectors or None, **self.sharding)
            with warnings.catch_warnings():  # local mode ignores payload indexes (and says so); a server uses them
                warnings.simplefilter("ignore", UserWarning)
                for field_name, kind in schema.payload_indexes.items():
                    self._call(self.client.create_payload_index, name, field_name=field_name, field_schema=kind)
            return
        info = self._call(self.client.get_collection, name)
        have = info.config.params.vectors or {}
        have_sparse = info.config.params.sparse_vectors or {}
        for vec, params in [*schema.vectors.items(), *schema.sparse_vectors.items()]:
            ok = vec in have_sparse if isinstance(params, models.SparseVectorParams) else (vec in have and have[vec].size == params.size)
            if not ok:
                raise StoreUnavailable(
                    f"collection '{name}' exists with a different vector layout ({vec}); "
                    "delete it or use another SEARCH_COLLECTION_PREFIX"
                )

    def exists(self, collection: str) -> bool:
        return self._call(self.client.collection_exists, self.name(collection))

    def count(self, collection: str) -> int:
        if not self.exists(collection):
            return 0
        return self._call(self.client.count, self.name(collection), exact=True).count

    # -- writes
    def upsert(self, collection: str, points: list[models.PointStruct]) -> None:
        if points:
            self._call(self.client.upsert, self.name(collection), points=points, wait=True)

    def delete_content(self, collection: str, sha256: str, *, keep_chunker: str | None = None) -> None:
        """Delete one content's points; with ``keep_chunker``, only those chunked differently."""
        flt = _match("sha256", sha256)
        if keep_chunker is not None:
            flt.must_not = [models.FieldCondition(key="chunker", match=models.MatchValue(value=keep_chunker))]
        self._call(self.client.delete, self.name(collection), points_selector=models.FilterSelector(filter=flt), wait=True)

    def set_paths(self, collection: str, sha256: str, paths: list[str], **extra: object) -> None:
        """Re-point every chunk of one content at ``paths`` (rename, duplicate, removal)."""
        payload = {"paths": paths, "path": paths[0], "folders": sorted({f for p in paths for f in folders_of(p)}), **extra}
        self._call(self.client.set_payload, self.name(collection), payload=payload,
                   points=models.FilterSelector(filter=_match("sha256", sha256)), wait=True)

    # -- reads
    def files(self, collection: str) -> Iterator[StoredFile]:
        """Every completely written piece of content (its chunk-0 point exists)."""
        if not self.exists(collection):
            return
        offset = None
        while True:
            points, offset = self._call(
                self.client.scroll, self.name(collection), scroll_filter=_match("chunk", 0), limit=512,
                offset=offset, with_payload=["sha256", "paths", "size", "mtime", "chunker", "n_chunks"],
                with_vectors=False)
            for p in points:
                pl = p.payload or {}
                yield StoredFile(pl["sha256"], tuple(pl.get("paths", ())), int(pl.get("size", -1)),
                                 float(pl.get("mtime", -1)), pl.get("chunker", ""), int(pl.get("n_chunks", 0)))
            if offset is None:
                return

    def search(self, collection: str, vector_name: str | None, query, *, limit: int,
               query_filter: models.Filter | None = None, score_threshold: float | None = None,
               prefetch: list[models.Prefetch] | None = None) -> list[models.ScoredPoint]:
        """One query: a dense vector, a sparse vector, a multivector, or a fusion over ``prefetch``."""
        res = self._call(self.client.query_points, self.name(collection), query=query, using=vector_name,
                         prefetch=prefetch, limit=limit, query_filter=query_filter,
                         score_threshold=score_threshold, with_payload=True)
        return res.points

    def count_where(self, collection: str, key: str, value: object) -> int:
        if not self.exists(collection):
            return 0
        return self._call(self.client.count, self.name(collection), count_filter=_match(key, value), exact=True).count


def _match(key: str, value: object) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key=key, match=models.MatchValue(value=value))])


def open_store(settings) -> Store:
    return Store(settings.qdrant_location, api_key=settings.qdrant_api_key, prefix=settings.collection_prefix,
                 shards=settings.qdrant_shards, replicas=settings.qdrant_replication_factor)
