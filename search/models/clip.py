"""CLIP: image and text vectors in one space, from the served ``clip_image`` and ``clip_text``
ensembles (projection + L2 norm in the graphs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from search.models.base import EmbeddingModel, Encoded, Family, TextVector, Vector, image_tensor, text_vectors
from search.triton.client import TritonClient, text_tensor

CONTEXT_LENGTH = 77  # CLIP's context: texts are cut there (the clip_text configs take up to this many tokens)
IMAGE_BATCH = 32  # max_batch_size of the clip_image models
TEXT_BATCH = 64  # max_batch_size of the clip_text models


class CLIP(Family):
    family, display = "clip", "CLIP"
    ensembles = ("clip_image", "clip_text")
    steps = ("clip_image_preprocess", "clip_visual", "clip_text_tokenize", "clip_textual")
    kinds = {"images": "clip_image"}
    vectors = {"clip": Vector("dense")}  # the width is the built model's (512 for ViT-B/32)
    source_setting, cli_option = "clip_source", "--clip-source"
    source_help = ("A local Hugging Face CLIP folder, a Hugging Face id (default openai/clip-vit-base-patch32), "
                   "or open_clip:MODEL/PRETRAINED (e.g. open_clip:ViT-B-32/laion2b_s34b_b79k).")
    hub_hint = "openai/clip-vit-base-patch32"
    export_module = "search.models.export.clip"
    checkpoints = ("openai/clip-vit-base-patch32",)
    published_module = "search.models.clip_published"
    precisions = ("fp32", "int8")  # int8 unmeasured: no real CLIP weights to measure it on (int8_quality None)

    def artifacts(self, repo: Path) -> list[Path]:
        return [repo / "clip_visual/1/model.onnx", repo / "clip_textual/1/model.onnx",
                repo / "clip_visual/1/model.cpu.onnx", repo / "clip_textual/1/model.cpu.onnx",
                repo / "clip_image_preprocess/1/preprocess.json", repo / "clip_text_tokenize/1/tokenizer.json",
                repo / "clip_text_tokenize/1/text.json", self.manifest_path(repo)]

    def encode(self, client: TritonClient, items: list[str] | list[bytes]) -> Encoded:
        """Texts (str) or encoded images (bytes), one kind per call: both land in the same space."""
        if all(isinstance(x, str) for x in items):
            vectors, truncated = embed_texts(client, items)
        elif all(isinstance(x, (bytes, bytearray, memoryview)) for x in items):
            vectors, truncated = embed_images(client, items), np.zeros(len(items), bool)
        else:
            raise TypeError("clip: encode texts (str) or images (bytes), not both in one call")
        return Encoded([{"clip": v} for v in vectors], truncated)

    query_model, query_batch = "clip_text", TEXT_BATCH
    embedding_models = (EmbeddingModel("clip-text", "clip", "clip_text", "text", None, ("clip_text",),
                                       "CLIP text vectors, in the photos' space; texts cut at 77 tokens", listed=2),
                        EmbeddingModel("clip-image", "clip", "clip_image", "image", None, ("clip_image",),
                                       "CLIP image vectors (extension: input holds base64 images or data: URLs)", listed=3))

    def image_vectors(self, client: TritonClient, images: list[bytes]) -> np.ndarray:
        return np.concatenate([embed_images(client, images[s:s + IMAGE_BATCH]) for s in range(0, len(images), IMAGE_BATCH)])

    def encode_queries(self, client: TritonClient, queries: list[str]) -> list[TextVector]:
        return embed_queries(client, queries)

    def text_vectors(self, client: TritonClient, texts: list[str]) -> list[TextVector]:
        return [v for s in range(0, len(texts), TEXT_BATCH) for v in embed_queries(client, texts[s:s + TEXT_BATCH])]

    def served_golden(self, client: TritonClient, gold) -> dict[str, np.ndarray]:
        dense, truncated = embed_texts(client, [t.text for t in gold.texts])
        return {"text_dense": dense, "text_truncated": truncated,
                "image_dense": embed_images(client, [p.data for p in gold.photos])}


def embed_images(client: TritonClient, images: list[bytes]) -> np.ndarray:
    """Unit vectors [n, D] for encoded images (JPEG, PNG, GIF, WebP, ...) from ``clip_image``.
    A request that holds an undecodable image fails whole: callers retry one by one to find it."""
    if not images:
        return np.zeros((0, 0), np.float32)
    parts = [client.infer("clip_image", {"IMAGE": image_tensor(images[i:i + IMAGE_BATCH])}, ["EMBEDDING"])["EMBEDDING"]
             for i in range(0, len(images), IMAGE_BATCH)]
    return np.concatenate(parts)


def embed_queries(client: TritonClient, texts: list[str]) -> list[TextVector]:
    """Text queries (or one-text embeddings requests) sent together to ``clip_text`` in one request
    (at most TEXT_BATCH): each text's vector and token count."""
    return text_vectors(client.infer("clip_text", {"TEXT": text_tensor(texts)}, ["EMBEDDING", "NUM_TOKENS"]))


def embed_texts(client: TritonClient, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors [n, D] and a truncated flag per text (over 77 tokens), from ``clip_text``."""
    if not texts:
        return np.zeros((0, 0), np.float32), np.zeros(0, bool)
    outs = [client.infer("clip_text", {"TEXT": text_tensor(texts[i:i + TEXT_BATCH])}, ["EMBEDDING", "TRUNCATED"])
            for i in range(0, len(texts), TEXT_BATCH)]
    return np.concatenate([o["EMBEDDING"] for o in outs]), np.concatenate([o["TRUNCATED"].reshape(-1) for o in outs])
