"""The store through qdrant-client: a Qdrant server (a URL) or its local mode (a folder or
':memory:'; exact search in Python, payload indexes ignored)."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from search.backoff import backoff_s
from search.errors import StoreUnavailable
from search.store.base import CollectionStats, Store
from search.store.schema import CollectionSchema
from search.store.util import disk_usage, plain_points

log = logging.getLogger("search.store")
# The calls that may be asked again after an answer that was lost: reads, and writes whose second
# time changes nothing (points by id, deletes and payloads by filter, an index that exists).
IDEMPOTENT = frozenset({"collection_exists", "get_collection", "get_collections", "count", "scroll", "query_points",
                        "retrieve", "upsert", "delete", "set_payload", "create_payload_index"})
TRANSIENT_STATUS = frozenset({429, 502, 503, 504})  # busy, or a proxy in front of a restarting server


class QdrantStore(Store):
    def __init__(self, location: str, *, api_key: str | None = None, prefix: str = "",
                 shards: int | None = None, replicas: int | None = None, quantization: str | None = None,
                 retry_budget_s: float = 0.0) -> None:
        super().__init__(prefix, quantization)
        self.location = location
        self.retry_budget_s = retry_budget_s
        # New collections on a Qdrant cluster: shards spread over the nodes, copies of each shard
        # (None: the server's defaults; local mode ignores both).
        self.sharding = {k: v for k, v in (("shard_number", shards), ("replication_factor", replicas)) if v}
        self.backend = "server" if location.startswith(("http://", "https://")) else "local"
        try:
            if self.backend == "server":
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

    def _call(self, fn, *args, **kwargs):
        """``fn`` of the client, its failures as StoreUnavailable; a server's idempotent call that failed
        for a moment (``transient``) is tried again with backoff while ``retry_budget_s`` lasts."""
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except (ValueError, KeyError):
                raise
            except Exception as exc:
                if "Not found" in str(exc) or "not found" in str(exc):
                    raise
                wait = backoff_s(attempt)
                if (self.backend != "server" or getattr(fn, "__name__", "") not in IDEMPOTENT or not transient(exc)
                        or time.monotonic() - started + wait >= self.retry_budget_s):
                    raise StoreUnavailable(f"Qdrant at {self.location} is not reachable: {_first_line(exc)}") from exc
                log.info("Qdrant %s failed (%s); trying again in %.1f s (try %d)", fn.__name__, _first_line(exc),
                         wait, attempt + 1)
                time.sleep(wait)

    # -- schema
    def ensure(self, schema: CollectionSchema) -> None:
        name, schema = self.name(schema.name), self.stored_schema(schema)  # quantization: set when a collection is created
        if not self._call(self.client.collection_exists, name):
            self._call(self.client.create_collection, name, vectors_config=schema.vectors,
                       sparse_vectors_config=schema.sparse_vectors or None, **self.sharding)
        info = self._call(self.client.get_collection, name)
        have = info.config.params.vectors or {}
        have_sparse = info.config.params.sparse_vectors or {}
        wanted = [*schema.vectors.items(), *schema.sparse_vectors.items()]
        missing = [(vec, params) for vec, params in wanted if vec not in have and vec not in have_sparse]
        for vec, params in wanted:
            if (vec, params) in missing:
                continue
            sparse = isinstance(params, models.SparseVectorParams)
            if (vec not in have_sparse) if sparse else (vec not in have or have[vec].size != params.size):
                raise StoreUnavailable(
                    f"collection '{name}' exists with a different vector layout ({vec}); "
                    "delete it or use another SEARCH_COLLECTION_PREFIX"
                )
        for vec, params in missing:  # checked first, so a refused layout gains nothing
            self._add_vector(name, vec, params)
        with warnings.catch_warnings():  # local mode ignores payload indexes (and says so); a server uses them
            warnings.simplefilter("ignore", UserWarning)
            for field_name, kind in schema.payload_indexes.items():
                if field_name not in (info.payload_schema or {}):
                    self._call(self.client.create_payload_index, name, field_name=field_name, field_schema=kind, wait=True)

    def _add_vector(self, name: str, vec: str, params) -> None:
        """A family served for the first time: its vector joins the collection (Qdrant >= 1.18);
        existing points lack it."""
        if isinstance(params, models.SparseVectorParams):
            config = models.SparseVectorNameConfig(sparse=models.SparseVectorConfig(modifier=params.modifier))
        else:
            config = models.DenseVectorNameConfig(dense=models.DenseVectorConfig(
                size=params.size, distance=params.distance, multivector_config=params.multivector_config))
        self._call(self.client.create_vector_name, name, vec, config)
        if isinstance(params, models.VectorParams) and (params.on_disk or params.hnsw_config or params.quantization_config):
            self._call(self.client.update_collection, name, vectors_config={vec: models.VectorParamsDiff(
                on_disk=params.on_disk, hnsw_config=params.hnsw_config, quantization_config=params.quantization_config)})

    def exists(self, collection: str) -> bool:
        return self._call(self.client.collection_exists, self.name(collection))

    def drop(self, collection: str) -> None:
        if self.exists(collection):
            self._call(self.client.delete_collection, self.name(collection))

    def collections(self) -> list[str]:
        names = [c.name for c in self._call(self.client.get_collections).collections]
        return [n[len(self.prefix):] for n in names if n.startswith(self.prefix)]

    def count(self, collection: str, flt: models.Filter | None = None, *, exact: bool = True) -> int:
        if not self.exists(collection):
            return 0
        return self._call(self.client.count, self.name(collection), count_filter=flt,
                          exact=exact or flt is not None).count  # a filtered estimate can be far off

    # -- writes
    def upsert(self, collection: str, points: list[models.PointStruct]) -> None:
        if points:
            self._call(self.client.upsert, self.name(collection), points=plain_points(points), wait=True)

    def delete(self, collection: str, flt: models.Filter) -> None:
        self._call(self.client.delete, self.name(collection), points_selector=models.FilterSelector(filter=flt), wait=True)

    def set_payload(self, collection: str, payload: dict, flt: models.Filter) -> None:
        self._call(self.client.set_payload, self.name(collection), payload=payload,
                   points=models.FilterSelector(filter=flt), wait=True)

    # -- reads
    def scroll(self, collection, flt=None, *, limit=512, offset=None, with_payload=True, with_vectors=False):
        return self._call(self.client.scroll, self.name(collection), scroll_filter=flt, limit=limit, offset=offset,
                          with_payload=with_payload, with_vectors=with_vectors)

    def search(self, collection, vector_name, query, *, limit, query_filter=None, score_threshold=None,
               prefetch=None, params=None, offset=0, with_payload=True):
        res = self._call(self.client.query_points, self.name(collection), query=query, using=vector_name,
                         prefetch=prefetch, limit=limit, offset=offset or None, query_filter=query_filter,
                         score_threshold=score_threshold, with_payload=with_payload,
                         search_params=self.search_params(collection, limit + (offset or 0), params))
        if self.backend == "local" and isinstance(query, models.SparseVector):
            # Local mode also returns points that share no token (score 0); the engine and a server do not.
            return [p for p in res.points if p.score != 0]
        return res.points

    def payloads(self, collection, ids):
        records = self._call(self.client.retrieve, self.name(collection), ids=ids, with_payload=True)
        return {r.id: r.payload for r in records}

    def stats(self, collection: str) -> CollectionStats:
        info = self._call(self.client.get_collection, self.name(collection))
        disk = None
        if self.backend == "local" and self.location != ":memory:":
            disk = disk_usage(Path(self.location) / "collection" / self.name(collection))
        status = {"green": "indexed", "yellow": "optimizing", "grey": "optimizations pending", "red": "failed"}
        return CollectionStats(
            points=info.points_count or 0, segments=info.segments_count,
            indexed_vectors=info.indexed_vectors_count,
            status=("exact search (local mode has no indexes)" if self.backend == "local"
                    else status.get(str(info.status.value), str(info.status.value))),
            payload_indexes=sorted(info.payload_schema or {}), disk_bytes=disk)


def transient(exc: Exception) -> bool:
    """A failure that another try may not meet: a server that is there but timed out, dropped the
    connection mid-call, or says it is busy or restarting. Not a refused connection (nothing listens:
    down, said at once) nor a request the server refused."""
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code in TRANSIENT_STATUS
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    return isinstance(exc, (httpx.TimeoutException, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError,
                            TimeoutError, ConnectionResetError))


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
