"""What the store holds: the collection schemas and the content-derived point ids.

Collections and payload indexes come only from the schemas defined here.

Content-derived ids: a point id is a UUID5 of (file sha256, chunker signature, chunk index), so
ingesting the same content again overwrites instead of duplicating. One point per chunk stores
all paths the content was seen at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from qdrant_client import models

ID_NAMESPACE = uuid.UUID("6f1c1f3e-3b7a-4c1e-9a57-4d0c2e8b9a11")


@dataclass(frozen=True)
class CollectionSchema:
    name: str
    vectors: dict[str, models.VectorParams]
    payload_indexes: dict[str, models.PayloadSchemaType] = field(default_factory=dict)
    sparse_vectors: dict[str, models.SparseVectorParams] = field(default_factory=dict)


BGE_DIM = 1024
# Documents: every chunk has a MiniLM vector; chunks embedded while BGE-M3 is served also have its
# three (a point may lack named vectors, so one collection serves both set-ups).
DOCUMENTS = CollectionSchema(
    name="documents",
    vectors={
        "minilm": models.VectorParams(size=384, distance=models.Distance.COSINE),
        "bge_dense": models.VectorParams(size=BGE_DIM, distance=models.Distance.COSINE),
        # Only used to re-rank what the other vectors found: no HNSW graph (m=0), kept on disk.
        "bge_colbert": models.VectorParams(
            size=BGE_DIM, distance=models.Distance.DOT, on_disk=True, hnsw_config=models.HnswConfigDiff(m=0),
            multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)),
    },
    sparse_vectors={"bge_sparse": models.SparseVectorParams(modifier=models.Modifier.IDF)},
    # Every field the code filters on (folders, suffix, sha256, chunk, chunker, models) or may order by.
    payload_indexes={
        "paths": models.PayloadSchemaType.KEYWORD,
        "folders": models.PayloadSchemaType.KEYWORD,
        "sha256": models.PayloadSchemaType.KEYWORD,
        "chunk": models.PayloadSchemaType.INTEGER,
        "suffix": models.PayloadSchemaType.KEYWORD,
        "mtime": models.PayloadSchemaType.FLOAT,
        "chunker": models.PayloadSchemaType.KEYWORD,
        "models": models.PayloadSchemaType.KEYWORD,
        "page": models.PayloadSchemaType.INTEGER,
    },
)


def images_schema(dim: int) -> CollectionSchema:
    """Photos: one CLIP vector each; the dimension is the served model's."""
    return CollectionSchema(
        name="images",
        vectors={"clip": models.VectorParams(size=dim, distance=models.Distance.COSINE)},
        payload_indexes={
            "paths": models.PayloadSchemaType.KEYWORD,
            "folders": models.PayloadSchemaType.KEYWORD,
            "sha256": models.PayloadSchemaType.KEYWORD,
            "chunk": models.PayloadSchemaType.INTEGER,
            "chunker": models.PayloadSchemaType.KEYWORD,
            "suffix": models.PayloadSchemaType.KEYWORD,
            "taken_at": models.PayloadSchemaType.FLOAT,
            "camera_terms": models.PayloadSchemaType.KEYWORD,
            "location": models.PayloadSchemaType.GEO,
        },
    )


COLLECTIONS = (DOCUMENTS.name, "images")


def point_id(sha256: str, chunker: str, chunk: int) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{sha256}:{chunker}:{chunk}"))


def folders_of(path: str) -> list[str]:
    """Every ancestor folder of a path, so a folder filter is one keyword match."""
    return [str(p) for p in Path(path).parents if str(p) not in (".", "")]
