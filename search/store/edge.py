"""The embedded store on Qdrant's own engine (qdrant-edge-py): one EdgeShard per collection in
``<root>/<collection>/``, with HNSW, payload indexes and a write-ahead log.

Callers speak qdrant-client's models (``edge_translate`` converts). Every update is one WAL record,
applied whole or not at all after a crash, visible once ``update`` returns. No background
optimizer: ``optimize()`` (after each ingest and migration) merges segments and builds HNSW; until
then new points are searched exactly. One process owns a store folder (a lock file); another gets
StoreUnavailable."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import qdrant_edge as qe
from qdrant_client import models

from search.errors import StoreInUse, StoreUnavailable
from search.store.base import CollectionStats, Store
from search.store.edge_translate import (
    PAYLOAD_TYPES,
    client_id,
    client_vector,
    edge_config,
    edge_filter,
    edge_id,
    edge_params,
    edge_prefetch,
    edge_query,
    edge_sparse_params,
    edge_vector,
    edge_vector_params,
)
from search.store.schema import DOCUMENTS, ID_KEY, CollectionSchema
from search.store.util import disk_usage

CONFIG_FILE = "edge_config.json"


ID_KEYS_KEPT = 1_000_000  # point ids whose ID_KEY is kept in memory (~200 bytes each)
_UNREAD = object()


class EdgeStore(Store):
    backend = "edge"

    def __init__(self, location: str, *, prefix: str = "", quantization: str | None = None) -> None:
        super().__init__(prefix, quantization)
        self.location = location
        self.root = Path(location)
        self._shards: dict[str, qe.EdgeShard] = {}
        self._id_keys: dict[str, object] = {}  # point id -> its ID_KEY, read once (see ranked_keys)
        self._open_lock = threading.Lock()
        # collection -> its shard's point count. This process is the store's only writer, so the count
        # holds until one of its own writes, which drops it; one read across a write is not kept.
        self._sizes: dict[str, int] = {}
        self._writes = 0
        self._sizes_lock = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the embedded store at {location}: {exc.strerror}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip()
            os.close(self._lock_fd)
            raise StoreInUse(f"the embedded store at {location} is in use by another process"
                             + (f" (pid {holder})" if holder else ""), int(holder) if holder.isdigit() else None) from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)

    def close(self) -> None:
        self._wrote(None)  # a closed store answers no count from memory: it refuses, as before
        with self._open_lock:
            for shard in self._shards.values():
                shard.flush()
                shard.close()
            self._shards.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the lock
                self._lock_fd = None

    def _dir(self, collection: str) -> Path:
        return self.root / self.name(collection)

    def _shard(self, collection: str) -> qe.EdgeShard:
        shard = self._shards.get(collection)
        if shard is not None:
            return shard
        with self._open_lock:
            if self._lock_fd is None:
                raise StoreUnavailable(f"the embedded store at {self.location} is closed")
            if collection not in self._shards:
                if not self.exists(collection):
                    raise StoreUnavailable(f"collection '{self.name(collection)}' not found in {self.location}")
                self._shards[collection] = _edge(qe.EdgeShard.load, str(self._dir(collection)), where=self.location)
            return self._shards[collection]

    # -- schema
    def ensure(self, schema: CollectionSchema) -> None:
        path = self._dir(schema.name)
        if not self.exists(schema.name):
            with self._open_lock:
                self._shards[schema.name] = _edge(qe.EdgeShard.create, str(path), edge_config(self.stored_schema(schema)),
                                                  where=self.location)
            self._wrote(schema.name)
        else:
            missing, extra = _check_layout(path / CONFIG_FILE, schema, self.name(schema.name))
            if missing:
                self._add_vectors(self.stored_schema(schema), missing)
            # Opened with this version's settings: quantization, set or unset, applies to the
            # segments built from now on (`search store migrate` rebuilds them all).
            self._load_configured(self.stored_schema(_with_vectors(schema, extra)))
        shard = self._shard(schema.name)
        have = shard.info().payload_schema
        for field_name, kind in schema.payload_indexes.items():
            if field_name not in have:
                _edge(shard.update, qe.UpdateOperation.create_field_index(field_name, PAYLOAD_TYPES[kind]),
                      where=self.location)

    def _add_vectors(self, schema: CollectionSchema, names: list[str]) -> None:
        """A family served for the first time: its vectors join the collection (existing points lack
        them); the shard is then reopened with the schema, which sets their index and storage."""
        shard = self._shard(schema.name)
        for name in names:
            if name in schema.sparse_vectors:
                op = qe.UpdateOperation.create_sparse_vector(name, modifier=edge_sparse_params(schema.sparse_vectors[name]).modifier)
            else:
                p = edge_vector_params(schema.vectors[name])
                op = qe.UpdateOperation.create_dense_vector(name, p.size, p.distance, multivector_config=p.multivector_config)
            _edge(shard.update, op, where=self.location)
        with self._open_lock:
            self._shards.pop(schema.name).close()
        self._wrote(schema.name)

    def _load_configured(self, schema: CollectionSchema) -> None:
        """Open an existing shard with this version's settings (the search pool), which the shard
        then keeps on disk; one whose stored layout the engine finds incompatible is left to
        ``_shard``, which opens it as it is."""
        with self._open_lock:
            if schema.name in self._shards or self._lock_fd is None:
                return
            try:
                self._shards[schema.name] = qe.EdgeShard.load(str(self._dir(schema.name)), edge_config(schema))
            except Exception:  # any refusal: the shard as stored still serves
                pass

    def exists(self, collection: str) -> bool:
        # An open shard exists (drop closes it first; no other process writes while we hold the lock):
        # every search asks, twice, and a stat holds up the request threads' GIL hand-offs.
        return collection in self._shards or (self._dir(collection) / CONFIG_FILE).exists()

    def drop(self, collection: str) -> None:
        try:
            with self._open_lock:
                shard = self._shards.pop(collection, None)
                if shard is not None:
                    shard.close()
                path = self._dir(collection)
                if path.exists():
                    # Renamed first, so a crash mid-delete leaves no half collection under the real name.
                    doomed = path.with_name(f".dropped-{path.name}-{os.getpid()}")
                    path.rename(doomed)
                    shutil.rmtree(doomed)
        finally:
            self._wrote(collection)

    def collections(self) -> list[str]:
        return sorted(p.name[len(self.prefix):] for p in self.root.iterdir()
                      if p.name.startswith(self.prefix) and (p / CONFIG_FILE).exists())

    def count(self, collection: str, flt: models.Filter | None = None, *, exact: bool = True) -> int:
        if not self.exists(collection):
            return 0
        if not exact and flt is None:  # the shard's point count: cheap, where an exact count scans
            return self._size(collection)
        return _edge(self._shard(collection).count, qe.CountRequest(exact=True, filter=edge_filter(flt)),
                     where=self.location)

    def _size(self, collection: str) -> int:
        """The shard's point count, read once per write: every search asks two or three times."""
        size = self._sizes.get(collection)
        if size is None:
            writes = self._writes
            size = _edge(self._shard(collection).info, where=self.location).points_count
            with self._sizes_lock:
                if writes == self._writes:
                    self._sizes[collection] = size
        return size

    def _wrote(self, collection: str | None) -> None:
        """Forget the kept count of ``collection`` (None: of every collection)."""
        with self._sizes_lock:
            self._writes += 1
            if collection is None:
                self._sizes.clear()
            else:
                self._sizes.pop(collection, None)

    # -- writes
    def _update(self, collection: str, op) -> None:
        try:
            _edge(self._shard(collection).update, op, where=self.location)
        finally:
            self._wrote(collection)

    def upsert(self, collection: str, points: list[models.PointStruct]) -> None:
        if points:
            self._update(collection, qe.UpdateOperation.upsert_points(
                [qe.Point(edge_id(p.id), edge_vector(p.vector), p.payload) for p in points]))

    def delete(self, collection: str, flt: models.Filter) -> None:
        self._update(collection, qe.UpdateOperation.delete_points_by_filter(edge_filter(flt)))

    def set_payload(self, collection: str, payload: dict, flt: models.Filter) -> None:
        self._update(collection, qe.UpdateOperation.set_payload_by_filter(edge_filter(flt), payload))

    def optimize(self, collection: str) -> None:
        if self.exists(collection):
            shard = self._shard(collection)
            try:
                _edge(shard.optimize, where=self.location)
            finally:
                self._wrote(collection)
            _edge(shard.flush, where=self.location)

    # -- reads
    def scroll(self, collection, flt=None, *, limit=512, offset=None, with_payload=True, with_vectors=False):
        req = qe.ScrollRequest(offset=edge_id(offset) if offset is not None else None, limit=limit, filter=edge_filter(flt),
                               with_payload=with_payload, with_vector=with_vectors)
        records, nxt = _edge(self._shard(collection).scroll, req, where=self.location)
        out = [models.Record.model_construct(id=client_id(r.id), payload=r.payload,
                                             vector=client_vector(r.vector) if with_vectors else None,
                                             shard_key=None, order_value=None) for r in records]
        return out, (client_id(nxt) if nxt is not None else None)

    def search(self, collection, vector_name, query, *, limit, query_filter=None, score_threshold=None,
               prefetch=None, params=None, offset=0, with_payload=True):
        points = self._query(collection, vector_name, query, limit, query_filter, score_threshold, prefetch, params,
                             offset, with_payload)
        return [models.ScoredPoint.model_construct(id=client_id(p.id), version=p.version, score=p.score, payload=p.payload,
                                                   vector=None, shard_key=None, order_value=None) for p in points]

    def ranked_keys(self, collection, vector_name, query, *, key, limit, query_filter=None, score_threshold=None,
                    prefetch=None, params=None):
        # The engine's points as they come: no client point built for each of a window's hundreds.
        if key != ID_KEY:
            points = self._query(collection, vector_name, query, limit, query_filter, score_threshold, prefetch, params,
                                 0, [key])
            return [(client_id(p.id), p.score, (p.payload or {}).get(key)) for p in points]
        # A point's id is derived from its sha256, so the sha256 read once stays right for as long as the
        # id exists: the window comes without payloads (a payload field read from the engine's on-disk
        # store costs many times the search itself), and only unseen ids are read.
        ranked = [(client_id(p.id), p.score) for p in self._query(collection, vector_name, query, limit, query_filter,
                                                                   score_threshold, prefetch, params, 0, False)]
        known = self._id_keys
        keys = [known.get(pid, _UNREAD) for pid, _ in ranked]  # .get: another thread may clear the dict meanwhile
        unseen = [pid for (pid, _), k in zip(ranked, keys) if k is _UNREAD]
        if unseen:
            records = _edge(self._shard(collection).retrieve, [edge_id(i) for i in unseen], [key], False, where=self.location)
            read = {client_id(r.id): (r.payload or {}).get(key) for r in records}
            if len(known) + len(read) > ID_KEYS_KEPT:
                known.clear()
            known.update(read)
            keys = [read.get(pid, _UNREAD) if k is _UNREAD else k for (pid, _), k in zip(ranked, keys)]
        # A point deleted since the search has no key to read: it is left out, as a hit deleted before its payload read is
        return [(pid, score, k) for (pid, score), k in zip(ranked, keys) if k is not _UNREAD]

    def _query(self, collection, vector_name, query, limit, query_filter, score_threshold, prefetch, params, offset,
               with_payload):
        req = qe.QueryRequest(limit=limit, offset=offset or None, query=edge_query(query, vector_name),
                              prefetches=[edge_prefetch(p) for p in prefetch] if prefetch else None,
                              filter=edge_filter(query_filter), score_threshold=score_threshold,
                              params=edge_params(self.search_params(collection, limit + (offset or 0), params)),
                              with_payload=with_payload)
        return _edge(self._shard(collection).query, req, where=self.location)

    def payloads(self, collection, ids):
        records = _edge(self._shard(collection).retrieve, [edge_id(i) for i in ids], True, False, where=self.location)
        return {client_id(r.id): r.payload for r in records}

    def stats(self, collection: str) -> CollectionStats:
        info = self._shard(collection).info()
        indexed = info.indexed_vectors_count
        # Small collections stay unindexed on purpose: below the threshold exact search is faster.
        status = ("HNSW" if indexed and indexed >= info.points_count else
                  "partly HNSW (run `search store optimize`)" if indexed else "exact search")
        return CollectionStats(points=info.points_count, segments=info.segments_count, indexed_vectors=indexed,
                               status=status, payload_indexes=sorted(info.payload_schema),
                               disk_bytes=disk_usage(self._dir(collection)))


def _edge(fn, *args, where: str):
    """Call the engine; its errors become one-line StoreUnavailable messages."""
    try:
        return fn(*args)
    except StoreUnavailable:
        raise
    except Exception as exc:
        msg = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        if "WouldBlock" in msg:
            raise StoreUnavailable(f"the embedded store at {where} is in use by another process") from exc
        raise StoreUnavailable(f"embedded store at {where}: {msg}") from exc


def _with_vectors(schema: CollectionSchema, names: set[str]) -> CollectionSchema:
    """The schema and the stored vectors ``names`` beyond it (a family no longer served keeps its
    vectors, so the shard opens with their settings too)."""
    return replace(schema, vectors={**schema.vectors, **{n: p for n, p in DOCUMENTS.vectors.items() if n in names}},
                   sparse_vectors={**schema.sparse_vectors, **{n: p for n, p in DOCUMENTS.sparse_vectors.items() if n in names}})


def _check_layout(config_file: Path, schema: CollectionSchema, name: str) -> tuple[list[str], set[str]]:
    """The schema's vectors the stored collection lacks, and those it has beyond the schema;
    StoreUnavailable if one it has differs."""
    try:
        have = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(f"collection '{name}': unreadable {config_file}: {exc}") from exc
    dense, sparse = have.get("vectors") or {}, have.get("sparse_vectors") or {}
    for vec, params in schema.vectors.items():
        if vec in sparse or (vec in dense and dense[vec].get("size") != params.size):
            raise StoreUnavailable(f"collection '{name}' exists with a different vector layout ({vec}); "
                                   "delete it or use another SEARCH_COLLECTION_PREFIX")
    for vec in schema.sparse_vectors:
        if vec in dense:
            raise StoreUnavailable(f"collection '{name}' exists with a different vector layout ({vec}); "
                                   "delete it or use another SEARCH_COLLECTION_PREFIX")
    wanted = {*schema.vectors, *schema.sparse_vectors}
    return [vec for vec in wanted if vec not in dense and vec not in sparse], {*dense, *sparse} - wanted
