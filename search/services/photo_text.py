"""The words in photos, for photo search: which photos hold a query's words, and the text each
photo hit shows.

A photo's text is read once, at ingest, when a served model reads text (`indexer ingest
--ocr-photos`): its lines become passages of the documents collection (document search finds them
like any page), and each of those passages keeps its distinct words (payload "words", a keyword
index). Photo search joins the two collections by content id (sha256), so the text is stored once
and a photo is found by its words also where no image model is built."""

from __future__ import annotations

from dataclasses import dataclass

from qdrant_client import models

from search.media.photos import IMAGE_SUFFIXES
from search.services.filters import folder_condition, suffix_condition
from search.services.options import ImageFilters
from search.services.results import ImageHit
from search.store import DOCUMENTS
from search.terms import content_words

WORDS_DEPTH = 2_000  # an image's passages looked at per query (the keyword index picks them)
MIN_SHARE = 0.5  # a photo qualifies when it holds at least this share of the query's content words
RRF_K = 60  # reciprocal rank fusion of the image model's ranking and the words' ranking
PHOTO_TEXT_CHARS = 2_000  # of a photo's text in a hit


@dataclass(frozen=True)
class Worded:
    """A photo found by its words: the share of the query's content words it holds, and the passage
    that stands for it where the photo collection has no point for it."""

    sha256: str
    share: float
    payload: dict


class PhotoText:
    def _by_words(self, text: str, kb: str | None, filters: ImageFilters) -> list[Worded]:
        """Photos whose recognised text holds at least MIN_SHARE of the query's content words (whole
        words: "re16" finds "RE16-A"), the most words first, then the surer reading."""
        wanted = content_words(text)
        collection = self._collection(kb, DOCUMENTS.name)
        if not wanted or self.store.is_empty(collection):
            return []
        must = [suffix_condition(filters.types or IMAGE_SUFFIXES),
                models.FieldCondition(key="words", match=models.MatchAny(any=wanted))]
        if filters.folder:
            must.append(folder_condition(filters.folder))
        points, _ = self.store.scroll(collection, models.Filter(must=must), limit=WORDS_DEPTH)
        found: dict[str, tuple[set, dict]] = {}
        for p in points:
            pl = p.payload or {}
            held, first = found.setdefault(pl.get("sha256", ""), (set(), pl))
            held.update(set(pl.get("words") or ()) & set(wanted))
        ranked = [Worded(sha, len(held) / len(wanted), pl) for sha, (held, pl) in found.items()
                  if sha and len(held) / len(wanted) >= MIN_SHARE]
        ranked.sort(key=lambda w: (-w.share, -((w.payload.get("ocr") or {}).get("score") or 0.0), w.payload.get("path", "")))
        return ranked

    def _texts_read(self, kb: str | None) -> bool:
        """Whether ingest read the text of any image of ``kb``."""
        collection = self._collection(kb, DOCUMENTS.name)
        if self.store.is_empty(collection):
            return False
        return bool(self.store.scroll(collection, models.Filter(must=[suffix_condition(IMAGE_SUFFIXES)]), limit=1,
                                      with_payload=False)[0])

    def _texts(self, sha256s: list[str], kb: str | None) -> dict[str, str]:
        """The recognised text of each photo (by content id) that ingest read, its passages in order."""
        collection = self._collection(kb, DOCUMENTS.name)
        if not sha256s or self.store.is_empty(collection):
            return {}
        flt = models.Filter(must=[suffix_condition(IMAGE_SUFFIXES),
                                  models.FieldCondition(key="sha256", match=models.MatchAny(any=sha256s))])
        points, _ = self.store.scroll(collection, flt, limit=16 * len(sha256s),
                                      with_payload=["sha256", "page", "start", "end", "text"])
        parts: dict[str, list[tuple]] = {}
        for p in points:
            pl = p.payload or {}
            if pl.get("text"):
                parts.setdefault(pl["sha256"], []).append((pl.get("page") or 0, pl.get("start") or 0, pl.get("end") or 0, pl["text"]))
        return {sha: _joined(sorted(chunks)) for sha, chunks in parts.items()}

    def _fused(self, by_image: list[ImageHit], by_words: list[Worded], photos: str, filters: ImageFilters,
               flt: models.Filter | None) -> list[ImageHit]:
        """The image model's hits and the photos found by words in one ranking (reciprocal rank
        fusion). A photo found only by its words comes from the photo collection (its EXIF, its
        thumbnail; the photo filters apply) or, where that has no point for it, from its passage
        (then only folder and type filters can apply)."""
        if not by_words:
            return by_image
        fused: dict[str, float] = {}
        for ranking in ([h.sha256 for h in by_image], [w.sha256 for w in by_words]):
            for rank, sha in enumerate(ranking):
                fused[sha] = fused.get(sha, 0.0) + 1.0 / (RRF_K + rank + 1)
        hits = {h.sha256: h for h in by_image}
        missing = [w for w in by_words if w.sha256 not in hits]
        if missing and not self.store.is_empty(photos):
            cond = models.FieldCondition(key="sha256", match=models.MatchAny(any=[w.sha256 for w in missing]))
            points, _ = self.store.scroll(photos, models.Filter(must=[cond, *(flt.must if flt else [])]), limit=len(missing))
            hits.update({h.sha256: h for h in map(ImageHit.from_point, points)})
        exif = any(x is not None for x in (filters.after, filters.before, filters.camera, filters.near))
        share = {w.sha256: w.share for w in by_words}
        for w in missing:
            if w.sha256 not in hits and not exif:  # no photo point (no image model, or it failed there)
                hits[w.sha256] = ImageHit.from_passage(w.payload)
        imaged = {h.sha256 for h in by_image}
        out = []
        for sha in sorted(hits, key=lambda s: -fused[s]):  # stable: the image model's order breaks ties
            found_by = ("image",) * (sha in imaged) + ("words",) * (sha in share)
            out.append(hits[sha].found(found_by, share.get(sha)))
        return out


def _joined(chunks: list[tuple]) -> str:
    """A photo's text from its passages (page, start, end, text), each overlap with the one before
    left out (a passage is its page's text from start to end)."""
    out, page, upto = [], None, 0
    for number, start, end, text in chunks:
        if number != page:
            page, upto = number, 0
            out.append("\n" if out else "")
        if end <= upto:
            continue
        out.append(text[max(0, upto - start):])
        upto = end
    text = "".join(out)
    return text if len(text) <= PHOTO_TEXT_CHARS else text[: PHOTO_TEXT_CHARS - 1].rstrip() + "…"
