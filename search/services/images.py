"""Photo search: text to image and image to image (the photos' family), filters, sorting, and
verification by the family that claims the "entail" mode."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from qdrant_client import models

from search.errors import BadRequest, EmptyCollection, ModelNotReady, NotFound
from search.media.files import Outside, Refused, read_regular
from search.media.photos import BadImage, decode_photo, open_photo
from search.models import for_mode, required
from search.services.base import served
from search.services.entailment import PhotoEntailment
from search.services.filters import content_condition, image_filter
from search.services.options import SORTS, ImageFilters, check_top_k
from search.services.photo_text import PhotoText
from search.services.relevance import Relevance, check_min_relevance, image_space
from search.services.results import HitList, ImageHit
from search.store import DEFAULT_KB, IMAGES, image_vector

PHOTOS, ENTAIL = required(IMAGES), for_mode("entail")  # the photos' family, the verifier
NOT_INDEXED = "not a photo of the index (give its id or indexed path, or send the photo as image_base64)"


class ImageSearch(PhotoEntailment, Relevance, PhotoText):
    def search_images(self, text: str | None = None, *, like: Path | bytes | None = None, top_k: int = 12,
                      min_score: float | None = None, filters: ImageFilters = ImageFilters(),
                      sort: str = "score", verify: bool = False, min_entailment: float | None = None,
                      kb: str | None = None, min_relevance: float | None = None) -> HitList:
        """Text-to-image (``text``) or image-to-image (``like``, a photo's path or bytes) search over the
        photo collection; filters first, then the ``min_score`` cut-off, then the calibrated relevance
        (hits below ``min_relevance`` dropped; ``no_match`` when none is left), then (``verify``) the
        re-rank of the top-k hits by the entailment probability of ``text`` (hits below
        ``min_entailment`` dropped), then the sort. ``kb``: the knowledge base searched (None: the
        default one)."""
        text = (text or "").strip() or None
        if (text is None) == (like is None):
            raise BadRequest("give either a text query or an example image (like), not both or neither")
        if min_entailment is not None and not verify:
            raise BadRequest("min_entailment: applies only with verify")
        if min_entailment is not None and not 0 <= min_entailment <= 1:
            raise BadRequest(f"min_entailment: must be a probability in 0..1, got {min_entailment}")
        if verify and text is None:
            raise BadRequest("verify: needs a text query (it checks that each photo entails the text)")
        check_top_k(top_k)
        check_min_relevance(min_relevance)
        if sort not in SORTS:
            raise BadRequest(f"sort: must be one of {', '.join(SORTS)}, got {sort!r}")
        collection = self._collection(kb, IMAGES)
        by_words = self._by_words(text, kb, filters) if text else []
        if self.store.is_empty(collection) and not by_words:
            if text and self._texts_read(kb):  # photos known by their text only (no image model built)
                return HitList([])
            if kb not in (None, DEFAULT_KB):
                raise EmptyCollection(f"kb: no photos in knowledge base {kb!r} yet: run `indexer ingest ./photos --kb {kb}`")
            raise EmptyCollection("no photos indexed yet: run `indexer ingest ./photos`" + self._legacy_hint())
        rated = self._by_image(collection, text, like, top_k, min_score, filters, min_relevance, words=bool(by_words))
        hits = self._fused(list(rated), by_words, collection, filters, image_filter(filters))[:top_k]
        if verify:
            hits = self._verify(text, hits, min_entailment)
        if sort != "score":
            dated = sorted((h for h in hits if h.taken_at is not None), key=lambda h: h.taken_at, reverse=sort == "newest")
            hits = dated + [h for h in hits if h.taken_at is None]
        texts = self._texts([h.sha256 for h in hits], kb)
        hits = [replace(h, text=texts[h.sha256]) if h.sha256 in texts else h for h in hits]
        return rated.rewrap(hits) if not by_words else HitList(hits, note=rated.note, min_relevance=min_relevance,
                                                               best=rated.best)

    def _by_image(self, collection: str, text: str | None, like, top_k: int, min_score: float | None,
                  filters: ImageFilters, min_relevance: float | None, words: bool) -> HitList:
        """The photos' family's hits, with their calibrated relevance. With photos found by ``words``
        already, a photo collection that is empty or an image model that is not served gives none
        (rather than an error)."""
        if words and self.store.is_empty(collection):
            return HitList([])
        model = PHOTOS.query_model if text else PHOTOS.kinds[IMAGES]
        try:
            with served(model, PHOTOS.display):
                if text:
                    vector = self.resources.batchers[PHOTOS.query_model](text).vector
                else:
                    vector = PHOTOS.image_vectors(self.triton, [self._example_image(like)])[0]
        except ModelNotReady:
            if words:
                return HitList([])
            raise
        points = self.store.search(collection, image_vector(), vector.tolist(), limit=top_k,
                                   query_filter=image_filter(filters), score_threshold=min_score)
        space = replace(image_space("text" if text else "image"), collection=collection)
        return self._calibrated([ImageHit.from_point(p) for p in points], space, vector.tolist(),
                                flt=image_filter(filters), min_relevance=min_relevance)

    def photo_path(self, photo: str) -> Path:
        """A photo named by its path or by its id (the sha256 that search hits carry)."""
        if not photo or "\0" in photo:
            raise BadRequest("photo: give a photo's path or id", "photo")
        path = Path(photo).expanduser()
        if len(photo) == 64 and all(c in "0123456789abcdef" for c in photo) and not path.exists():
            flt = models.Filter(must=[content_condition(photo)])
            points = [] if self.store.is_empty(IMAGES) else self.store.scroll(IMAGES, flt, limit=1)[0]
            if not points:
                raise NotFound(f"photo: no photo with id {photo} in the index", "photo")
            return Path(ImageHit.from_point(points[0]).path)
        return path

    def is_indexed_photo(self, path: Path) -> bool:
        """Whether ``path`` is a photo of the index (the default knowledge base's), as ingest recorded it."""
        names = {str(path), str(path.resolve())} if path.is_absolute() else {str(path.resolve())}
        return any(self.store.any_where(IMAGES, "paths", name) for name in names)

    def read_photo(self, path: Path, inside: Callable[[str], bool] | None = None) -> bytes:
        """The bytes of a photo a caller names by path. ``inside`` None: the machine's own user, who
        reads any regular file. Else (an HTTP caller: real path -> allowed) a file there is read
        confined (the opened file is checked); any other only as an indexed photo (default knowledge
        base) whose bytes are still those indexed, so a file swapped since ingest is refused."""
        if inside is None:
            return self._read_image(path, "photo")
        path, limit = path.expanduser(), self.settings.max_image_bytes
        if inside(os.path.realpath(path)):  # by name first: an escape already in place is not opened
            try:
                return read_regular(path, limit, inside=inside)
            except Outside:
                pass  # swapped for a link out since the check: only as a photo of the index
            except Refused as exc:
                raise BadRequest(f"photo: {path}: {exc}", "photo") from None
        if not self.is_indexed_photo(path):  # no file outside is even opened unless the index names it
            raise BadRequest(f"photo: {path}: {NOT_INDEXED}", "photo")
        data = self._indexed_bytes(path)
        if data is None:
            raise BadRequest(f"photo: {path}: not the photo indexed there (its file changed or cannot be read)", "photo")
        return data

    def _indexed_bytes(self, path: Path, sha256: str | None = None) -> bytes | None:
        """The bytes of ``path`` if they are a photo of the index: the one with content id ``sha256``
        (a hit's), or (None) any of the default knowledge base's; read without blocking, bounded."""
        try:
            data = read_regular(path, self.settings.max_image_bytes)
        except Refused:
            return None
        digest = hashlib.sha256(data).hexdigest()  # ingest's content id: the file's bytes (indexer/pipeline.py)
        if sha256 is not None:
            return data if digest == sha256 else None
        return data if self.store.any_where(IMAGES, "sha256", digest) else None

    def _verify(self, text: str, hits: list[ImageHit], min_entailment: float | None) -> list[ImageHit]:
        """Re-rank by P(entailment) of ``text`` per photo. A photo whose file can no longer be
        read or decoded, or is no longer the one indexed (its bytes changed, a link swapped in), is
        kept last, unverified (dropped under a threshold)."""
        self._require(ENTAIL.ensembles[0], ENTAIL.display)
        readable = {}
        for i, h in enumerate(hits):
            data = self._indexed_bytes(Path(h.path), h.sha256)
            if data is not None:
                readable[i] = data
        verdicts = dict(zip(readable, self._entail_many(list(readable.values()), text)))
        checked = [replace(h, entailment=v.probs["entailment"], entailment_label=v.label)
                   for i, h in enumerate(hits) if (v := verdicts.get(i)) is not None]
        checked.sort(key=lambda h: h.entailment, reverse=True)  # stable: the search's order breaks ties
        if min_entailment is not None:
            return [h for h in checked if h.entailment >= min_entailment]
        return checked + [h for i, h in enumerate(hits) if verdicts.get(i) is None]

    def _example_image(self, like: Path | bytes) -> bytes:
        return example_image(self.settings, like)


def example_image(settings, like: Path | bytes) -> bytes:
    """The query photo as the server's step takes it (decoded and checked here first, so a bad
    upload is a 4xx naming it)."""
    limit = settings.max_image_bytes
    try:
        if isinstance(like, bytes):
            if len(like) > limit:
                raise BadImage(f"too large: {len(like) / 1e6:.1f} MB > {limit / 1e6:.1f} MB limit")
            photo, _ = decode_photo(like, max_pixels=settings.max_image_pixels)
        else:
            photo, _ = open_photo(Path(like).expanduser(), max_pixels=settings.max_image_pixels, max_bytes=limit)
    except BadImage as exc:
        where = "the uploaded image" if isinstance(like, bytes) else str(like)
        raise BadRequest(f"like: {where}: {exc}") from exc
    return photo.data
