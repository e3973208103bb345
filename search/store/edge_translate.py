"""qdrant-client's models -> the edge engine's (qdrant_edge) API, and its results back.

Callers and the schemas speak qdrant-client; EdgeStore passes everything through here. A query,
filter condition or match the engine has no counterpart for raises ValueError (nothing is emulated).
"""

from __future__ import annotations

import uuid

import qdrant_edge as qe
from qdrant_client import models

from search.store.schema import CollectionSchema

# HNSW for the dense vectors: Qdrant's defaults (m=16, ef_construct=100); collections whose
# unindexed part is below full_scan_threshold (KB) are searched exactly, which is faster there.
HNSW = dict(m=16, ef_construct=100, full_scan_threshold=10_000)
RRF_K = 2  # the k of Qdrant's RRF (server and qdrant-client's local mode), so fused scores agree

_DISTANCE = {models.Distance.COSINE: qe.Distance.Cosine, models.Distance.DOT: qe.Distance.Dot,
             models.Distance.EUCLID: qe.Distance.Euclid, models.Distance.MANHATTAN: qe.Distance.Manhattan}
PAYLOAD_TYPES = {models.PayloadSchemaType.KEYWORD: qe.PayloadSchemaType.Keyword,
            models.PayloadSchemaType.INTEGER: qe.PayloadSchemaType.Integer,
            models.PayloadSchemaType.FLOAT: qe.PayloadSchemaType.Float,
            models.PayloadSchemaType.GEO: qe.PayloadSchemaType.Geo,
            models.PayloadSchemaType.TEXT: qe.PayloadSchemaType.Text,
            models.PayloadSchemaType.BOOL: qe.PayloadSchemaType.Bool,
            models.PayloadSchemaType.DATETIME: qe.PayloadSchemaType.Datetime,
            models.PayloadSchemaType.UUID: qe.PayloadSchemaType.Uuid}


# -- schema translation
# The shard's search pool. qdrant-edge sizes it from the CPU count (8 threads on a 2-core host) and
# fans every search out over it, a storm of context switches per document search. One thread switches
# far less and serves more searches/s under many clients, with text->image search no slower.
SEARCH_THREADS = 1


def edge_config(schema: CollectionSchema) -> qe.EdgeConfig:
    vectors = {name: edge_vector_params(p) for name, p in schema.vectors.items()}
    sparse = {name: edge_sparse_params(p) for name, p in schema.sparse_vectors.items()}
    return qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse or None, hnsw_config=qe.HnswIndexConfig(**HNSW),
                         max_search_threads=SEARCH_THREADS)


def edge_vector_params(p: models.VectorParams) -> qe.EdgeVectorParams:
    hnsw = None
    if p.hnsw_config is not None and p.hnsw_config.m is not None:
        hnsw = qe.HnswIndexConfig(**{**HNSW, "m": p.hnsw_config.m})
    multi = (qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim) if p.multivector_config is not None else None)
    return qe.EdgeVectorParams(size=p.size, distance=_DISTANCE[p.distance], multivector_config=multi,
                               hnsw_config=hnsw, memory=qe.Memory.Cold if p.on_disk else None,
                               quantization_config=edge_quantization(p.quantization_config))


def edge_sparse_params(p: models.SparseVectorParams) -> qe.EdgeSparseVectorParams:
    return qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf if p.modifier == models.Modifier.IDF else None)


def edge_quantization(q):
    """A vector's scalar (int8) or binary quantization; None keeps the vectors as they are."""
    if isinstance(q, models.ScalarQuantization):
        return qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=q.scalar.quantile, always_ram=q.scalar.always_ram)
    if isinstance(q, models.BinaryQuantization):
        return qe.BinaryQuantizationConfig(always_ram=q.binary.always_ram)
    if q is not None:
        raise ValueError(f"the embedded store has no {type(q).__name__}")
    return None


# -- values
def edge_id(pid):
    return str(pid) if isinstance(pid, uuid.UUID) else pid


def client_id(pid):
    return str(pid) if isinstance(pid, uuid.UUID) else pid


def edge_vector(v):
    if isinstance(v, dict):
        return {k: _one_vector(x) for k, x in v.items()}
    return _one_vector(v)


def _one_vector(x):
    if isinstance(x, models.SparseVector):
        return qe.SparseVector(list(x.indices), list(x.values))
    return x


def client_vector(v):
    if isinstance(v, dict):
        return {k: (models.SparseVector(indices=list(x.indices), values=list(x.values))
                    if isinstance(x, qe.SparseVector) else x) for k, x in v.items()}
    return v


# -- queries
def edge_query(q, using: str | None):
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


def edge_prefetch(p: models.Prefetch) -> qe.Prefetch:
    nested = p.prefetch if isinstance(p.prefetch, list) else ([p.prefetch] if p.prefetch else [])
    return qe.Prefetch(limit=p.limit if p.limit is not None else 10, query=edge_query(p.query, p.using),
                       prefetches=[edge_prefetch(x) for x in nested] or None, params=edge_params(p.params),
                       filter=edge_filter(p.filter), score_threshold=p.score_threshold)


def edge_params(p: models.SearchParams | None):
    if p is None:
        return None
    quant = p.quantization
    return qe.SearchParams(hnsw_ef=p.hnsw_ef, exact=bool(p.exact), indexed_only=bool(p.indexed_only),
                           quantization=quant and qe.QuantizationSearchParams(
                               ignore=bool(quant.ignore), rescore=quant.rescore, oversampling=quant.oversampling))


# -- filters
def edge_filter(f: models.Filter | None):
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
        return edge_filter(c)
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
        return qe.HasIdCondition({edge_id(i) for i in c.has_id})
    if isinstance(c, models.HasVectorCondition):
        return qe.HasVectorCondition(c.has_vector)
    if isinstance(c, models.NestedCondition):
        return qe.NestedCondition(c.nested.key, edge_filter(c.nested.filter))
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
