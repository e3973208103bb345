"""BGE-M3: dense, sparse and ColBERT vectors for a text from one served ensemble (``bge_m3``), with
FlagEmbedding's ``BGEM3FlagModel`` semantics:

- dense: the CLS hidden state, L2-normalised;
- sparse: ``relu(sparse_linear(h))``, max weight per token id, special tokens and zero weights
  dropped; score = sum over shared ids of q_weight * d_weight;
- ColBERT: ``colbert_linear(h[:, 1:])`` over the real tokens (eos included), L2-normalised;
  score = mean over query vectors of the max dot product with the document's."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from search.models import golden
from search.models.base import EmbeddingModel, Encoded, Family, Ranking, SearchQuery, TextVector, Vector
from search.triton.client import TritonClient, text_tensor

DIM = 1024  # BGE-M3's hidden size: the dims the committed configs declare
MAX_LENGTH = 8192  # BGE-M3's context (max_position_embeddings 8194 minus XLM-R's position offset)
BATCH = 16  # max_batch_size of the bge_m3 models (texts may be 8192 tokens long)


@dataclass
class M3Output:
    dense: np.ndarray  # [D], unit length
    sparse: dict[int, float]  # token id -> weight (special tokens and zero weights left out)
    colbert: np.ndarray | None  # [n_tokens - 1, D] unit vectors, None when not asked for
    truncated: bool  # the text had more tokens than the max length
    n_tokens: int  # tokens the model saw, <s> and </s> included


class BGEM3(Family):
    family, display = "bge_m3", "BGE-M3"
    ensembles = ("bge_m3",)
    steps = ("bge_m3_tokenize", "bge_m3_onnx", "bge_m3_post")
    kinds = {"documents": "bge_m3"}
    modes = {"dense": "bge_dense", "sparse": "bge_sparse", "hybrid": "bge_colbert"}
    mode_help = {"dense": "BGE-M3 dense vectors", "sparse": "BGE-M3 lexical weights",
                 "hybrid": "BGE-M3 dense + sparse, fused, re-ranked by ColBERT"}
    best_mode = "hybrid"
    optional = True  # documents are indexed with the required family alone; these vectors join when BGE-M3 is served
    vectors = {"bge_dense": Vector("dense", DIM), "bge_sparse": Vector("sparse", distance="dot"),
               "bge_colbert": Vector("multivector", DIM, distance="dot")}
    max_tokens, special_tokens = MAX_LENGTH, 2  # <s> text </s>
    source_setting, cli_option = "bge_m3_source", "--bge-m3-source"
    source_help = ("A local BGE-M3 folder (Hugging Face XLM-RoBERTa model + tokenizer + sparse_linear.pt + "
                   "colbert_linear.pt) or a Hugging Face id (default BAAI/bge-m3).")
    hub_hint = "BAAI/bge-m3"
    precisions = ("fp32", "int8")  # int8 unmeasured: no real BGE-M3 weights to measure it on (int8_quality None)
    export_module = "search.models.export.bge_m3"
    checkpoints = ("BAAI/bge-m3",)
    published_module = "search.models.bge_m3_published"

    def artifacts(self, repo: Path) -> list[Path]:
        return [repo / "bge_m3_tokenize/1/tokenizer.json", repo / "bge_m3_tokenize/1/text.json",
                repo / "bge_m3_onnx/1/model.onnx", repo / "bge_m3_onnx/1/model.cpu.onnx", repo / "bge_m3_post/1/post.json",
                self.manifest_path(repo)]

    def encode(self, client: TritonClient, items: list[str], *, colbert: bool = True,
               max_length: int | None = None) -> Encoded:
        outs = encode(client, items, colbert=colbert, max_length=max_length)
        vectors = [{"bge_dense": o.dense, "bge_sparse": o.sparse} | ({"bge_colbert": o.colbert} if colbert else {})
                   for o in outs]
        return Encoded(vectors, np.array([o.truncated for o in outs], bool))

    query_model, query_batch = "bge_m3", BATCH
    embedding_models = (EmbeddingModel("bge-m3", "bge_m3", "bge_m3", "text", DIM, ("BAAI/bge-m3", "bge_m3"),
                                       "BGE-M3 dense vectors (the documents' dense/hybrid index); texts cut at 8192 tokens",
                                       listed=1),)

    def encode_options(self, vector: str) -> dict:
        return {"colbert": self.vectors[vector].kind == "multivector"}  # ColBERT rows cost: only when asked

    def embedding_query(self, text: str) -> tuple[str, bool]:
        return text, False  # the batcher asks whether to compute ColBERT: an embedding needs none

    def query_text_vector(self, out: M3Output) -> TextVector:
        return TextVector(out.dense, out.n_tokens)

    def search_query(self, mode: str, text: str) -> SearchQuery:
        # ColBERT rows only for the mode that re-ranks by them
        return SearchQuery(self.query_model, (text, mode == "hybrid"), functools.partial(_ranking, mode))

    def encode_queries(self, client: TritonClient, queries: list[tuple[str, bool]]) -> list[M3Output]:
        """Each query is (text, whether its search needs ColBERT vectors)."""
        return encode_queries(client, queries)

    def text_vectors(self, client: TritonClient, texts: list[str]) -> list[TextVector]:
        return [TextVector(o.dense, o.n_tokens) for o in encode(client, texts, colbert=False)]

    def served_golden(self, client: TritonClient, gold) -> dict[str, np.ndarray]:
        outs: dict[int, M3Output] = {}
        for limit in dict.fromkeys(t.max_length for t in gold.texts):  # one call per token limit asked for
            idx = [i for i, t in enumerate(gold.texts) if t.max_length == limit]
            for i, o in zip(idx, encode(client, [gold.texts[i].text for i in idx], colbert=True, max_length=limit)):
                outs[i] = o
        ordered = [outs[i] for i in range(len(gold.texts))]
        ids, offsets = golden.ragged([np.array(sorted(o.sparse), np.int64) for o in ordered], np.int64)
        values, _ = golden.ragged([np.array([o.sparse[k] for k in sorted(o.sparse)], np.float32) for o in ordered])
        colbert, colbert_offsets = golden.ragged([o.colbert for o in ordered], width=int(ordered[0].dense.shape[0]))
        return {"text_dense": np.stack([o.dense for o in ordered]), "text_truncated": np.array([o.truncated for o in ordered]),
                "sparse_ids": ids, "sparse_values": values, "sparse_offsets": offsets,
                "colbert": colbert, "colbert_offsets": colbert_offsets}


# -- client helpers
def encode(client: TritonClient, texts: list[str], *, colbert: bool = True, max_length: int | None = None) -> list[M3Output]:
    """Dense, sparse and (unless ``colbert=False``) ColBERT outputs per text from the ``bge_m3``
    ensemble; ``max_length`` lowers the served limit (8192 tokens, or the model's own if smaller)."""
    outs: list[M3Output] = []
    for start in range(0, len(texts), BATCH):
        chunk = texts[start:start + BATCH]
        outs += _decode(client.infer("bge_m3", _inputs(chunk, colbert, max_length), OUTPUTS), len(chunk), colbert)
    return outs


def _ranking(mode: str, encoded: M3Output) -> Ranking | None:
    if mode == "dense":
        return Ranking("bge_dense", encoded.dense.tolist())
    if mode == "sparse":
        return Ranking("bge_sparse", encoded.sparse) if encoded.sparse else None
    # hybrid: dense and sparse candidates fused by rank, re-ranked by ColBERT late interaction.
    # The store's MAX_SIM sums over query vectors; BGE-M3's ColBERT score is their mean.
    fused = (("bge_dense", encoded.dense.tolist()),) + ((("bge_sparse", encoded.sparse),) if encoded.sparse else ())
    return Ranking("bge_colbert", encoded.colbert.tolist(), 1.0 / len(encoded.colbert), fused)


def encode_queries(client: TritonClient, queries: list[tuple[str, bool]]) -> list[M3Output]:
    """Search queries sent together, each (text, whether its search needs ColBERT vectors): one
    request (up to BATCH). The server computes ColBERT for the whole request when any query asks;
    the others' are dropped here."""
    outs = encode(client, [text for text, _ in queries], colbert=any(c for _, c in queries))
    return [o if c or o.colbert is None else replace(o, colbert=None) for o, (_, c) in zip(outs, queries, strict=True)]


OUTPUTS = ["DENSE", "SPARSE_INDICES", "SPARSE_VALUES", "COLBERT", "TRUNCATED", "NUM_TOKENS"]


def _inputs(texts: list[str], colbert: bool, max_length: int | None) -> dict[str, np.ndarray]:
    n = len(texts)
    inputs = {"TEXT": text_tensor(texts), "WITH_COLBERT": np.full((n, 1), bool(colbert), bool)}
    if max_length:  # absent: the server's limit
        inputs["MAX_LENGTH"] = np.full((n, 1), int(max_length), np.int32)
    return inputs


def _decode(res: dict[str, np.ndarray], n: int, colbert: bool) -> list[M3Output]:
    outs = []
    for i in range(n):
        keep = res["SPARSE_INDICES"][i] >= 0  # ragged per text: padded with -1 / 0
        count = int(res["NUM_TOKENS"][i].reshape(-1)[0])
        outs.append(M3Output(
            dense=res["DENSE"][i],
            sparse=dict(zip(res["SPARSE_INDICES"][i][keep].tolist(), res["SPARSE_VALUES"][i][keep].tolist())),
            colbert=res["COLBERT"][i][:count - 1] if colbert else None,  # padded with zero vectors
            truncated=bool(res["TRUNCATED"][i].reshape(-1)[0]),
            n_tokens=count,
        ))
    return outs


def sparse_score(q: dict[int, float], d: dict[int, float]) -> float:
    """FlagEmbedding's lexical matching score: the sum over shared token ids of the weights' product."""
    return float(sum(w * d[t] for t, w in q.items() if t in d))


def colbert_score(q: np.ndarray, d: np.ndarray) -> float:
    """FlagEmbedding's ColBERT score: per query vector the best dot product with the document's, averaged."""
    if len(q) == 0 or len(d) == 0:
        return 0.0
    return float((np.asarray(q, np.float32) @ np.asarray(d, np.float32).T).max(axis=1).sum() / len(q))
