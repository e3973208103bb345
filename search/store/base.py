"""The store interface: the primitives every backend implements, and the content-level operations
written once on top of them.

Callers speak qdrant-client's models (PointStruct, Filter, Prefetch, ...) to every backend. The
chunk-0 point of a file is written last and acts as the "file complete" record, so an interrupted
ingest never looks finished.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace

from qdrant_client import models

from search.store.schema import PARTIAL, CollectionSchema, folders_of

BACKENDS = ("edge", "local", "server")
# Exact where it matters: a collection this small is scanned (a few milliseconds), and a larger one's
# HNSW beam grows with the hits asked for and with the collection (one in HNSW_POINTS_PER_EF points):
# over 30k real text embeddings (384-d) a beam of 128 kept 0.998 of the exact top-10, 256 0.9993, 512 0.9997,
# 1,024 all of it (tests/test_exact_ranking.py; bench/bench_store.py --kind real measures it).
EXACT_POINTS = 20_000
HNSW_EF_MIN, HNSW_EF_PER_HIT, HNSW_EF_MAX = 128, 8, 2_048
HNSW_POINTS_PER_EF = 50
# ... the collection's part at most this: a beam's cost grows with it, and recall past 25,000 points is
# measured at ef 256-512 (0.9993-0.9997 at 30,000), not yet at 100k or 1M (p50 unmeasured past 512)
HNSW_EF_BY_SIZE_MAX = 512
SIZE_TTL_S = 10.0  # a collection's size, as the search parameters use it, is asked again after this
# SEARCH_STORE_QUANTIZATION=scalar: int8 copies of the vectors that have an HNSW graph, kept in RAM;
# the graph is built on them (2.6x faster at 300k points, bench_store) and a search ranks on them,
# then rescores OVERSAMPLING x the hits asked with the original vectors (recall 1.0 at 300k).
QUANTIZATION = {"scalar": models.ScalarQuantization(
    scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99, always_ram=True))}
OVERSAMPLING = 2.0


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

    def __init__(self, prefix: str = "", quantization: str | None = None) -> None:
        self.prefix = prefix
        self.quantization = QUANTIZATION.get(quantization or "none")
        if quantization not in (None, "none") and self.quantization is None:
            raise ValueError(f"store quantization: expected none or {', '.join(QUANTIZATION)}, got {quantization!r}")

    def stored_schema(self, schema: CollectionSchema) -> CollectionSchema:
        """``schema`` as this store creates it: with quantization, each vector that has an HNSW graph
        gets its quantized copy (a ColBERT multivector, only rescored, does not)."""
        if self.quantization is None:
            return schema
        return replace(schema, vectors={
            name: p if p.multivector_config is not None or (p.hnsw_config and p.hnsw_config.m == 0)
            else p.model_copy(update={"quantization_config": self.quantization}) for name, p in schema.vectors.items()})

    def name(self, collection: str) -> str:
        return f"{self.prefix}{collection}"

    def describe(self) -> str:
        return f"{self.backend} store at {self.location}"

    @property
    def shared(self) -> bool:
        """Other processes may write the same collections (a Qdrant server); the embedded engine and
        local mode admit one process."""
        return self.backend == "server"

    # -- primitives
    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def ensure(self, schema: CollectionSchema) -> None:
        """Create the collection and its payload indexes; an existing one gains the schema's vectors
        it lacks (a family served for the first time) and StoreUnavailable 'different vector layout'
        if one it has differs."""

    @abstractmethod
    def exists(self, collection: str) -> bool: ...

    @abstractmethod
    def drop(self, collection: str) -> None:
        """Delete a collection and everything in it (nothing happens when there is none)."""

    @abstractmethod
    def collections(self) -> list[str]:
        """The collections this store holds (names without the prefix)."""

    @abstractmethod
    def count(self, collection: str, flt: models.Filter | None = None, *, exact: bool = True) -> int:
        """Points matching ``flt``. ``exact=False`` lets the backend answer from its segment counts where
        it can (no filter): the number is then approximate while points are being replaced."""

    def search_params(self, collection: str, limit: int, params: models.SearchParams | None) -> models.SearchParams | None:
        """The parameters a query runs with: the caller's, else exact search on a small collection and a
        beam (hnsw_ef) that grows with ``limit`` and the collection's size on a larger one."""
        if params is not None:
            return params
        sizes = self.__dict__.setdefault("_search_sizes", {})
        now = time.monotonic()
        size, at = sizes.get(collection, (0, -SIZE_TTL_S))
        if now - at >= SIZE_TTL_S:
            size = self.count(collection, exact=False)
            sizes[collection] = (size, now)
        if size <= EXACT_POINTS:
            return models.SearchParams(exact=True)
        rescored = None if self.quantization is None else models.QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING)
        ef = max(HNSW_EF_MIN, HNSW_EF_PER_HIT * limit, min(size // HNSW_POINTS_PER_EF, HNSW_EF_BY_SIZE_MAX))
        return models.SearchParams(hnsw_ef=min(HNSW_EF_MAX, ef), quantization=rescored)

    def is_empty(self, collection: str) -> bool:
        """No points in the collection (or no collection), from the cheap count (asked before every query)."""
        return self.count(collection, exact=False) == 0

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
               prefetch: list[models.Prefetch] | None = None, params: models.SearchParams | None = None,
               offset: int = 0, with_payload: bool | list[str] = True) -> list[models.ScoredPoint]:
        """One query: a dense vector, a sparse vector, a multivector, or a fusion over ``prefetch``;
        ``offset`` best points skipped (a page); ``with_payload``: the whole payload, none, or these fields."""

    @abstractmethod
    def payloads(self, collection: str, ids: list) -> dict:
        """The whole payloads of these points, by id (a point that no longer exists is left out)."""

    @abstractmethod
    def stats(self, collection: str) -> CollectionStats: ...

    def optimize(self, collection: str) -> None:  # noqa: B027  (a no-op where the backend indexes by itself)
        """Build indexes after a bulk write (a server does this in the background)."""

    def search_groups(self, collection: str, vector_name: str | None, query, *, group_by: str, limit: int,
                      group_size: int = 1, offset: int = 0, query_filter: models.Filter | None = None,
                      score_threshold: float | None = None, prefetch: list[models.Prefetch] | None = None,
                      params: models.SearchParams | None = None) -> list[PointGroup]:
        """The best points grouped by the payload field ``group_by``: groups in the order of their
        best point, ``limit`` of them after ``offset``, at most ``group_size`` points each.

        The engine has no grouping query, so this runs the query over a window of the best points
        (grown until it holds enough groups, up to GROUP_WINDOW_MAX) and counts each group's points in
        it (``matched``), which a server's query_points_groups cannot report. The window reads only
        (id, score, key) (``ranked_keys``), since whole payloads dominated the cost; kept hits get
        theirs afterwards, and one deleted in between is left out."""
        want = offset + limit
        window = min(GROUP_WINDOW_MAX, max(GROUP_WINDOW_MIN, want * group_size * 4))
        while True:
            ranked = self.ranked_keys(collection, vector_name, query, key=group_by, limit=window, query_filter=query_filter,
                                      score_threshold=score_threshold, prefetch=deepen(prefetch, window), params=params)
            groups = _group(ranked, group_size)
            if len(groups) >= want or len(ranked) < window or window >= GROUP_WINDOW_MAX:
                break
            window = min(GROUP_WINDOW_MAX, window * 4)
        kept = groups[offset:want]
        payloads = self.payloads(collection, [pid for _, hits, _ in kept for pid, _ in hits])
        out = []
        for key, hits, matched in kept:
            points = [models.ScoredPoint.model_construct(id=pid, version=0, score=score, payload=payloads[pid], vector=None,
                                                         shard_key=None, order_value=None)
                      for pid, score in hits if pid in payloads]
            if points:
                out.append(PointGroup(key, points, matched))
        return out

    def ranked_keys(self, collection: str, vector_name: str | None, query, *, key: str, limit: int,
                    query_filter: models.Filter | None = None, score_threshold: float | None = None,
                    prefetch: list[models.Prefetch] | None = None,
                    params: models.SearchParams | None = None) -> list[tuple[object, float, object]]:
        """The best points of a search as (id, score, the payload field ``key``): what grouping needs."""
        points = self.search(collection, vector_name, query, limit=limit, query_filter=query_filter,
                             score_threshold=score_threshold, prefetch=prefetch, params=params, with_payload=[key])
        return [(p.id, p.score, (p.payload or {}).get(key)) for p in points]

    # -- content-level operations, the same on every backend
    def delete_content(self, collection: str, sha256: str, *, keep_chunker: str | None = None) -> None:
        """Delete one content's points; with ``keep_chunker``, only those chunked differently."""
        flt = match("sha256", sha256)
        if keep_chunker is not None:
            flt.must_not = [models.FieldCondition(key="chunker", match=models.MatchValue(value=keep_chunker))]
        self.delete(collection, flt)

    def delete_chunking(self, collection: str, sha256: str, chunker: str) -> None:
        """Delete the points one chunking of a content wrote (a file whose ingest did not finish)."""
        self.delete(collection, _content(sha256, chunker))

    def partial_contents(self, collection: str) -> dict[tuple[str, str], float]:
        """Contents with points written before their file was complete and not marked complete since
        (``partial`` > 0, see schema.py): (sha256, chunker) -> the newest such write's time."""
        found: dict[tuple[str, str], float] = {}
        flt = models.Filter(must=[models.FieldCondition(key=PARTIAL, range=models.Range(gt=0))])
        offset = None
        while self.exists(collection):
            points, offset = self.scroll(collection, flt, limit=512, offset=offset,
                                         with_payload=["sha256", "chunker", PARTIAL])
            for p in points:
                pl = p.payload or {}
                key = (pl.get("sha256", ""), pl.get("chunker", ""))
                found[key] = max(found.get(key, 0.0), float(pl.get(PARTIAL, 0.0)))
            if offset is None:
                break
        return found

    def complete_paths(self, collection: str, sha256: str, chunker: str) -> list[str] | None:
        """The paths on the chunk-0 point (the file-complete record) of one chunking of a content; None
        when it has none."""
        flt = _content(sha256, chunker)
        flt.must.append(models.FieldCondition(key="chunk", match=models.MatchValue(value=0)))
        points = self.scroll(collection, flt, limit=1, with_payload=["paths"])[0]
        return list((points[0].payload or {}).get("paths", [])) if points else None

    def mark_complete(self, collection: str, sha256: str, chunker: str, paths: list[str]) -> None:
        """One chunking of a content is complete: its points get its chunk-0 point's ``paths`` (points
        written before the file was complete have the paths known then) and lose ``partial``."""
        self.set_payload(collection, {**(_paths_payload(paths) if paths else {}), PARTIAL: 0.0}, _content(sha256, chunker))

    def clear_partial(self, collection: str, ids: list) -> None:
        """These points' files are complete (their unit 0 was written after them): no ``partial``."""
        self.set_payload(collection, {PARTIAL: 0.0}, models.Filter(must=[models.HasIdCondition(has_id=ids)]))

    def set_paths(self, collection: str, sha256: str, paths: list[str], **extra: object) -> None:
        """Re-point every chunk of one content at ``paths`` (rename, duplicate, removal)."""
        self.set_payload(collection, {**_paths_payload(paths), **extra}, match("sha256", sha256))

    def files(self, collection: str, where: models.Filter | None = None) -> Iterator[StoredFile]:
        """Every completely written piece of content (its chunk-0 point exists); ``where``: those its
        chunk-0 point matches."""
        if not self.exists(collection):
            return
        flt = match("chunk", 0)
        if where is not None:
            flt = models.Filter(must=[*flt.must, where])
        offset = None
        while True:
            points, offset = self.scroll(collection, flt, limit=512, offset=offset,
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

    def any_where(self, collection: str, key: str, value: object) -> bool:
        """Whether any point has ``key`` = ``value``: the first match ends it, where an exact count reads them all."""
        return self.exists(collection) and bool(self.scroll(collection, match(key, value), limit=1, with_payload=False)[0])

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


GROUP_WINDOW_MIN, GROUP_WINDOW_MAX = 200, 10_000  # points a grouped search looks at


@dataclass
class PointGroup:
    key: object  # the group_by field's value
    hits: list[models.ScoredPoint]  # best first, at most group_size
    matched: int  # points of this group in the window searched (>= len(hits))


def _group(ranked: list[tuple[object, float, object]], group_size: int) -> list[list]:
    """Points (best first, as ranked_keys gives them) grouped by their key, in the order of their best
    point: [key, up to ``group_size`` (id, score), points of the key]. Points without the key are
    left out, as Qdrant's grouping does."""
    groups: dict[object, list] = {}
    for pid, score, key in ranked:
        if key is None or isinstance(key, (list, dict)):
            continue
        g = groups.get(key)
        if g is None:
            g = groups[key] = [key, [], 0]
        g[2] += 1
        if len(g[1]) < group_size:
            g[1].append((pid, score))
    return list(groups.values())


def deepen(prefetch: list[models.Prefetch] | None, limit: int) -> list[models.Prefetch] | None:
    """Prefetches whose own limits reach at least ``limit`` (a fusion must see as deep as the window)."""
    if not prefetch:
        return prefetch
    out = []
    for p in prefetch:
        nested = p.prefetch if isinstance(p.prefetch, list) else ([p.prefetch] if p.prefetch else None)
        out.append(p.model_copy(update={"limit": max(p.limit or 10, limit), "prefetch": deepen(nested, limit)}))
    return out


def match(key: str, value: object) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key=key, match=models.MatchValue(value=value))])


def _paths_payload(paths: list[str]) -> dict:
    return {"paths": paths, "path": paths[0], "folders": sorted({f for p in paths for f in folders_of(p)})}


def _content(sha256: str, chunker: str) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key="sha256", match=models.MatchValue(value=sha256)),
                               models.FieldCondition(key="chunker", match=models.MatchValue(value=chunker))])
