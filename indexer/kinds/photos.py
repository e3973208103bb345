"""Photos: image files -> each embedding family's vectors, with EXIF metadata and a thumbnail."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from indexer.kinds.base import (
    THUMBNAIL_DRAFT,
    THUMBNAIL_SIZE,
    Embedded,
    Loaded,
    Unit,
    digest,
    probe_image,
    stored_vectors,
    thumbnail_path,
)
from indexer.loaders import BadDocument
from search.config import Settings
from search.media.photos import IMAGE_SUFFIXES, BadImage, decode_photo, save_thumbnail
from search.models import Family
from search.store import IMAGES, CollectionSchema, images_schema, in_kb, kb_thumbnails
from search.triton.client import TritonClient


class Photos:
    """Image files -> each embedding family's vectors (registry order: the required one first), with
    EXIF metadata and a thumbnail."""
    name, suffixes = IMAGES, IMAGE_SUFFIXES
    errors = (BadDocument, BadImage)
    read_signature = None  # nothing read by OCR here

    def __init__(self, triton: TritonClient, thumbs: Path, families: list[Family], *, max_bytes: int, max_pixels: int,
                 kb: str | None = None) -> None:
        self.triton, self.thumbs, self.families, self.kb = triton, thumbs, families, kb
        self.max_bytes, self.max_pixels = max_bytes, max_pixels

    @classmethod
    def made(cls, settings: Settings, triton: TritonClient, families: list[Family], kb: str | None = None) -> Photos:
        """The kind on ``settings`` (make_kind): ``families``, the served ones that embed photos."""
        return cls(triton, kb_thumbnails(settings.data_dir, kb), families, max_bytes=settings.max_image_bytes,
                   max_pixels=settings.max_image_pixels, kb=kb)

    # Lazy, so a dead model surfaces inside the pipeline, which stops just this kind.
    @cached_property
    def _probes(self) -> list[dict[str, np.ndarray]]:
        return [probe_image(self.triton, f) for f in self.families]

    @cached_property
    def schema(self) -> CollectionSchema:
        # Each family's dense vectors as wide as its served model's (those it declares no width of)
        widths = {name: v.shape[-1] for f, p in zip(self.families, self._probes) for name, v in p.items()
                  if f.vectors[name].kind == "dense"}
        return in_kb(images_schema(widths, [f.family for f in self.families]), self.kb)

    @cached_property
    def signature(self) -> str:
        # The probe vectors (each family's first) identify the served models: other weights give another signature.
        return "+".join(f"{f.family}/{digest(next(iter(p.values())))}" for f, p in zip(self.families, self._probes))

    def thumbnail_path(self, sha256: str) -> Path:
        return thumbnail_path(self.thumbs, sha256)

    def load(self, path: Path, data: bytes, sha256: str, stop: Callable[[], bool] | None = None) -> Loaded:
        return Loaded(path, sha256, data)  # decoded by ``units``: nothing in a photo is read before

    def read(self, loaded: Loaded) -> None:
        pass  # never asked: nothing to read (``Loaded.to_read``)

    def units(self, loaded: Loaded) -> list[Unit]:
        photo, image = decode_photo(loaded.data, max_pixels=self.max_pixels, draft=THUMBNAIL_DRAFT)
        thumb = save_thumbnail(image, self.thumbnail_path(loaded.sha256), THUMBNAIL_SIZE)
        camera = " ".join(x for x in (photo.camera_make, photo.camera_model) if x) or None
        payload = {
            "width": photo.width, "height": photo.height, "format": photo.format, "frames": photo.frames,
            "taken_at": photo.taken_at, "camera_make": photo.camera_make, "camera_model": photo.camera_model,
            "camera": camera, "camera_terms": camera_terms(camera), "thumbnail": str(thumb),
        }
        if photo.latitude is not None and photo.longitude is not None:
            payload["location"] = {"lat": photo.latitude, "lon": photo.longitude}
        return [Unit(photo.data, payload)]

    def embed(self, items: list[bytes]) -> Embedded:
        out = Embedded([{} for _ in items])
        for fam in self.families:
            got = self._embed(fam, items)
            for i, vectors in enumerate(got.vectors):
                if vectors is None or out.vectors[i] is None:
                    out.vectors[i] = None
                else:
                    out.vectors[i].update(vectors)
            out.errors.update({i: e for i, e in got.errors.items() if i not in out.errors})
        return out

    def _embed(self, fam: Family, items: list[bytes]) -> Embedded:
        try:
            return Embedded([stored_vectors(fam, v) for v in fam.encode(self.triton, items).vectors])
        except InferenceServerException:
            if len(items) == 1:
                raise
        # One image the server could not read fails its whole request: find it, keep the rest.
        out = Embedded([None] * len(items))
        for i, item in enumerate(items):
            try:
                out.vectors[i] = stored_vectors(fam, fam.encode(self.triton, [item]).vectors[0])
            except InferenceServerException as exc:
                out.errors[i] = f"rejected by the model server: {(exc.message() or '').splitlines()[0][:160]}"
        return out

    def sort_key(self, item: bytes) -> int:
        return 0  # every image becomes the same tensor size

    def forget(self, sha256: str) -> None:
        self.thumbnail_path(sha256).unlink(missing_ok=True)


def camera_terms(camera: str | None) -> list[str]:
    """Lower-case words of "make model", so `--camera canon` or `--camera "eos 5d"` is a keyword match."""
    return sorted(set(camera.lower().split())) if camera else []
