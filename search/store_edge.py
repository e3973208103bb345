"""The embedded store on Qdrant's own engine (qdrant-edge-py): one EdgeShard per collection in
``<root>/<collection>/``, with HNSW, payload indexes and a write-ahead log.

Callers keep speaking qdrant-client's models; this module translates them. Every update is one WAL
record, applied whole or not at all after a crash (kill -9), and visible once ``update`` returns.
The engine runs no background optimizer here: ``optimize()`` (called after each ingest and
migration) merges segments and builds the HNSW graphs; until then new points are searched exactly.
One process owns a store folder at a time (a lock file); a second one gets StoreUnavailable.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from pathlib import Path

import qdrant_edge as qe
from qdrant_client import models

from search.errors import StoreInUse, StoreUnavailable
from search.store import CollectionSchema, CollectionStats, Store
from search.store_qdrant import _du

# HNSW for the dense vectors: Qdrant's defaults (m=16, ef_construct=100); collections whose
# unindexed part is below full_scan_threshold (KB) are searched exactly, which is faster there.
HNSW = dict(m=16, ef_construct=100, full_scan_threshold=10_000)
RRF_K = 2  # the k of Qdrant's RRF (server and qdrant-client's local mode), so fused scores agree
CONFIG_FILE = "edge_config.json"

_DISTANCE = {models.Distance.COSINE: qe.Distance.Cosine, models.Distance.DOT: qe.Distance.Dot,
             models.Distance.EUCLID: qe.Distance.Euclid, models.Distance.MANHATTAN: qe.Distance.Manhattan}
_PAYLOAD = {models.PayloadSchemaType.KEYWORD: qe.PayloadSchemaType.Keyword,
            models.PayloadSchemaType.INTEGER: qe.PayloadSchemaType.Integer,
            models.PayloadSchemaType.FLOAT: qe.PayloadSchemaType.Float,
            models.PayloadSchemaType.GEO: qe.PayloadSchemaType.Geo,
            models.PayloadSchemaType.TEXT: qe.PayloadSchemaType.Text,
            models.PayloadSchemaType.BOOL: qe.PayloadSchemaType.Bool,
            models.PayloadSchemaType.DATETIME: qe.PayloadSchemaType.Datetime,
            models.PayloadSchemaType.UUID: qe.PayloadSchemaType.Uuid}


class EdgeStore(Store):
    backend = "edge"

    def __init__(self, location: str, *, prefix: str = "") -> None:
        super().__init__(prefix)
        self.location = location
        self.root = Path(location)
        self._shards: dict[str, qe.EdgeShard] = {}
        self._open_lock = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
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
                self._shards[schema.name] = _edge(qe.EdgeShard.create, str(path), _config(schema), where=self.location)
        else:
            _check_layout(path / CONFIG_FILE, schema, self.name(schema.name))
        shard = self._shard(schema.name)
        have = shard.info().payload_schema
        for field_name, kind in schema.payload_indexes.items():
            if field_name not in have:
                _edge(shard.update, qe.UpdateOperation.create_field_index(field_name, _PAYLOAD[kind]), where=self.location)

    def exists(self, collection: str) -> bool:
        return (self._dir(collection) / CONFIG_FILE).exists()

    def collections(self) -> list[str]:
        return sorted(p.name[len(self.prefix):] for p in self.root.iterdir()
                      if p.name.startswith(self.prefix) and (p / CONFIG_FILE).exists())

    def count(self, collection: str, flt: models.Filter | None = None) -> int:
        if not self.exists(collection):
            return 0
        return _edge(self._shard(collection).count, qe.CountRequest(exact=True, filter=_filter(flt)), where=self.location)

    # -- writes
    def _update(self, collection: str, op) -> None:
        _edge(self._shard(collection).update, op, where=self.location)

    def upsert(self, collection: str, points: list[models.PointStruct]) -> None:
        if points:
            self._update(collection, qe.UpdateOperation.upsert_points(
                [qe.Point(_pid(p.id), _vector(p.vector), p.payload) for p in points]))

    def delete(self, collection: str, flt: models.Filter) -> None:
        self._update(collection, qe.UpdateOperation.delete_points_by_filter(_filter(flt)))

    def set_payload(self, collection: str, payload: dict, flt: models.Filter) -> None:
        self._update(collection, qe.UpdateOperation.set_payload_by_filter(_filter(flt), payload))

    def optimize(self, collection: str) -> None:
        if self.exists(collection):
            shard = self._shard(collection)
            _edge(shard.optimize, where=self.location)
            _edge(shard.flush, where=self.location)

    # -- reads
    def scroll(self, collection, flt=None, *, limit=512, offset=None, with_payload=True, with_vectors=False):
        req = qe.ScrollRequest(offset=_pid(offset) if offset is not None else None, limit=limit, filter=_filter(flt),
                               with_payload=with_payload, with_vector=with_vectors)
        records, nxt = _edge(self._shard(collection).scroll, req, where=self.location)
        out = [models.Record.model_construct(id=_out_id(r.id), payload=r.payload,
                                             vector=_vector_out(r.vector) if with_vectors else None,
                                             shard_key=None, order_value=None) for r in records]
        return out, (_out_id(nxt) if nxt is not None else None)

    def search(self, collection, vector_name, query, *, limit, query_filter=None, score_threshold=None,
               prefetch=None, params=None):
        req = qe.QueryRequest(limit=limit, query=_query(query, vector_name),
                              prefetches=[_prefetch(p) for p in prefetch] if prefetch else None,
                              filter=_filter(query_filter), score_threshold=score_threshold,
                              params=_params(params), with_payload=True)
        points = _edge(self._shard(collection).query, req, where=self.location)
        return [models.ScoredPoint.model_construct(id=_out_id(p.id), version=p.version, score=p.score, payload=p.payload,
                                                   vector=None, shard_key=None, order_value=None) for p in points]

    def stats(self, collection: str) -> CollectionStats:
        info = self._shard(collection).info()
        indexed = info.indexed_vectors_count
        # Small collections stay unindexed on purpose: below the threshold exact search is faster.
        status = ("HNSW" if indexed and indexed >= info.points_count else
                  "partly HNSW (run `search store optimize`)" if indexed else "exact search")
        return CollectionStats(points=info.points_count, segments=info.segments_count, indexed_vectors=indexed,
                               status=status, payload_indexes=sorted(info.payload_schema),
                               disk_bytes=_du(self._dir(collection)))


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


# -- schema translation
def _config(schema: CollectionSchema) -> qe.EdgeConfig:
    vectors = {}
    for name, p in schema.vectors.items():
        hnsw = None
        if p.hnsw_config is not None and p.hnsw_config.m is not None:
            hnsw = qe.HnswIndexConfig(**{**HNSW, "m": p.hnsw_config.m})
        multi = (qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim) if p.multivector_config is not None else None)
        vectors[name] = qe.EdgeVectorParams(size=p.size, distance=_DISTANCE[p.distance], multivector_config=multi,
                                            hnsw_config=hnsw, memory=qe.Memory.Cold if p.on_disk else None)
    sparse = {name: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf if p.modifier == models.Modifier.IDF else None)
              for name, p in schema.sparse_vectors.items()}
    return qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse or None, hnsw_config=qe.HnswIndexConfig(**HNSW))


def _check_layout(config_file: Path, schema: CollectionSchema, name: str) -> None:
    try:
        have = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(f"collection '{name}': unreadable {config_file}: {exc}") from exc
    dense, sparse = have.get("vectors") or {}, have.get("sparse_vectors") or {}
    for vec, params in schema.vectors.items():
        if vec not in dense or dense[vec].get("size") != params.size:
            raise StoreUnavailable(f"collection '{name}' exists with a different vector layout ({vec}); "
                                   "delete it or use another SEARCH_COLLECTION_PREFIX")
    for vec in schema.sparse_vectors:
        if vec not in sparse:
            raise StoreUnavailable(f"collection '{name}' exists with a different vector layout ({vec}); "
                                   "delete it or use another SEARCH_COLLECTION_PREFIX")


# -- values
def _pid(pid):
    return str(pid) if isinstance(pid, uuid.UUID) else pid


def _out_id(pid):
    return str(pid) if isinstance(pid, uuid.UUID) else pid


def _vector(v):
    if isinstance(v, dict):
        return {k: _one_vector(x) for k, x in v.items()}
    return _one_vector(v)


def _one_vector(x):
    if isinstance(x, models.SparseVector):
        return qe.SparseVector(list(x.indices), list(x.values))
    return x


def _vector_out(v):
    if isinstance(v, dict):
        return {k: (models.SparseVector(indices=list(x.indices), values=list(x.values))
                    if isinstance(x, qe.SparseVector) else x) for k, x in v.items()}
    return v


# -- queries
def _query(q, using: str | None):
    if q is None:
        return None
    if isinstance(q, models.NearestQuery):
        q = q.nearest
    if isinstance(q, models.FusionQuery):
        if q.fusion == models.Fusion.RRF:
            return qe.Fusion.Rrf(k=RRF_K)
        return qe.Fusion.Dbsf()
    if isinstance(q, models.RrfQuery):
        return qe.Fusion.Rrf(k=q.rrf.k if q.rrf.k is not None else RRF_K, weights=q.rrf.weights)
    if isinstance(q, models.SparseVector):
        return qe.Query.Nearest(qe.SparseVector(list(q.indices), list(q.values)), using=using)
    if hasattr(q, "tolist"):
        q = q.tolist()
    if isinstance(q, list):
        return qe.Query.Nearest(q, using=using)
    raise ValueError(f"the embedded store does not support this query type: {type(q).__name__}")


def _prefetch(p: models.Prefetch) -> qe.Prefetch:
    nested = p.prefetch if isinstance(p.prefetch, list) else ([p.prefetch] if p.prefetch else [])
    return qe.Prefetch(limit=p.limit if p.limit is not None else 10, query=_query(p.query, p.using),
                       prefetches=[_prefetch(x) for x in nested] or None, params=_params(p.params),
                       filter=_filter(p.filter), score_threshold=p.score_threshold)


def _params(p: models.SearchParams | None):
    if p is None:
        return None
    return qe.SearchParams(hnsw_ef=p.hnsw_ef, exact=bool(p.exact), indexed_only=bool(p.indexed_only))


# -- filters
def _filter(f: models.Filter | None):
    if f is None:
        return None

    def conds(c):
        if c is None:
            return None
        return [_condition(x) for x in (c if isinstance(c, list) else [c])]

    min_should = None
    if f.min_should is not None:
        min_should = qe.MinShould(conds(f.min_should.conditions), f.min_should.min_count)
    return qe.Filter(must=conds(f.must), should=conds(f.should), must_not=conds(f.must_not), min_should=min_should)


def _condition(c):
    if isinstance(c, models.Filter):
        return _filter(c)
    if isinstance(c, models.FieldCondition):
        return qe.FieldCondition(
            c.key, match=_match(c.match), range=_range(c.range),
            geo_radius=qe.GeoRadius(_geo(c.geo_radius.center), float(c.geo_radius.radius)) if c.geo_radius else None,
            geo_bounding_box=qe.GeoBoundingBox(_geo(c.geo_bounding_box.top_left), _geo(c.geo_bounding_box.bottom_right))
            if c.geo_bounding_box else None,
            geo_polygon=qe.GeoPolygon([_geo(g) for g in c.geo_polygon.exterior.points],
                                      [[_geo(g) for g in ring.points] for ring in c.geo_polygon.interiors or []] or None)
            if c.geo_polygon else None,
            values_count=qe.ValuesCount(lt=c.values_count.lt, gt=c.values_count.gt, lte=c.values_count.lte,
                                        gte=c.values_count.gte) if c.values_count else None,
            is_empty=c.is_empty, is_null=c.is_null)
    if isinstance(c, models.IsEmptyCondition):
        return qe.IsEmptyCondition(c.is_empty.key)
    if isinstance(c, models.IsNullCondition):
        return qe.IsNullCondition(c.is_null.key)
    if isinstance(c, models.HasIdCondition):
        return qe.HasIdCondition({_pid(i) for i in c.has_id})
    if isinstance(c, models.HasVectorCondition):
        return qe.HasVectorCondition(c.has_vector)
    if isinstance(c, models.NestedCondition):
        return qe.NestedCondition(c.nested.key, _filter(c.nested.filter))
    raise ValueError(f"the embedded store does not support this filter condition: {type(c).__name__}")


def _match(m):
    if m is None:
        return None
    if isinstance(m, models.MatchValue):
        return qe.MatchValue(m.value)
    if isinstance(m, models.MatchAny):
        return qe.MatchAny(list(m.any))
    if isinstance(m, models.MatchExcept):
        return qe.MatchExcept(list(m.except_))
    if isinstance(m, models.MatchText):
        return qe.MatchText(m.text)
    if isinstance(m, models.MatchTextAny):
        return qe.MatchTextAny(m.text_any)
    if isinstance(m, models.MatchPhrase):
        return qe.MatchPhrase(m.phrase)
    raise ValueError(f"the embedded store does not support this match: {type(m).__name__}")


def _range(r):
    if r is None:
        return None
    if isinstance(r, models.DatetimeRange):
        iso = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in
               dict(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt).items()}
        return qe.RangeDateTime(**iso)
    return qe.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt)


def _geo(g: models.GeoPoint) -> qe.GeoPoint:
    return qe.GeoPoint(lon=g.lon, lat=g.lat)
