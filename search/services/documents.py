"""Document search: MiniLM semantic search, and BGE-M3's dense, sparse and hybrid modes."""

from __future__ import annotations

from pathlib import Path

from qdrant_client import models

from search.errors import BadRequest, EmptyCollection, ModelNotReady, NotFound, not_served
from search.models import bge_m3, family, minilm
from search.paths import stored
from search.services.base import ServiceBase
from search.services.filters import document_filter
from search.services.options import HIT_CHARS_LIMIT, MODES, check_max_chars, check_top_k
from search.services.results import DocumentHit
from search.store import DOCUMENTS

BGE_M3 = family("bge_m3")
HYBRID_CANDIDATES = 50  # per prefetch (dense, sparse) before fusion and the ColBERT re-rank
DOCUMENT_CHARS = 20_000  # a document's text unless the caller asks for more (up to HIT_CHARS_LIMIT)


class DocumentSearch(ServiceBase):
    def search_documents(self, query: str, *, top_k: int = 5, min_score: float | None = None,
                         folder: str | None = None, mode: str | None = None,
                         suffixes: tuple[str, ...] | list[str] = (), max_chars: int | None = None,
                         full_text: bool = False) -> list[DocumentHit]:
        """Passages that match ``query``, with citations. ``mode``: one of MODES (default: the
        ``search_mode`` setting, "auto"). Each hit's text stops near ``max_chars`` characters (default
        HIT_CHARS; the hit says truncated and the whole length), or is whole with ``full_text``."""
        limit = check_max_chars(max_chars, full_text)
        return [h.bounded(limit) for h in self._find_documents(query, top_k=top_k, min_score=min_score,
                                                                folder=folder, mode=mode, suffixes=suffixes)]

    def _find_documents(self, query: str, *, top_k: int, min_score: float | None, folder: str | None,
                        mode: str | None, suffixes: tuple[str, ...] | list[str]) -> list[DocumentHit]:
        mode = mode or self.settings.search_mode
        if mode not in MODES:
            raise BadRequest(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        query = (query or "").strip()
        if not query:
            raise BadRequest("query: must not be empty")
        check_top_k(top_k)
        if self.store.is_empty(DOCUMENTS.name):
            raise EmptyCollection("nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)"
                                  + self._legacy_hint())
        mode = self.document_mode(mode)
        flt = document_filter(folder, suffixes)
        if mode == "semantic":
            vectors, _ = minilm.embed(self.triton, [query])
            points = self.store.search(DOCUMENTS.name, "minilm", vectors[0].tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [DocumentHit.from_point(p, mode) for p in points]
        return self._search_bge_m3(query, mode, top_k=top_k, min_score=min_score, flt=flt)

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
                       flt: models.Filter | None) -> list[DocumentHit]:
        q = bge_m3.encode(self.triton, [query], colbert=mode == "hybrid")[0]
        sparse = models.SparseVector(indices=list(q.sparse), values=list(q.sparse.values()))
        if mode == "dense":
            points = self.store.search(DOCUMENTS.name, "bge_dense", q.dense.tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [DocumentHit.from_point(p, mode) for p in points]
        if mode == "sparse":
            if not q.sparse:
                return []  # nothing but special tokens: no lexical evidence
            points = self.store.search(DOCUMENTS.name, "bge_sparse", sparse, limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [DocumentHit.from_point(p, mode) for p in points]
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
        return [h for h in hits if min_score is None or h.score >= min_score]

    # -- by id: what a bot fetches after a search (a passage's neighbours, a whole document)
    def get_passage(self, passage_id: str | None = None, *, path: str | None = None, chunk: int | None = None,
                    max_chars: int | None = None, full_text: bool = False) -> DocumentHit:
        """One passage by its id (``SHA256:CHUNK``, as hits give it) or by a file's path and chunk number."""
        limit = check_max_chars(max_chars, full_text)
        if passage_id:
            sha, _, number = passage_id.strip().rpartition(":")
            if not sha or not number.isdigit():
                raise BadRequest(f"id: not a passage id (SHA256:CHUNK), got {passage_id!r}", "id")
            which, chunk = models.FieldCondition(key="sha256", match=models.MatchValue(value=sha)), int(number)
        elif path and chunk is not None:
            which = self._path_condition(path)
        else:
            raise BadRequest("id: give a passage id, or a path and a chunk number", "id")
        flt = models.Filter(must=[which, models.FieldCondition(key="chunk", match=models.MatchValue(value=int(chunk)))])
        points, _ = self.store.scroll(DOCUMENTS.name, flt, limit=1)
        if not points:
            raise NotFound(f"no passage {passage_id or f'{path} chunk {chunk}'} in the index", "id" if passage_id else "path")
        return DocumentHit.from_point(points[0], "lookup").bounded(limit)

    def get_document(self, path: str | None = None, *, sha256: str | None = None,
                     max_chars: int = DOCUMENT_CHARS) -> dict:
        """A document's indexed text, its chunks in order, cut at ``max_chars`` (the answer says so)."""
        if not 1 <= max_chars <= HIT_CHARS_LIMIT:
            raise BadRequest(f"max_chars: must be 1..{HIT_CHARS_LIMIT:,}, got {max_chars}", "max_chars")
        if sha256:
            which = models.FieldCondition(key="sha256", match=models.MatchValue(value=sha256.strip()))
        elif path:
            which = self._path_condition(path)
        else:
            raise BadRequest("path: give a document's path (or its sha256)", "path")
        hits, offset = [], None
        while True:
            points, offset = self.store.scroll(DOCUMENTS.name, models.Filter(must=[which]), limit=256, offset=offset)
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

    @staticmethod
    def _path_condition(path: str) -> models.FieldCondition:
        if "\0" in path:
            raise BadRequest("path: must not contain NUL", "path")
        try:
            full = str(Path(path).expanduser().absolute())
        except RuntimeError as exc:
            raise BadRequest(f"path: cannot use {path!r}", "path") from exc
        return models.FieldCondition(key="paths", match=models.MatchValue(value=stored(full)))
