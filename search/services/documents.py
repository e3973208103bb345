"""Document search: MiniLM semantic search, and BGE-M3's dense, sparse and hybrid modes."""

from __future__ import annotations

from qdrant_client import models

from search.errors import BadRequest, EmptyCollection, ModelNotReady, not_served
from search.models import bge_m3, family, minilm
from search.services.filters import document_filter
from search.services.options import MODES, check_max_chars, check_top_k
from search.services.relevance import DOCUMENT_SPACES, Relevance, check_min_relevance
from search.services.results import DocumentHit, HitList
from search.store import DOCUMENTS

BGE_M3 = family("bge_m3")
HYBRID_CANDIDATES = 50  # per prefetch (dense, sparse) before fusion and the ColBERT re-rank


class DocumentSearch(Relevance):
    def search_documents(self, query: str, *, top_k: int = 5, min_score: float | None = None,
                         folder: str | None = None, mode: str | None = None,
                         suffixes: tuple[str, ...] | list[str] = (), max_chars: int | None = None,
                         full_text: bool = False, min_relevance: float | None = None) -> HitList:
        """Passages that match ``query``, with citations and their calibrated relevance. ``mode``:
        one of MODES (default: the ``search_mode`` setting, "auto"). Each hit's text stops near
        ``max_chars`` characters (default HIT_CHARS; the hit says truncated and the whole length), or
        is whole with ``full_text``. ``min_relevance`` hides hits that are not that clearly above the
        collection's background (``no_match`` when none is)."""
        limit = check_max_chars(max_chars, full_text)
        found = self._find_documents(query, top_k=top_k, min_score=min_score, folder=folder, mode=mode,
                                     suffixes=suffixes, min_relevance=min_relevance)
        return found.rewrap([h.bounded(limit) for h in found])

    def _find_documents(self, query: str, *, top_k: int, min_score: float | None, folder: str | None,
                        mode: str | None, suffixes: tuple[str, ...] | list[str], min_relevance: float | None) -> HitList:
        mode = mode or self.settings.search_mode
        if mode not in MODES:
            raise BadRequest(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        query = (query or "").strip()
        if not query:
            raise BadRequest("query: must not be empty")
        check_top_k(top_k)
        check_min_relevance(min_relevance)
        if self.store.count(DOCUMENTS.name) == 0:
            raise EmptyCollection("nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)"
                                  + self._legacy_hint())
        mode = self.document_mode(mode)
        flt = document_filter(folder, suffixes)
        if mode == "semantic":
            vectors, _ = minilm.embed(self.triton, [query])
            points = self.store.search(DOCUMENTS.name, "minilm", vectors[0].tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            hits = [DocumentHit.from_point(p, mode) for p in points]
            return self._calibrated(hits, DOCUMENT_SPACES["minilm"], vectors[0].tolist(), flt=flt, min_relevance=min_relevance)
        return self._search_bge_m3(query, mode, top_k=top_k, min_score=min_score, flt=flt, min_relevance=min_relevance)

    def document_mode(self, mode: str) -> str:
        """The mode a search in ``mode`` runs in: auto -> hybrid when the index has BGE-M3 vectors and
        the model is served, else semantic. A BGE-M3 mode that cannot run raises, saying why."""
        if mode == "semantic":
            return mode
        served = self.triton.model_ready(BGE_M3.ensembles[0])
        indexed = self.store.count_where(DOCUMENTS.name, "models", BGE_M3.family) > 0
        if mode == "auto":
            return "hybrid" if served and indexed else "semantic"
        if not served:
            raise ModelNotReady(not_served(BGE_M3.ensembles[0], BGE_M3.display) + " (or use --mode semantic)")
        if not indexed:
            raise EmptyCollection(f"no documents have {BGE_M3.display} vectors yet (needed for --mode {mode}): "
                                  f"run `indexer ingest PATH` again now that {BGE_M3.display} is served, or use --mode semantic")
        return mode

    def _search_bge_m3(self, query: str, mode: str, *, top_k: int, min_score: float | None,
                       flt: models.Filter | None, min_relevance: float | None = None) -> HitList:
        q = bge_m3.encode(self.triton, [query], colbert=mode == "hybrid")[0]
        sparse = models.SparseVector(indices=list(q.sparse), values=list(q.sparse.values()))
        if mode == "dense":
            points = self.store.search(DOCUMENTS.name, "bge_dense", q.dense.tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            hits = [DocumentHit.from_point(p, mode) for p in points]
            return self._calibrated(hits, DOCUMENT_SPACES["bge_dense"], q.dense.tolist(), flt=flt, min_relevance=min_relevance)
        if mode == "sparse":
            if not q.sparse:
                return HitList()  # nothing but special tokens: no lexical evidence
            points = self.store.search(DOCUMENTS.name, "bge_sparse", sparse, limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            hits = [DocumentHit.from_point(p, mode) for p in points]
            return self._calibrated(hits, DOCUMENT_SPACES["bge_sparse"], sparse, flt=flt, min_relevance=min_relevance)
        # hybrid: dense and sparse candidates, fused by rank (RRF), re-ranked by ColBERT late interaction.
        depth = max(HYBRID_CANDIDATES, top_k)
        candidates = [models.Prefetch(query=q.dense.tolist(), using="bge_dense", limit=depth, filter=flt)]
        if q.sparse:
            candidates.append(models.Prefetch(query=sparse, using="bge_sparse", limit=depth, filter=flt))
        fused = models.Prefetch(prefetch=candidates, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=depth)
        points = self.store.search(DOCUMENTS.name, "bge_colbert", q.colbert.tolist(), limit=top_k,
                                   query_filter=flt, prefetch=[fused])
        # Qdrant's MAX_SIM sums over query vectors; BGE-M3's ColBERT score is their mean.
        n = len(q.colbert)
        hits = [DocumentHit.from_point(p, mode, scale=1.0 / n) for p in points]
        hits = [h for h in hits if min_score is None or h.score >= min_score]
        return self._calibrated(hits, DOCUMENT_SPACES["bge_colbert"], q.colbert.tolist(), flt=flt, factor=1.0 / n,
                                min_relevance=min_relevance)
