"""What differs between kinds of files: how a file becomes units and how units are embedded.

Everything else (incremental rules, batching, crash-safe writes) is the pipeline's, shared.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from qdrant_client import models

from indexer.chunking import Chunker
from indexer.loaders import DOCUMENT_SUFFIXES, BadDocument, load_document
from search.store import DOCUMENTS, CollectionSchema, images_schema
from search.triton.client import TritonClient


THUMBNAIL_SIZE = 320
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+)$", re.M)  # the loaders write headings as markdown lines


@dataclass(frozen=True)
class Unit:
    item: Any  # what the model takes: a chunk's text, a photo's bytes
    payload: dict = field(default_factory=dict)  # stored with the unit's vector


@dataclass
class Embedded:
    vectors: list  # one per item, {vector name: vector}; None where the model rejected the item
    truncated: int = 0
    errors: dict[int, str] = field(default_factory=dict)  # item index -> reason


class Kind(Protocol):
    name: str
    schema: CollectionSchema
    suffixes: frozenset[str]
    signature: str  # model + unit settings: part of every point id, so a change re-embeds
    max_bytes: int
    errors: tuple[type[Exception], ...]

    def units(self, path: Path, data: bytes, sha256: str) -> list[Unit]: ...
    def embed(self, items: list) -> Embedded: ...
    def sort_key(self, item: Any) -> int: ...
    def forget(self, sha256: str) -> None: ...


class Documents:
    """Documents -> pages -> token-budgeted chunks -> a MiniLM vector each, plus BGE-M3's dense,
    sparse and ColBERT vectors from one more pass when BGE-M3 is served."""

    name, schema, suffixes = "documents", DOCUMENTS, DOCUMENT_SUFFIXES
    errors = (BadDocument,)

    def __init__(self, triton: TritonClient, chunker: Chunker, max_bytes: int, *, bge_m3: bool = False,
                 **limits: float) -> None:
        self.triton, self.chunker, self.max_bytes, self.bge_m3 = triton, chunker, max_bytes, bge_m3
        self.limits = limits  # load_document's parse budget: max_seconds, max_elements, max_pages
        self.models = ["minilm", "bge_m3"] if bge_m3 else ["minilm"]
        # Which models (and which BGE-M3 weights) made the vectors: a change re-embeds every file.
        embedders = "minilm+bge_m3:" + probe_bge_m3(triton) if bge_m3 else "minilm"
        self.signature = f"{embedders}/v{chunker.VERSION}/{chunker.max_tokens}/{chunker.overlap}"

    def units(self, path: Path, data: bytes, sha256: str) -> list[Unit]:
        doc = load_document(path.suffix.lower(), data, **self.limits)
        units, section = [], None
        for page in doc.pages:
            headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(page.text)]
            for c in self.chunker.chunk(page.text):
                # The section a passage belongs to: the last heading that starts at or before it.
                before = [h for at, h in headings if at <= c.start]
                units.append(Unit(c.text, {
                    "text": c.text, "start": c.start, "end": c.end, "page": page.number, "title": doc.title,
                    "section": before[-1] if before else section, "models": self.models, "encoding": doc.encoding}))
            if headings:
                section = headings[-1][1]
        return units

    def embed(self, items: list[str]) -> Embedded:
        from search.models import bge_m3, minilm  # noqa: PLC0415

        vectors, truncated = minilm.embed(self.triton, items)
        out = [{"minilm": v.tolist()} for v in vectors]
        n_truncated = int(truncated.sum())
        if self.bge_m3:
            for vec, m in zip(out, bge_m3.encode(self.triton, items, colbert=True)):
                vec["bge_dense"] = m.dense.tolist()
                vec["bge_colbert"] = m.colbert.tolist()
                if m.sparse:  # a passage of special tokens only has no sparse weights
                    vec["bge_sparse"] = models.SparseVector(indices=list(m.sparse), values=list(m.sparse.values()))
                n_truncated += m.truncated
        return Embedded(out, n_truncated)

    def sort_key(self, item: str) -> int:
        return len(item)

    def forget(self, sha256: str) -> None:
        pass


class Photos:
    """Image files -> one CLIP vector each, with EXIF metadata and a thumbnail."""

    name = "images"
    suffixes: frozenset[str]

    def __init__(self, triton: TritonClient, thumbs: Path, *, max_bytes: int, max_pixels: int) -> None:
        from indexer.images import IMAGE_SUFFIXES, BadImage  # noqa: PLC0415

        self.triton, self.thumbs, self.max_bytes, self.max_pixels = triton, thumbs, max_bytes, max_pixels
        self.suffixes = IMAGE_SUFFIXES
        self.errors = (BadDocument, BadImage)
        probe = probe_clip(triton)
        self.schema = images_schema(probe.shape[0])
        # The probe vector identifies the served model: other weights give another signature.
        self.signature = "clip/" + hashlib.sha1(np.round(probe, 4).tobytes()).hexdigest()[:12]

    def thumbnail_path(self, sha256: str) -> Path:
        return self.thumbs / sha256[:2] / f"{sha256}.jpg"

    def units(self, path: Path, data: bytes, sha256: str) -> list[Unit]:
        from indexer.images import decode_photo, save_thumbnail  # noqa: PLC0415

        photo, image = decode_photo(data, max_pixels=self.max_pixels, draft=THUMBNAIL_SIZE)
        thumb = save_thumbnail(image, self.thumbnail_path(sha256), THUMBNAIL_SIZE)
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
        from search.models import clip  # noqa: PLC0415
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        try:
            return Embedded([{"clip": v.tolist()} for v in clip.embed_images(self.triton, items)])
        except InferenceServerException:
            if len(items) == 1:
                raise
        # One image the server could not read fails its whole request: find it, keep the rest.
        out = Embedded([None] * len(items))
        for i, item in enumerate(items):
            try:
                out.vectors[i] = {"clip": clip.embed_images(self.triton, [item])[0].tolist()}
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


def probe_bge_m3(triton: TritonClient) -> str:
    """A short hash of the served BGE-M3's dense vector for a fixed text: identifies its weights."""
    from search.models import bge_m3  # noqa: PLC0415

    dense = bge_m3.encode(triton, ["probe"], colbert=False)[0].dense
    return hashlib.sha1(np.round(dense, 4).tobytes()).hexdigest()[:12]


def probe_clip(triton: TritonClient) -> np.ndarray:
    """The served CLIP's vector for a fixed tiny image: gives its dimension and identity."""
    from PIL import Image  # noqa: PLC0415

    from search.models import clip  # noqa: PLC0415

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (127, 64, 200)).save(buf, "PNG")
    return clip.embed_images(triton, [buf.getvalue()])[0]
