"""Calibrated relevance: how far a hit stands above what an unrelated query finds (docs/relevance.md).

A raw score (cosine, lexical weight, ColBERT) means different things per model, per mode and per
collection. This module measures, once per collection, vector and served model, what an *unrelated*
query scores: fixed off-topic probes (everyday sentences; photos for photo queries, through the same
served model) are searched in the collection, and the best score each finds is noted. The best of M
unrelated points follows a Gumbel law (the law of maxima), fitted to those best scores by their
lower and upper quartiles (a collection that is about some probes lifts only the upper ones). Then

    relevance(score) = G(score) = exp(-exp(-(score - mu) / beta))
                     = P(an unrelated query's best hit in this collection scores below this one)

so 0.97 (the default threshold) is a score that 97 unrelated queries in 100 do not reach. Passages'
dense and ColBERT vectors are probed twice: by everyday sentences and by search-box questions on
other subjects ("what is a hedgehog"; one whose best hit names its subject is on topic and left
out), each kind fitted alone; a hit is rated by the stricter law, min(G_everyday, G_asked). A
collection on one subject (a programming reference) matches how questions are phrased: there the
second law lies higher, elsewhere mostly the first. A hit below the search's best is rated at its
own score while within SLACK spreads of the best, lowered by the distance past that further down,
G(score - max(0, best - score - SLACK * beta)): a hit far below the best is not vouched for however
far above the unrelated level it is. A filtered search over M' of the M points uses the law of the probes' k-th best scores, k = M / M'
(the k-th best of M points is the best of about M / k), up to k = 128: past it, that law (stricter
than the exact one).

Dense vectors: the probes search the whole collection. Sparse and ColBERT: a random sample of the
points (SAMPLE, SAMPLE_MULTIVECTOR), the law moved to the collection's size by beta * ln(M / sample),
the Gumbel shift of a maximum over more points. The fit is kept in ``<data dir>/relevance/`` and
made again when the collection's size moves by more than 10 % or the model is rebuilt.
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
from search.models import Family, for_kind, golden, required
from search.services import relevance_probes
from search.services.base import ServiceBase
from search.services.results import HitList
from search.store import DOCUMENTS, IMAGES, image_vector, match
from search.terms import query_stems, stem, words

SAMPLE = 2000  # sparse vectors: the points the probes are scored against
SAMPLE_MULTIVECTOR = 500  # ColBERT: each sampled point costs a late-interaction score
MIN_POINTS = 30  # fewer points than this: no calibration (the unrelated level would be the hits themselves)
REFRESH = 0.10  # fit again when the collection's size moved by more than this fraction
FILTER_COUNT_TTL_S = 30.0  # a filtered search's point count is reused this long while the collection's size holds
FILTER_COUNTS = 256  # filters whose counts are kept
# Gumbel quantile positions -ln(-ln p) of the quartiles the fit reads: p = 0.25 and 0.75. The middle
# half of the probes: twice as many as the lower half for the spread (a steadier fit on 60 probes,
# measured on five kinds of corpus in bench/bench_relevance.py), and still clear of the upper quarter
# that a collection about some probes' subjects lifts.
Q25, Q50, Q75 = (-math.log(-math.log(p)) for p in (0.25, 0.5, 0.75))
# The probes' k-th best scores fitted too: the k-th best of M points is the best of about M / k, the
# law of a filtered search over fewer points, measured rather than extrapolated.
RANKS = (1, 2, 4, 8, 16, 32, 64, 128)
# A hit this many spreads (beta) below the best is rated at its own score; only the distance past it
# lowers its rating. Among unrelated points the 8th best lies about beta * ln 8 = 2.1 beta below the
# best: a gap of that size says nothing against a hit.
SLACK = 2.0
# Search-box probes left after those naming their subject: fewer than this, no second law (a
# collection on most of their subjects: an encyclopedia, where the everyday law serves).
MIN_ASKED = 24


@dataclass(frozen=True)
class Space:
    """The vector space a search scores in: which collection, which named vector, what the query is."""

    collection: str
    vector: str  # store vector name
    kind: str  # "text" or "image": the probes are queries of the same kind
    family: Family
    sparse: bool = False
    multivector: bool = False
    asked: bool = False  # also probed by search-box questions (passages of text, not sparse: probe_kinds)

    @property
    def sample_filter(self) -> models.Filter | None:
        """The points that carry this vector: an optional family's join documents the required one indexed."""
        return match("models", self.family.family) if self.family.optional else None

    @property
    def probe_kinds(self) -> tuple[str, ...]:
        """The probe families fitted, each a law: photos or everyday sentences (the query's kind), and
        for passages' dense and ColBERT vectors search-box questions too (sparse scores follow the
        shared words, not the phrasing: "what is a" would only match function words there)."""
        return (self.kind, "asked") if self.asked else (self.kind,)

    @property
    def sampled(self) -> bool:
        """Whether probes are scored against a sample of the points (sparse, ColBERT) or the whole collection."""
        return self.sparse or self.multivector


@dataclass
class Background:
    """What unrelated queries score in one collection's vector space."""

    ids: list  # sparse and ColBERT: the sampled point ids the probes are scored against
    count: int  # points carrying the vector when the fit was made
    fits: dict[str, list] = field(default_factory=dict)  # probe kind -> fit_ranks: (points, mu, beta) a rank
    model: str = ""  # the served model's build the fits were measured with


# -- the arithmetic (numpy only)
def gumbel_fit(best_scores) -> tuple[float, float]:
    """(mu, beta) of the Gumbel law whose lower and upper quartiles are those of ``best_scores``; when
    they coincide (sparse scores: most probes share no token), beta is the mean absolute deviation
    from the median, 0 if every score is equal."""
    s = np.asarray(best_scores, np.float64)
    if s.size == 0:
        return 0.0, 0.0
    q25, q50, q75 = (float(v) for v in np.quantile(s, [0.25, 0.5, 0.75]))
    beta = (q75 - q25) / (Q75 - Q25)
    if beta <= 0:
        return q50 - float(np.mean(np.abs(s - q50))) * Q50, float(np.mean(np.abs(s - q50)))
    return q75 - beta * Q75, beta


def relevance(scores, mu: float, beta: float, best: float | None = None) -> np.ndarray:
    """G(score - max(0, best - score - SLACK * beta)) per score, G the Gumbel law (mu, beta): the
    chance that an unrelated query's best hit scores below the hit's score, lowered by how far it
    falls below the ``best`` score past SLACK spreads of the law (a hit close to the best keeps its
    own rating; one far below it is not vouched for)."""
    s = np.asarray(scores, np.float64)
    if s.size == 0:
        return s
    top = float(np.max(s)) if best is None else max(float(best), float(np.max(s)))
    s = s - np.maximum(0.0, top - s - SLACK * max(beta, 0.0))
    if beta <= 0:  # unrelated queries all score the same: anything above it stands out
        return (s > mu).astype(np.float64)
    with np.errstate(over="ignore"):
        return np.exp(-np.exp(-(s - mu) / beta))


def fit_ranks(tops: np.ndarray, points: int) -> list[tuple[float, float, float]]:
    """(points, mu, beta) per rank k of RANKS: the law of the probes' k-th best scores in ``points``
    points, which is the law of the best of ``points / k`` (the first entry: the best of all)."""
    tops = np.asarray(tops, np.float64).reshape(len(tops), -1)
    return [(points / k, *gumbel_fit(tops[:, k - 1])) for k in RANKS if k <= tops.shape[1]]


def law(fits: list, searched: int) -> tuple[float, float]:
    """(mu, beta) of the best of ``searched`` points: the level of the fit of the fewest points that
    still cover them, or, past the first fit's points, that fit moved by beta * ln(searched / points),
    the Gumbel shift of a maximum over more points."""
    points, mu, beta = fits[0]
    if searched >= points:
        return mu + beta * math.log(max(searched, 1) / max(points, 1)), beta
    chosen = fits[0]
    for fit in fits:  # fewer points at each rank
        if fit[0] < searched:
            break
        chosen = fit
    # A k-th best varies less than a best of M / k points: the spread stays the best's at least.
    return chosen[1], max(chosen[2], beta)


def check_min_relevance(value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise BadRequest(f"min_relevance: must be a probability in 0..1, got {value}")


DOCUMENT_SPACES = {name: Space(DOCUMENTS.name, name, "text", f, sparse=v.kind == "sparse", multivector=v.kind == "multivector",
                         asked=v.kind != "sparse")
                   for f in for_kind(DOCUMENTS.name) for name, v in f.vectors.items()}


def image_space(kind: str) -> Space:
    return Space(IMAGES, image_vector(), kind, required(IMAGES))


_CACHE: dict[tuple, Background] = {}
_LOCK = threading.Lock()
_COUNTS: OrderedDict[tuple, tuple[int, int, float]] = OrderedDict()  # -> (collection size, filtered count, when)
_COUNTS_LOCK = threading.Lock()


def fitted(key: tuple, kind: str = "text") -> tuple[float, float] | None:
    """A probe family's law (mu, beta) of the whole collection fitted for a background key, if one is in memory."""
    bg = _CACHE.get(key)
    return tuple(bg.fits[kind][0][1:]) if bg is not None and bg.fits.get(kind) else None


class Relevance(ServiceBase):
    def _calibrated(self, hits: list, space: Space, query, *, flt: models.Filter | None = None, factor: float = 1.0,
                    min_relevance: float | None = None, best: float | None = None) -> HitList:
        """``hits`` with their relevance set, those below ``min_relevance`` dropped. ``factor`` scales
        the store's score to the hit's (hybrid: 1 / query tokens); ``best``: the search's best score
        when ``hits`` are a later page of it."""
        check_min_relevance(min_relevance)
        # Not exact: an exact count scans the collection (10 ms of the GIL at 100k photos, on every query).
        count = self.store.count(space.collection, space.sample_filter, exact=False)
        if count < MIN_POINTS:
            note = (f"relevance needs at least {MIN_POINTS} indexed items to tell a match from what an unrelated "
                    f"query finds (this collection has {count})")
            return HitList(hits, note=note, min_relevance=min_relevance)
        try:
            background = self._background(space, count)
        except (ServiceError, InferenceServerException) as exc:  # the hits stand; only their calibration is missing
            return HitList(hits, note=f"relevance unavailable ({' '.join(str(exc).split())[:200]})", min_relevance=min_relevance)
        searched = count if flt is None else self._filtered_count(space, flt, count)
        points = round(searched * background.count / count)
        laws = [law(background.fits[k], points) for k in space.probe_kinds if background.fits.get(k)]
        scores = [h.score for h in hits]
        values = np.minimum.reduce([relevance(scores, mu * factor, beta * factor, best) for mu, beta in laws])
        rated = [replace(h, relevance=float(v)) for h, v in zip(hits, values)]  # unrounded: no saturation at 1.0
        top = max((h.relevance for h in rated), default=None)
        if min_relevance is None:
            return HitList(rated, best=top)
        kept = [h for h in rated if h.relevance >= min_relevance]
        return HitList(kept, no_match=bool(rated) and not kept, min_relevance=min_relevance, best=top)

    def _filtered_count(self, space: Space, flt: models.Filter, size: int) -> int:
        """How many points a filtered search ran over: the M' of its shift. Counting a filter exactly
        scans the collection (5-10 ms holding the GIL at 100k photos), so a count is reused for the
        same filter while the collection's size (``size``, the cheap count) is unchanged, for up to
        FILTER_COUNT_TTL_S: a user browsing one folder or date range asks it on every query."""
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

    # -- the fit
    def background_ready(self, space: Space) -> bool:
        """Whether a search in ``space`` finds its fit in memory and current: no probes to run (a new fit
        costs the probes' encoding and one search each, well under a second at 100,000 passages, which
        an event loop hands to a thread)."""
        count = self.store.count(space.collection, space.sample_filter, exact=False)
        if count < MIN_POINTS:
            return True  # no calibration
        bg = _CACHE.get(self._background_key(space))
        return (bg is not None and not _stale(bg, count, _model_id(space.family, self.settings.triton_repo))
                and all(k in bg.fits for k in space.probe_kinds))

    def _background_key(self, space: Space) -> tuple:
        return (self.store.location, self.store.prefix, space.collection, space.vector)

    def _background(self, space: Space, count: int) -> Background:
        key = self._background_key(space)
        model = _model_id(space.family, self.settings.triton_repo)
        with _LOCK:
            bg = _CACHE.get(key) or self._load(space)
            if _stale(bg, count, model):
                bg = Background(self._sample(space) if space.sampled else [], count, {}, model)
            missing = [k for k in space.probe_kinds if k not in bg.fits]
            for kind in missing:
                bg.fits[kind] = self._fit(space, bg, kind)
            if missing:
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

    def _fit(self, space: Space, bg: Background, kind: str) -> list:
        """Each probe's best scores in the collection, as the hits are scored (a search of the whole
        collection for dense vectors; of the sample for sparse and ColBERT), fitted rank by rank.
        Search-box probes whose best hit names their subject are left out (on topic here)."""
        depth = min(RANKS[-1], len(bg.ids) if space.sampled else bg.count)
        subjects = [subject for _, subject in relevance_probes.asked()] if kind == "asked" else None
        tops = []
        for i, (query, factor) in enumerate(self._probes(space, kind)):
            flt = models.Filter(must=[models.HasIdCondition(has_id=bg.ids)]) if space.sampled else space.sample_filter
            found = self.store.search(space.collection, space.vector, query, limit=depth, query_filter=flt,
                                      params=models.SearchParams(exact=True) if space.sampled else None,
                                      with_payload=["text"] if subjects else False)
            if subjects and found and names(found[0].payload.get("text") or "", subjects[i]):
                continue
            scores = [float(p.score) * factor for p in found]
            tops.append(scores + [0.0] * (depth - len(scores)))  # sparse: a point sharing no token scores 0
        if subjects and len(tops) < MIN_ASKED:
            return []
        return fit_ranks(np.array(tops), len(bg.ids) if space.sampled else bg.count)

    def _probes(self, space: Space, kind: str) -> list[tuple[object, float]]:
        if kind == "image":
            items = [p.data for p in golden.inputs().photos] + relevance_probes.images()
        elif kind == "asked":
            items = [question for question, _ in relevance_probes.asked()]
        else:
            items = list(relevance_probes.TEXTS)
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
            if raw.get("location") != self.store.location:
                return None
            fits = {k: [(float(p), float(m), float(b)) for p, m, b in v] for k, v in raw["fits"].items()}
            return Background(list(raw["ids"]), int(raw["count"]), fits, raw.get("model", ""))
        except (OSError, ValueError, KeyError, TypeError, IndexError):  # none yet, or one of an older version
            return None

    def _save(self, space: Space, bg: Background) -> None:
        path = self._file(space)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"location": self.store.location, "count": bg.count, "model": bg.model,
                                       "fits": bg.fits, "ids": bg.ids}))
            tmp.replace(path)
        except OSError:  # a read-only data dir: the fit is kept in memory only
            pass


def names(text: str, subject: str) -> bool:
    """Whether ``text`` holds a word with the stem of one of ``subject``'s words ("hedgehogs" for "hedgehog")."""
    return bool(query_stems(subject) & {stem(w) for w in words(text)})


def _stale(bg: Background | None, count: int, model: str) -> bool:
    """Whether a fit cannot serve a collection of ``count`` points under ``model``: a new one is due."""
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

