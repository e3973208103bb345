"""What the store holds: the collection schemas and the content-derived point ids.

Collections and payload indexes come only from the schemas defined here.

Content-derived ids: a point id is a UUID5 of (file sha256, chunker signature, chunk index), so
ingesting the same content again overwrites instead of duplicating. One point per chunk stores
all paths the content was seen at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from qdrant_client import models

from search.models import for_kind

ID_NAMESPACE = uuid.UUID("6f1c1f3e-3b7a-4c1e-9a57-4d0c2e8b9a11")


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
}
_PAYLOAD_INDEXES = {
    DOCUMENTS_NAME: {**_COMMON_INDEXES, "mtime": models.PayloadSchemaType.FLOAT,
                     "models": models.PayloadSchemaType.KEYWORD, "page": models.PayloadSchemaType.INTEGER},
    IMAGES: {**_COMMON_INDEXES, "taken_at": models.PayloadSchemaType.FLOAT,
             "camera_terms": models.PayloadSchemaType.KEYWORD, "location": models.PayloadSchemaType.GEO},
}


def schema(kind: str, dim: int | None = None) -> CollectionSchema:
    """The collection of an ingest kind: the named vectors of every family that embeds it (the model
    registry), and the kind's payload indexes. ``dim``: the width of a vector whose family declares
    none (CLIP's is the built model's)."""
    vectors, sparse = {}, {}
    for fam in for_kind(kind):
        for name, v in fam.vectors.items():
            if v.kind == "sparse":
                sparse[name] = models.SparseVectorParams(modifier=models.Modifier.IDF)
            elif v.kind == "multivector":
                # Only used to re-rank what the other vectors found: no HNSW graph (m=0), kept on disk.
                vectors[name] = models.VectorParams(
                    size=v.dim, distance=_DISTANCE[v.distance], on_disk=True, hnsw_config=models.HnswConfigDiff(m=0),
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM))
            else:
                vectors[name] = models.VectorParams(size=v.dim or dim, distance=_DISTANCE[v.distance])
    return CollectionSchema(name=kind, vectors=vectors, payload_indexes=_PAYLOAD_INDEXES[kind], sparse_vectors=sparse)


# Documents: every chunk has a MiniLM vector; chunks embedded while BGE-M3 is served also have its
# three (a point may lack named vectors, so one collection serves both set-ups).
DOCUMENTS = schema(DOCUMENTS_NAME)


def images_schema(dim: int) -> CollectionSchema:
    """Photos: one CLIP vector each; the dimension is the served model's."""
    return schema(IMAGES, dim)


def image_vector() -> str:
    """The name of the photos' vector."""
    return next(iter(for_kind(IMAGES)[0].vectors))


COLLECTIONS = (DOCUMENTS_NAME, IMAGES)


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
