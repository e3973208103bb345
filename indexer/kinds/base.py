"""What every kind of file shares: the units a file becomes, what embedding them gives, a file
on its way through the stages, the ``Kind`` interface, and the vectors, probes and thumbnails the
kinds write with."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image
from qdrant_client import models

from indexer.loaders import Budget, LoadedDocument
from search.models import Family, golden
from search.store import CollectionSchema
from search.triton.client import TritonClient

THUMBNAIL_SIZE = 320
# A JPEG is decoded at 1/2, 1/4 or 1/8 scale when that leaves its longest side at 90 % of the thumbnail's
# size or more, and such a thumbnail is kept as decoded (288-320 px): a web-sized photo (~600 px wide)
# is then spared a full decode and a resample, a large share of the indexer's CPU per photo
THUMBNAIL_DRAFT = THUMBNAIL_SIZE * 9 // 10


@dataclass(frozen=True)
class Unit:
    item: Any  # what the model takes: a chunk's text, a photo's bytes
    payload: dict = field(default_factory=dict)  # stored with the unit's vector
    read: bool = False  # its document's text was read by OCR (some of it): stored under the kind's read_signature


@dataclass
class Embedded:
    vectors: list  # one per item, {vector name: vector}; None where the model rejected the item
    truncated: int = 0
    errors: dict[int, str] = field(default_factory=dict)  # item index -> reason


@dataclass
class Loaded:
    """A file decoded by its kind (the CPU's work), with what a model must still read in it: the
    stages between reading a file and embedding its units are load -> read (a model reads the text
    in its scans: ``to_read``) -> units (indexer/stages.py), and an executor may run them apart."""
    path: Path
    sha256: str
    data: bytes = b""  # what ``units`` still needs of the file's bytes
    doc: LoadedDocument | None = None  # a document's title, encoding and pages (a scan page's text once read)
    budget: Budget | None = None  # what the document may still cost: spent by reading its scans and splitting it
    reads: dict[int, dict] = field(default_factory=dict)  # page index -> what its passages record of its reading

    @property
    def to_read(self) -> list[int]:
        """The pages whose text a model must still read (their index)."""
        return [i for i, p in enumerate(self.doc.pages) if p.scan is not None] if self.doc else []


class Kind(Protocol):
    name: str
    schema: CollectionSchema
    suffixes: frozenset[str]
    signature: str  # model + unit settings: part of every point id, so a change re-embeds
    read_signature: str | None  # a document read by OCR: the signature with the reader's weights (None: no reader)
    max_bytes: int
    errors: tuple[type[Exception], ...]

    def load(self, path: Path, data: bytes, sha256: str, stop: Callable[[], bool] | None = None) -> Loaded: ...
    def read(self, loaded: Loaded) -> None: ...  # the text in ``loaded.to_read``, read by the kind's model
    def units(self, loaded: Loaded) -> list[Unit]: ...
    def embed(self, items: list) -> Embedded: ...
    def sort_key(self, item: Any) -> int: ...
    def forget(self, sha256: str) -> None: ...


def thumbnail_path(thumbs: Path, sha256: str) -> Path:
    return thumbs / sha256[:2] / f"{sha256}.jpg"


def stored_vectors(family: Family, vectors: dict) -> dict:
    """A family's encoded vectors as the store takes them (an empty sparse vector is left out).
    Dense and multi-vectors stay float32 arrays until the store writes them: as lists of Python
    floats, a chunk's ColBERT rows (a multivector) took 32 bytes a value, and an ingest held a whole long
    document's rows (tens of GB for a long text)."""
    out = {}
    for name, value in vectors.items():
        if family.vectors[name].kind == "sparse":
            if value:  # a passage of special tokens only has no sparse weights
                out[name] = models.SparseVector(indices=list(value), values=list(value.values()))
        else:
            out[name] = np.asarray(value, dtype=np.float32)
    return out


def probe(triton: TritonClient, family: Family) -> str:
    """A short hash of the family's first vector for a fixed text: identifies the served weights."""
    first = next(iter(family.encode(triton, ["probe"]).vectors[0].values()))
    return digest(np.asarray(first))


def probe_reader(triton: TritonClient, reader: Family) -> str:
    """A short hash of what the text reader reads in a fixed image with text (the golden set's first
    scan), its words and confidences: identifies the served weights and dictionary."""
    lines = reader.read_text(triton, [golden.inputs().scans[0].data])[0]
    return hashlib.sha1(repr([(line.text, round(line.score, 3)) for line in lines]).encode()).hexdigest()[:12]


def probe_image(triton: TritonClient, family: Family) -> dict[str, np.ndarray]:
    """The family's vectors for a fixed tiny image, by name: give the served model's widths and identity."""
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (127, 64, 200)).save(buf, "PNG")
    return {name: np.asarray(v) for name, v in family.encode(triton, [buf.getvalue()]).vectors[0].items()}


def digest(vector: np.ndarray) -> str:
    return hashlib.sha1(np.round(vector, 4).tobytes()).hexdigest()[:12]
