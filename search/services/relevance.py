"""Calibrated relevance: how far above the collection's background a hit stands (docs/relevance.md).

A raw score (cosine, lexical weight, ColBERT) means different things per model, per mode and per
query. For each search this module compares the hit scores with the query's scores against a
random *background sample* of the searched collection (scored by the store, exactly as the hits),
and reports per hit

    relevance = P(the best of M unrelated points would score below this hit)
              = (1 - T(score))^M,   T(s) = P(background score > s)

where M is the number of points the search ran over (after its filters) and the background is a
Laplace distribution: its centre is the median of the query's background scores (the query's own
level: some queries score high against everything), its scale the collection's spread, measured
once per sample with fixed probe queries (the golden texts, or photos for image queries, through
the same served model) as the median of their robust (MAD) scales. A hit at relevance 0.9 is one
that a collection of M points unrelated to the query would beat one time in ten.

The sample (a few thousand point ids) is drawn once per collection, vector and served model, kept
in ``<data dir>/relevance/`` and drawn again when the collection's size moves by more than 10 %.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from qdrant_client import models
from tritonclient.utils import InferenceServerException

from search.errors import BadRequest, ServiceError
from search.models import Family, for_kind, golden
from search.services.base import ServiceBase
from search.services.results import HitList
from search.store import DOCUMENTS, IMAGES, image_vector, match

SAMPLE = 2000  # background points per query (dense and sparse vectors)
SAMPLE_MULTIVECTOR = 500  # ColBERT: each background point costs a late-interaction score
MIN_POINTS = 30  # fewer points than this: no calibration (the background would be the hits themselves)
REFRESH = 0.10  # draw a new sample when the collection's size moved by more than this fraction
FILTER_COUNT_TTL_S = 30.0  # a filtered search's point count is reused this long while the collection's size holds
FILTER_COUNTS = 256  # filters whose counts are kept
LN2 = math.log(2.0)


@dataclass(frozen=True)
class Space:
    """The vector space a search scores in: which collection, which named vector, what the query is."""

    collection: str
    vector: str  # store vector name
    kind: str  # "text" or "image": the probes are queries of the same kind
    family: Family
    sparse: bool = False
    multivector: bool = False

    @property
    def sample_filter(self) -> models.Filter | None:
        """The points that carry this vector: an optional family's join documents the required one indexed."""
        return match("models", self.family.family) if self.family.optional else None


@dataclass
class Background:
    ids: list  # the sampled point ids
    count: int  # points carrying the vector when they were sampled
    scales: dict[str, float] = field(default_factory=dict)  # probe kind -> the collection's Laplace scale
    model: str = ""  # the served model's build the scales were measured with
    vectors: np.ndarray | None = None  # dense spaces: the sampled points' unit vectors, scored here in numpy


# -- the arithmetic (numpy only)
def laplace_scale(scores) -> float:
    """A Laplace scale b from scores, robustly: MAD / ln 2 (the Laplace median absolute deviation),
    or the mean absolute deviation when more than half are equal (sparse scores: mostly 0)."""
    s = np.asarray(scores, np.float64)
    if s.size == 0:
        return 0.0
    med = float(np.median(s))
    mad = float(np.median(np.abs(s - med)))
    return mad / LN2 if mad > 0 else float(np.mean(np.abs(s - med)))


def relevance(scores, centre: float, scale: float, m: int) -> np.ndarray:
    """(1 - T(s))^m per score, T the upper tail of Laplace(centre, scale): the probability that the
    best of m background points scores below s."""
    s = np.asarray(scores, np.float64)
    if scale <= 0:  # a background without spread: anything above it stands out
        return (s > centre).astype(np.float64)
    d = (s - centre) / scale
    tail = np.where(d >= 0, 0.5 * np.exp(-np.abs(d)), 1.0 - 0.5 * np.exp(-np.abs(d)))
    with np.errstate(divide="ignore"):
        return np.exp(max(m, 1) * np.log1p(-np.minimum(tail, 1.0)))


def check_min_relevance(value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise BadRequest(f"min_relevance: must be a probability in 0..1, got {value}")


DOCUMENT_SPACES = {name: Space(DOCUMENTS.name, name, "text", f, sparse=v.kind == "sparse", multivector=v.kind == "multivector")
                   for f in for_kind(DOCUMENTS.name) for name, v in f.vectors.items()}


def image_space(kind: str) -> Space:
    return Space(IMAGES, image_vector(), kind, for_kind(IMAGES)[0])


_CACHE: dict[tuple, Background] = {}
_LOCK = threading.Lock()
_COUNTS: OrderedDict[tuple, tuple[int, int, float]] = OrderedDict()  # -> (collection size, filtered count, when)
_COUNTS_LOCK = threading.Lock()


class Relevance(ServiceBase):
    def _calibrated(self, hits: list, space: Space, query, *, flt: models.Filter | None = None, factor: float = 1.0,
                    min_relevance: float | None = None) -> HitList:
        """``hits`` with their relevance set, those below ``min_relevance`` dropped. ``query`` is
        what the store was asked (a vector, a sparse vector, a multivector), ``factor`` what scales
        the store's score to the hit's (hybrid: 1 / query tokens)."""
        check_min_relevance(min_relevance)
        # Not exact: m only sets how surprising the best score is, and an exact count scans the collection
        # (10 ms of the GIL at 100k photos, on every query).
        count = self.store.count(space.collection, space.sample_filter, exact=False)
        if count < MIN_POINTS:
            note = (f"relevance needs at least {MIN_POINTS} indexed items to tell a match from the background "
                    f"(this collection has {count})")
            return HitList(hits, note=note, min_relevance=min_relevance)
        try:
            background = self._background(space, count)
            scores = self._background_scores(space, query, background) * factor
        except (ServiceError, InferenceServerException) as exc:  # the hits stand; only their calibration is missing
            return HitList(hits, note=f"relevance unavailable ({' '.join(str(exc).split())[:200]})", min_relevance=min_relevance)
        centre = float(np.median(scores))
        searched = count if flt is None else self._filtered_count(space, flt, count)
        values = relevance([h.score for h in hits], centre, background.scales[space.kind], searched)
        rated = [replace(h, relevance=round(float(v), 6)) for h, v in zip(hits, values)]
        best = max((h.relevance for h in rated), default=None)
        if min_relevance is None:
            return HitList(rated, best=best)
        kept = [h for h in rated if h.relevance >= min_relevance]
        return HitList(kept, no_match=bool(rated) and not kept, min_relevance=min_relevance, best=best)

    def _filtered_count(self, space: Space, flt: models.Filter, size: int) -> int:
        """How many points a filtered search ran over: the m of its relevance. Counting a filter
        exactly scans the collection (5-10 ms holding the GIL at 100k photos), so a count is reused
        for the same filter while the collection's size (``size``, the cheap count) is unchanged, for
        up to FILTER_COUNT_TTL_S: a user browsing one folder or date range asks it on every query."""
        both = _both(flt, space.sample_filter)
        key = (self.store.location, self.store.prefix, space.collection, both.model_dump_json())
        now = time.monotonic()
        with _COUNTS_LOCK:
            kept = _COUNTS.get(key)
            if kept and kept[0] == size and now - kept[2] < FILTER_COUNT_TTL_S:
                _COUNTS.move_to_end(key)
                return kept[1]
        n = self.store.count(space.collection, both)
        with _COUNTS_LOCK:
            _COUNTS[key] = (size, n, now)
            _COUNTS.move_to_end(key)
            while len(_COUNTS) > FILTER_COUNTS:
                _COUNTS.popitem(last=False)
        return n

    # -- the background
    def background_ready(self, space: Space) -> bool:
        """Whether a search in ``space`` finds what its relevance needs in memory and current: no sample
        to draw, no vectors to fetch, no probes to run (a new sample takes ~0.3 s at 20,000 passages,
        ~1.2 s at 100,000, which an event loop hands to a thread)."""
        count = self.store.count(space.collection, space.sample_filter, exact=False)
        if count < MIN_POINTS:
            return True  # no calibration
        bg = _CACHE.get(self._background_key(space))
        return (bg is not None and not _stale(bg, count, _model_id(space.family, self.settings.triton_repo))
                and space.kind in bg.scales and (space.sparse or space.multivector or bg.vectors is not None))

    def _background_key(self, space: Space) -> tuple:
        return (self.store.location, self.store.prefix, space.collection, space.vector)

    def _background(self, space: Space, count: int) -> Background:
        key = self._background_key(space)
        model = _model_id(space.family, self.settings.triton_repo)
        with _LOCK:
            bg = _CACHE.get(key) or self._load(space)
            fresh = _stale(bg, count, model)
            if fresh:
                bg = Background(self._sample(space), count, {}, model)
            if not space.sparse and not space.multivector and bg.vectors is None:
                bg.vectors = None if fresh else self._load_vectors(space, len(bg.ids))
                if bg.vectors is None:
                    bg.vectors = self._fetch_vectors(space, bg.ids)
                    self._save_vectors(space, bg.vectors)
            if space.kind not in bg.scales:
                bg.scales[space.kind] = self._probe_scale(space, bg)
                self._save(space, bg)
            _CACHE[key] = bg
            return bg

    def _sample(self, space: Space) -> list:
        """Up to SAMPLE point ids, uniformly at random (a fixed seed: the same collection gives the same sample)."""
        ids, offset = [], None
        while True:
            points, offset = self.store.scroll(space.collection, space.sample_filter, limit=4096, offset=offset,
                                               with_payload=False, with_vectors=False)
            ids.extend(p.id for p in points)
            if offset is None:
                break
        size = SAMPLE_MULTIVECTOR if space.multivector else SAMPLE
        return sorted(random.Random(0).sample(ids, min(size, len(ids))), key=str)

    def _fetch_vectors(self, space: Space, ids: list) -> np.ndarray:
        """The sampled points' vectors, unit length (the store's cosine), in the sample's order."""
        found, offset = {}, None
        flt = models.Filter(must=[models.HasIdCondition(has_id=ids)])
        while True:
            points, offset = self.store.scroll(space.collection, flt, limit=4096, offset=offset, with_payload=False,
                                               with_vectors=[space.vector])
            found.update({str(p.id): (p.vector or {}).get(space.vector) for p in points})
            if offset is None:
                break
        rows = [found[str(i)] for i in ids if found.get(str(i)) is not None]
        vectors = np.asarray(rows, np.float32).reshape(len(rows), -1)
        if space.family.vectors[space.vector].distance == "cosine":
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def _background_scores(self, space: Space, query, bg: Background) -> np.ndarray:
        """The query's scores against the sampled points, as the store scores the hits: dense
        vectors here (cosine against the sample's unit vectors), sparse and ColBERT by the store."""
        if bg.vectors is not None:
            q = np.asarray(query, np.float32)
            if space.family.vectors[space.vector].distance == "cosine":
                q = q / max(float(np.linalg.norm(q)), 1e-12)
            return (bg.vectors @ q).astype(np.float64)
        ids = bg.ids
        points = self.store.search(space.collection, space.vector, query, limit=len(ids),
                                   query_filter=models.Filter(must=[models.HasIdCondition(has_id=ids)]),
                                   params=models.SearchParams(exact=True), with_payload=False)
        scores = [float(p.score) for p in points]
        if space.sparse:  # the store leaves out points that share no token with the query: they score 0
            scores += [0.0] * (len(ids) - len(scores))
        return np.asarray(scores, np.float64)

    def _probe_scale(self, space: Space, bg: Background) -> float:
        """The collection's spread for queries of this kind: the median Laplace scale of the probes'
        background scores (fixed golden texts or photos, encoded by the served model)."""
        scales = [laplace_scale(self._background_scores(space, q, bg) * f) for q, f in self._probes(space)]
        scales = [s for s in scales if s > 0]
        return float(np.median(scales)) if scales else 0.0

    def _probes(self, space: Space) -> list[tuple[object, float]]:
        gold = golden.inputs()
        texts = [t.text for t in gold.texts if t.max_length is None]  # the long text would only cost time
        items = [p.data for p in gold.photos] if space.kind == "image" else texts
        probes = space.family.relevance_probes(self.triton, items, space.vector)
        if space.sparse:
            return [(models.SparseVector(indices=list(v), values=list(v.values())), f) for v, f in probes]
        return probes

    # -- kept between processes (the CLI runs one query per process)
    def _file(self, space: Space) -> Path:
        return self.settings.data_dir / "relevance" / f"{self.store.prefix}{space.collection}.{space.vector}.json"

    def _load(self, space: Space) -> Background | None:
        try:
            raw = json.loads(self._file(space).read_text())
        except (OSError, ValueError):
            return None
        if raw.get("location") != self.store.location:
            return None
        return Background(raw["ids"], int(raw["count"]), {k: float(v) for k, v in raw["scales"].items()}, raw.get("model", ""))

    def _load_vectors(self, space: Space, n: int) -> np.ndarray | None:
        try:
            vectors = np.load(self._file(space).with_suffix(".npy"), allow_pickle=False)
        except (OSError, ValueError):
            return None
        return vectors if vectors.ndim == 2 and len(vectors) == n else None

    def _save_vectors(self, space: Space, vectors: np.ndarray) -> None:
        path = self._file(space).with_suffix(".npy")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".npy.tmp"), "wb") as f:
                np.save(f, vectors, allow_pickle=False)
            path.with_suffix(".npy.tmp").replace(path)
        except OSError:
            pass

    def _save(self, space: Space, bg: Background) -> None:
        path = self._file(space)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"location": self.store.location, "count": bg.count, "model": bg.model,
                                       "scales": bg.scales, "ids": bg.ids}))
            tmp.replace(path)
        except OSError:  # a read-only data dir: the sample is kept in memory only
            pass


def _stale(bg: Background | None, count: int, model: str) -> bool:
    """Whether a background cannot serve a collection of ``count`` points under ``model``: a new sample is due."""
    return bg is None or bg.model != model or abs(count - bg.count) > REFRESH * max(bg.count, 1)


def _both(a: models.Filter | None, b: models.Filter | None) -> models.Filter | None:
    if a is None or b is None:
        return a or b
    return models.Filter(must=[a, b])


MODEL_CHECK_S = 1.0  # how long a build's id is trusted before its manifest is looked at again
_MODEL_IDS: dict[tuple[str, Path], tuple[float, int, str]] = {}  # (family, repo) -> (checked at, manifest mtime, id)


def _model_id(fam: Family, repo: Path) -> str:
    """Which build of the model the scales belong to (a rebuilt model scores differently). Every
    search asks: the manifest is looked at (a stat, and a read when it changed) at most once a
    second, so a rebuild is seen within a second."""
    key = (fam.family, repo)
    now = time.monotonic()
    known = _MODEL_IDS.get(key)
    if known is not None and now - known[0] < MODEL_CHECK_S:
        return known[2]
    path = fam.manifest_path(repo)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return ""
    if known is not None and known[1] == stamp:
        model = known[2]
    else:
        try:
            manifest = fam.manifest(repo) or {}
        except (OSError, ValueError):
            return ""
        model = f"{manifest.get('source', '')}@{manifest.get('built_at', '')}"
    _MODEL_IDS[key] = (now, stamp, model)
    return model

