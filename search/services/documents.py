"""Document search in the modes of the families that embed documents (the model registry): the
required family's, and those of optional families whose vectors join when they are served."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from qdrant_client import models

from search.errors import BadRequest, EmptyCollection, ModelNotReady, ModelUnhealthy, NotFound, not_served
from search.models import for_kind, for_mode, required, search_modes
from search.models.base import Ranking
from search.services.filters import content_condition, document_filter, path_condition
from search.services.options import HIT_CHARS_LIMIT, check_group_size, check_max_chars, check_page, check_search_mode
from search.services.relevance import DOCUMENT_SPACES, Relevance, check_min_relevance
from search.services.results import DocumentGroup, DocumentHit, HitList
from search.services.steps import Batched, Blocking, Steps
from search.store import DEFAULT_KB, DOCUMENTS, Store
from search.terms import codes

BASE = required(DOCUMENTS.name)  # the required family: documents are always indexed with it
# Candidates per fused search before fusion and the re-rank: the first step that reaches offset + top_k.
FUSED_DEPTHS = (50, 200, 1_000, 10_000)
EXACT_DEPTH = 50  # passages holding a query's numbers and codes that come first, at most
DOCUMENT_CHARS = 20_000  # a document's text unless the caller asks for more (up to HIT_CHARS_LIMIT)
# Auto mode reuses an optional family's "served" this long: asking Triton on every query costs a
# gRPC round trip of the serving process's CPU
READY_TTL_S = 5.0


class DocumentSearch(Relevance):
    def search_documents(self, query: str, *, top_k: int = 5, offset: int = 0, min_score: float | None = None,
                         folder: str | None = None, mode: str | None = None,
                         types: tuple[str, ...] | list[str] = (), max_chars: int | None = None,
                         full_text: bool = False, kb: str | None = None, min_relevance: float | None = None,
                         encoded: EncodedQuery | None = None) -> HitList:
        """Passages matching ``query``, with citations and calibrated relevance: the ``top_k`` best
        after ``offset`` (pages concatenate to one ranking). ``mode``: one of options.MODES (default: the
        ``search_mode`` setting). Hit text stops near ``max_chars`` (default HIT_CHARS; marked
        truncated) unless ``full_text``. ``kb``: None for the default. ``min_relevance`` hides hits not
        that clearly above the collection's background (``no_match`` when none is). ``encoded``: the
        query already encoded (``encode_query``)."""
        limit = check_max_chars(max_chars, full_text)
        check_page(top_k, offset)
        check_min_relevance(min_relevance)
        found = self._find_documents(query, ResultPage(top_k, offset), min_score=min_score, folder=folder, mode=mode,
                                     types=types, kb=kb, min_relevance=min_relevance, encoded=encoded)
        return found.rewrap([h.bounded(limit).marked(query) for h in found])

    def search_document_groups(self, query: str, *, top_k: int = 5, offset: int = 0, group_size: int = 1,
                               min_score: float | None = None, folder: str | None = None, mode: str | None = None,
                               types: tuple[str, ...] | list[str] = (), max_chars: int | None = None,
                               full_text: bool = False, kb: str | None = None,
                               encoded: EncodedQuery | None = None) -> list[DocumentGroup]:
        """Per-document results (group_by=document): the ``top_k`` best documents after skipping
        ``offset`` documents, in the order of their best passage, each with up to ``group_size`` of
        its best passages and how many more of its passages the search ranked (see Store.search_groups).
        The other arguments are search_documents' (groups carry no calibrated relevance yet)."""
        limit = check_max_chars(max_chars, full_text)
        check_page(top_k, offset)
        check_group_size(group_size)
        groups = self._find_documents(query, ResultPage(top_k, offset, group_size), min_score=min_score, folder=folder,
                                      mode=mode, types=types, kb=kb, encoded=encoded)
        return [DocumentGroup([h.bounded(limit).marked(query) for h in g.hits], g.more) for g in groups]

    def _find_documents(self, query: str, page: ResultPage, *, min_score: float | None, folder: str | None,
                        mode: str | None, types: tuple[str, ...] | list[str], kb: str | None,
                        min_relevance: float | None = None, encoded: EncodedQuery | None = None) -> list:
        if encoded is None:
            encoded = self.encode_query(query, mode=mode, kb=kb).run()
        elif (encoded.text, encoded.asked, encoded.kb) != ((query or "").strip(), mode or self.settings.search_mode, kb):
            raise ValueError("encoded: the query was encoded for another text, mode or knowledge base")
        run = _Run(self.store, encoded.collection, page, document_filter(folder, types))
        return self._hits(run, encoded, min_score, min_relevance)

    def _target(self, query: str, mode: str | None, kb: str | None) -> Target:
        """What a query searches, after the checks that need no model."""
        if not mode:
            mode = check_search_mode(self.settings.search_mode)
        elif mode not in (modes := search_modes(DOCUMENTS.name)):
            raise BadRequest(f"mode: must be one of {', '.join(modes)}, got {mode!r}")
        query = (query or "").strip()
        if not query:
            raise BadRequest("query: must not be empty")
        collection = self._collection(kb, DOCUMENTS.name)
        if self.store.is_empty(collection):
            if kb not in (None, DEFAULT_KB):
                raise EmptyCollection(f"kb: nothing indexed in knowledge base {kb!r} yet: run `indexer ingest PATH --kb {kb}`")
            raise EmptyCollection("nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)"
                                  + self._legacy_hint())
        return Target(query, mode, kb, collection)

    def encode_query(self, query: str, *, mode: str | None = None, kb: str | None = None) -> Steps[EncodedQuery]:
        """A document query encoded by its mode's served model (checks and errors as ``search_documents``'):
        ``.run()`` in a thread, or ``await`` it in an event loop, whose store half is then
        ``search_documents(..., encoded=...)`` (or ``search_document_groups``)."""
        return Steps(self._encoding(self._target(query, mode, kb)), self.resources.batchers)

    def _encoding(self, target: Target):
        served = {}
        for fam in _optional(target.asked):  # a "ready" remembered costs nothing; asking Triton blocks
            name, ttl = fam.ensembles[0], _ready_ttl(target.asked)
            served[fam.family] = (self.triton.known_ready(name, ttl)
                                  or (yield Blocking(functools.partial(self.triton.model_ready, name, max_age_s=ttl))))
        mode = self.document_mode(target.asked, target.kb, served=served)
        fam = for_mode(mode)
        try:
            return target.encoded(mode, (yield from _ranking(fam, mode, target.text)))
        except ModelNotReady as exc:
            _fall_back_or_raise(target, fam, exc)
        return target.encoded(BASE.best_mode, (yield from _ranking(BASE, BASE.best_mode, target.text)))

    def needs_sampling(self, encoded: EncodedQuery, *, grouped: bool = False) -> bool:
        """Whether the store half of ``encoded``'s search would first draw its relevance background (a
        new collection, or one whose size moved: see Relevance.background_ready). Grouped searches
        carry no relevance."""
        return not grouped and not self.background_ready(replace(DOCUMENT_SPACES[_vector(encoded.mode)],
                                                                  collection=encoded.collection))

    def document_mode(self, mode: str, kb: str | None = None, *, served: dict[str, bool] | None = None) -> str:
        """The mode a search in ``mode`` runs in: auto -> the best mode of the first optional family
        whose model is served and whose vectors the index has, else the required family's. A mode of
        an optional family that cannot run raises, saying why. ``served``: family -> whether it is
        served, when the caller already asked Triton."""
        served = served or {}
        for fam in _optional(mode):
            ready = served.get(fam.family)
            if ready is None:
                ready = self.triton.model_ready(fam.ensembles[0], max_age_s=_ready_ttl(mode))
            indexed = self.store.any_where(self._collection(kb, DOCUMENTS.name), "models", fam.family)
            if mode == "auto":
                if ready and indexed:
                    return fam.best_mode
                continue
            fallback = f"--mode {BASE.best_mode}"
            if not ready:
                raise ModelNotReady(not_served(fam.ensembles[0], fam.display) + f" (or use {fallback})")
            if not indexed:
                raise EmptyCollection(f"no documents have {fam.display} vectors yet (needed for --mode {mode}): "
                                      f"run `indexer ingest PATH` again now that {fam.display} is served, or use {fallback}")
        return BASE.best_mode if mode == "auto" else mode

    def _hits(self, run: _Run, encoded: EncodedQuery, min_score: float | None, min_relevance: float | None) -> list:
        ranking = encoded.ranking
        if ranking is None:
            return HitList()  # e.g. nothing but special tokens for a lexical mode: no evidence
        if run.page.group_size is None and (wanted := codes(encoded.text)):
            return self._exact_first(run, encoded, ranking, wanted, min_score, min_relevance)
        return self._ranked(run, encoded, ranking, min_score, min_relevance)

    def _exact_first(self, run: _Run, encoded: EncodedQuery, ranking, wanted: list[str], min_score: float | None,
                     min_relevance: float | None) -> list:
        """The passages that hold every number and code of the query as typed (an invoice number, an
        amount: what dense vectors rank poorly), by their score, then the ranking of the others: one
        ranking, paged as any. An exact passage is relevant by what it holds (relevance 1.0)."""
        held = models.Filter(must=[models.FieldCondition(key="codes", match=models.MatchValue(value=c)) for c in wanted])
        exact = self._found(replace(run, page=ResultPage(EXACT_DEPTH), flt=_both(run.flt, held)), encoded, ranking, min_score)
        if not exact:
            return self._ranked(run, encoded, ranking, min_score, min_relevance)
        exact = [replace(h, relevance=1.0, exact=True) for h in exact]
        shown, wanted_more = exact[run.page.offset:run.page.end], run.page.top_k
        wanted_more -= len(shown)
        others = HitList()
        if wanted_more > 0:
            rest = replace(run, page=ResultPage(wanted_more, max(0, run.page.offset - len(exact))),
                           flt=_both(run.flt, models.Filter(must_not=[held])))
            others = self._ranked(rest, encoded, ranking, min_score, min_relevance)
        return HitList([*shown, *others], note=others.note, min_relevance=min_relevance, best=1.0)

    def _ranked(self, run: _Run, encoded: EncodedQuery, ranking, min_score: float | None,
                min_relevance: float | None) -> list:
        found = self._found(run, encoded, ranking, min_score)
        if run.page.group_size is not None:
            return found  # groups carry no relevance
        best = None
        if run.page.offset and found:  # a later page: a hit is rated against the ranking's best, not the page's
            best = max((h.score for h in self._found(replace(run, page=ResultPage(1)), encoded, ranking, None)), default=None)
        space = replace(DOCUMENT_SPACES[ranking.vector], collection=run.collection)
        return self._calibrated(found, space, _query(ranking.query), flt=run.flt, factor=ranking.scale,
                                min_relevance=min_relevance, best=best)

    @staticmethod
    def _found(run: _Run, encoded: EncodedQuery, ranking, min_score: float | None) -> list:
        """The run's page of the ranking (a fused ranking's candidates under the run's filter too)."""
        prefetch = None
        if ranking.fused:  # the candidate depth comes in steps, so the pages of one ranking see the same candidates
            depth = next((d for d in FUSED_DEPTHS if d >= run.page.end), run.page.end)
            candidates = [models.Prefetch(query=_query(q), using=using, limit=depth, filter=run.flt) for using, q in ranking.fused]
            prefetch = [models.Prefetch(prefetch=candidates, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=depth)]
        return run.hits(encoded.mode, ranking.vector, _query(ranking.query), min_score, prefetch=prefetch,
                        scale=ranking.scale)

    # -- by id: what a bot fetches after a search (a passage's neighbours, a whole document)
    def get_passage(self, passage_id: str | None = None, *, path: str | None = None, chunk: int | None = None,
                    max_chars: int | None = None, full_text: bool = False, kb: str | None = None) -> DocumentHit:
        """One passage of knowledge base ``kb`` by its id (``SHA256:CHUNK``, as hits give it) or by a file's
        path and chunk number."""
        limit = check_max_chars(max_chars, full_text)
        if passage_id:
            sha, _, number = passage_id.strip().rpartition(":")
            if not sha or not number.isdigit():
                raise BadRequest(f"id: not a passage id (SHA256:CHUNK), got {passage_id!r}", "id")
            which, chunk = content_condition(sha), int(number)
        elif path and chunk is not None:
            which = path_condition(path)
        else:
            raise BadRequest("id: give a passage id, or a path and a chunk number", "id")
        flt = models.Filter(must=[which, models.FieldCondition(key="chunk", match=models.MatchValue(value=int(chunk)))])
        collection = self._collection(kb, DOCUMENTS.name)
        points = [] if self.store.is_empty(collection) else self.store.scroll(collection, flt, limit=1)[0]
        if not points:
            raise NotFound(f"no passage {passage_id or f'{path} chunk {chunk}'} in the index", "id" if passage_id else "path")
        return DocumentHit.from_point(points[0], "lookup").bounded(limit)

    def get_document(self, path: str | None = None, *, sha256: str | None = None,
                     max_chars: int = DOCUMENT_CHARS, kb: str | None = None) -> dict:
        """A document's indexed text in knowledge base ``kb``, its chunks in order, cut at ``max_chars``
        (the answer says so)."""
        if not 1 <= max_chars <= HIT_CHARS_LIMIT:
            raise BadRequest(f"max_chars: must be 1..{HIT_CHARS_LIMIT:,}, got {max_chars}", "max_chars")
        if sha256:
            which = content_condition(sha256)
        elif path:
            which = path_condition(path)
        else:
            raise BadRequest("path: give a document's path (or its sha256)", "path")
        hits, offset, collection = [], None, self._collection(kb, DOCUMENTS.name)
        while not self.store.is_empty(collection):
            points, offset = self.store.scroll(collection, models.Filter(must=[which]), limit=256, offset=offset)
            hits += [DocumentHit.from_point(p, "lookup") for p in points]
            if offset is None or not points:
                break
        if not hits:
            raise NotFound(f"no document {path or sha256} in the index", "path" if path else "sha256")
        hits.sort(key=lambda h: h.chunk)
        seen = {}
        for h in hits:  # one passage per chunk number (a file's chunks come from one version of it)
            seen.setdefault(h.chunk, h)
        text = "\n\n".join(h.text.strip() for h in seen.values())
        first = hits[0]
        return {"path": first.display_path, "paths": [str(p) for p in first.paths], "sha256": first.sha256,
                "title": first.title, "chunks": len(seen), "length": len(text), "truncated": len(text) > max_chars,
                "text": text[:max_chars]}


@dataclass(frozen=True)
class EncodedQuery:
    """A document query and its encoding by the served model of the mode it runs in."""

    text: str  # stripped
    asked: str  # the mode asked for (e.g. auto)
    mode: str  # the mode it runs in
    kb: str | None
    collection: str
    ranking: Ranking | None  # how it ranks the documents (None: nothing to rank by)


@dataclass(frozen=True)
class Target:
    """What a document query searches, before its encoding."""

    text: str
    asked: str
    kb: str | None
    collection: str

    def encoded(self, mode: str, ranking: Ranking | None) -> EncodedQuery:
        return EncodedQuery(self.text, self.asked, mode, self.kb, self.collection, ranking)


@dataclass(frozen=True)
class ResultPage:
    """Which hits of a ranking a search returns: top_k after skipping offset."""
    top_k: int
    offset: int = 0
    group_size: int | None = None  # grouped by document when set

    @property
    def end(self) -> int:
        return self.offset + self.top_k


@dataclass(frozen=True)
class _Run:
    """One search's store, collection, page and filter: hits, or groups of hits by document."""

    store: Store
    collection: str
    page: ResultPage
    flt: models.Filter | None

    def hits(self, mode: str, using: str, vector, min_score: float | None, *,
             prefetch: list[models.Prefetch] | None = None, scale: float = 1.0) -> list:
        threshold = None if min_score is None else min_score / scale  # the store's raw score
        if self.page.group_size is None:
            points = self.store.search(self.collection, using, vector, limit=self.page.top_k, offset=self.page.offset,
                                       query_filter=self.flt, score_threshold=threshold, prefetch=prefetch)
            return [DocumentHit.from_point(p, mode, scale) for p in points]
        groups = self.store.search_groups(self.collection, using, vector, group_by="sha256", limit=self.page.top_k,
                                          group_size=self.page.group_size, offset=self.page.offset,
                                          query_filter=self.flt, score_threshold=threshold, prefetch=prefetch)
        return [DocumentGroup([DocumentHit.from_point(p, mode, scale) for p in g.hits], g.matched - len(g.hits))
                for g in groups]


def _ranking(fam, mode: str, text: str):
    """The query's ranking in ``mode``: the family asked once (Family.search_query), its model's answer waited for."""
    query = fam.search_query(mode, text)
    return query.rank((yield Batched(query.model, query.item)))


def _ready_ttl(mode: str) -> float:
    """Auto mode reuses a recent "served"; a query that then finds the model gone runs in the required
    family's mode (``_fall_back_or_raise``). An explicit mode asks each time, so that its error says what to do."""
    return READY_TTL_S if mode == "auto" else 0.0


def _fall_back_or_raise(target: Target, fam, exc: ModelNotReady) -> None:
    """An optional model gone since auto mode last saw it served: the query runs in the required
    family's mode, as auto does without it. A crashed model (ModelUnhealthy) and the explicit modes
    keep their error."""
    if target.asked != "auto" or not fam.optional or isinstance(exc, ModelUnhealthy):
        raise exc


def _optional(mode: str) -> list:
    """The optional families whose readiness decides a search in ``mode``: auto's candidates, or the
    mode's own family (none for a required family's mode)."""
    if mode == "auto":
        return [f for f in for_kind(DOCUMENTS.name) if f.optional and f.best_mode]
    fam = for_mode(mode)
    return [fam] if fam.optional else []


def _vector(mode: str) -> str:
    """The store vector a mode's hits are ranked and calibrated by."""
    return for_mode(mode).modes[mode]


def _both(flt: models.Filter | None, more: models.Filter) -> models.Filter:
    return more if flt is None else models.Filter(must=[flt, more])


def _query(value):
    """A ranking's query as the store takes it: sparse weights {token id: weight} as a SparseVector."""
    if isinstance(value, dict):
        return models.SparseVector(indices=list(value), values=list(value.values()))
    return value
