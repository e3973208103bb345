"""What the store holds: the collection schemas and the content-derived point ids.

Collections and payload indexes come only from the schemas defined here.

Content-derived ids: a point id is a UUID5 of (file sha256, chunker signature, chunk index), so
ingesting the same content again overwrites instead of duplicating. One point per chunk stores
all paths the content was seen at.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from qdrant_client import models

from search.config import DEFAULT_KB, KB_NAME
from search.models import for_kind, required

ID_NAMESPACE = uuid.UUID("6f1c1f3e-3b7a-4c1e-9a57-4d0c2e8b9a11")
# A long file's points are written while it is embedded, before its chunk 0 marks it complete: with
# ``partial`` = the time they were written, set to 0 once the file is complete. Every point has it,
# so the points of a file are the same however they were written.
PARTIAL = "partial"
ID_KEY = "sha256"  # the payload field a point's id is derived from (point_id): the same for as long as the id exists


@dataclass(frozen=True)
class CollectionSchema:
    name: str
    vectors: dict[str, models.VectorParams]
    payload_indexes: dict[str, models.PayloadSchemaType] = field(default_factory=dict)
    sparse_vectors: dict[str, models.SparseVectorParams] = field(default_factory=dict)


DOCUMENTS_NAME, IMAGES = "documents", "images"
_DISTANCE = {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT}
# Every field the code filters on (folders, suffix, sha256, chunk, chunker, models, ...) or may order by.
_COMMON_INDEXES = {
    "paths": models.PayloadSchemaType.KEYWORD,
    "folders": models.PayloadSchemaType.KEYWORD,
    "sha256": models.PayloadSchemaType.KEYWORD,
    "chunk": models.PayloadSchemaType.INTEGER,
    "chunker": models.PayloadSchemaType.KEYWORD,
    "suffix": models.PayloadSchemaType.KEYWORD,
    PARTIAL: models.PayloadSchemaType.FLOAT,
}
_PAYLOAD_INDEXES = {
    DOCUMENTS_NAME: {**_COMMON_INDEXES, "mtime": models.PayloadSchemaType.FLOAT,
                     "models": models.PayloadSchemaType.KEYWORD, "page": models.PayloadSchemaType.INTEGER,
                     "words": models.PayloadSchemaType.KEYWORD,  # an image's passages: its recognised words
                     "codes": models.PayloadSchemaType.KEYWORD},  # numbers and codes, matched exactly (search.terms.codes)
    IMAGES: {**_COMMON_INDEXES, "taken_at": models.PayloadSchemaType.FLOAT,
             "camera_terms": models.PayloadSchemaType.KEYWORD, "location": models.PayloadSchemaType.GEO},
}


def schema(kind: str, widths: Mapping[str, int] | None = None, families: Iterable[str] | None = None) -> CollectionSchema:
    """The collection of an ingest kind: the named vectors of the families that embed it (the model
    registry; ``families``: only these and the required one, None: all), and the kind's payload
    indexes. ``widths``: by vector name, the served width of each dense vector whose family declares
    none (its width is the built model's)."""
    vectors, sparse = {}, {}
    every = for_kind(kind)
    for fam in every:
        if families is not None and fam is not every[0] and fam.family not in families:
            continue
        for name, v in fam.vectors.items():
            if v.kind == "sparse":
                sparse[name] = models.SparseVectorParams(modifier=models.Modifier.IDF)
            elif v.kind == "multivector":
                # Only used to re-rank what the other vectors found: no HNSW graph (m=0), kept on disk.
                vectors[name] = models.VectorParams(
                    size=v.dim or _width(widths or {}, fam.display, name), distance=_DISTANCE[v.distance], on_disk=True,
                    hnsw_config=models.HnswConfigDiff(m=0),
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM))
            else:
                vectors[name] = models.VectorParams(size=v.dim or _width(widths or {}, fam.display, name),
                                                    distance=_DISTANCE[v.distance])
    return CollectionSchema(name=kind, vectors=vectors, payload_indexes=_PAYLOAD_INDEXES[kind], sparse_vectors=sparse)


def _width(widths: Mapping[str, int], family: str, vector: str) -> int:
    if vector not in widths:
        raise ValueError(f"{family}'s vector {vector!r} is as wide as the served model: its width is needed")
    return widths[vector]


# Documents: every chunk has the required family's vectors; chunks embedded while an optional family
# is served also have its own. DOCUMENTS names every family's vectors; a collection is created with
# those of the families served (documents_schema) and gains a family's when it is first served.
DOCUMENTS = schema(DOCUMENTS_NAME)


def documents_schema(families: Iterable[str] = ()) -> CollectionSchema:
    """Documents with the vectors of the required family and of ``families`` (the optional ones
    served). The engine reserves a dense vector's room in every point, whether the point has it or
    not: an optional family's dense and multi-vectors declared but never written cost ~8 KB a point on
    disk."""
    return schema(DOCUMENTS_NAME, families=tuple(families))


def images_schema(widths: Mapping[str, int], families: Iterable[str] | None = None) -> CollectionSchema:
    """Photos: the vectors of the required photo family and of ``families`` (None: every photo
    family); ``widths``: each vector's served width by name (``image_vector()`` for the required
    family's), where its family declares none."""
    return schema(IMAGES, widths, None if families is None else tuple(families))


def image_vector() -> str:
    """The name of the photos' vector."""
    return next(iter(required(IMAGES).vectors))


COLLECTIONS = (DOCUMENTS_NAME, IMAGES)


# Knowledge bases: one documents and one images collection each. The default KB keeps the names the
# store used before KBs existed ("documents", "images"), so an existing index is the default KB as
# it is, with nothing copied or re-embedded; KB "hr" lives in "kb-hr-documents" and "kb-hr-images".
_KB_PREFIX = "kb-"


def check_kb(kb: str | None) -> str:
    """A KB's name (None: the default one); ValueError names what a valid name is."""
    kb = DEFAULT_KB if kb is None else kb
    if not isinstance(kb, str) or not KB_NAME.match(kb):
        raise ValueError(f"kb: a knowledge base's name is 1-40 lower-case letters, digits, '-' or '_', "
                         f"starting with a letter or digit; got {kb!r}")
    return kb


def kb_collection(kb: str | None, kind: str) -> str:
    """The collection that holds ``kind`` ("documents" or "images") of knowledge base ``kb``."""
    kb = check_kb(kb)
    return kind if kb == DEFAULT_KB else f"{_KB_PREFIX}{kb}-{kind}"


def kb_of(collection: str) -> tuple[str, str] | None:
    """(KB, kind) of one of this project's collections, None for any other collection."""
    if collection in COLLECTIONS:
        return DEFAULT_KB, collection
    if collection.startswith(_KB_PREFIX):
        kb, _, kind = collection[len(_KB_PREFIX):].rpartition("-")
        if kind in COLLECTIONS and KB_NAME.match(kb) and kb != DEFAULT_KB:
            return kb, kind
    return None


def kb_thumbnails(data_dir: Path, kb: str | None) -> Path:
    """Where the thumbnails of a KB's photos are kept (deleted with the KB)."""
    kb = check_kb(kb)
    return data_dir / "thumbnails" if kb == DEFAULT_KB else data_dir / "kb-thumbnails" / kb


def in_kb(schema_: CollectionSchema, kb: str | None) -> CollectionSchema:
    """A kind's schema under the name of its collection in ``kb``."""
    return replace(schema_, name=kb_collection(kb, schema_.name))


def point_id(sha256: str, chunker: str, chunk: int) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{sha256}:{chunker}:{chunk}"))


def folders_of(path: str) -> list[str]:
    """Every ancestor folder of a path, so a folder filter is one keyword match."""
    return list(_folders(str(Path(path).parent)))


@lru_cache(maxsize=4096)
def _folders(folder: str) -> tuple[str, ...]:
    """A folder and its ancestors (cached: the files of a batch share a few folders)."""
    p = Path(folder)
    return tuple(s for s in (str(p), *map(str, p.parents)) if s not in (".", ""))
