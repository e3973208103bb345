"""BGE-M3 to ONNX: the XLM-RoBERTa encoder with its dense, sparse and ColBERT heads as one graph,
plus the tokenizer and special tokens the Python steps read.

Weights: a BGE-M3 folder as FlagEmbedding reads it (with ``sparse_linear.pt`` and
``colbert_linear.pt``) or the hub id ``BAAI/bge-m3``; semantics as ``search.models.bge_m3``.
``model.onnx`` is as exported (GPU config); ``model.cpu.onnx`` adds BERT fusions (config.pbtxt).
int8 only with ``--allow-unmeasured-int8``: no real weights to measure it on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from search.models.base import BuildReport, WeightsUnavailable
from search.models.bge_m3 import BGEM3, MAX_LENGTH
from search.models.export import bge_m3_golden
from search.models.export.common import (
    Fusion,
    check_config_dims,
    cpu_graph,
    describe_cpu_graph,
    export_checked,
    precision_status,
    resolve_weights,
    write_manifest,
)
from search.triton.steps import bge_m3 as steps  # the served tokenizer step, which the export runs too

HEADS = ("sparse_linear.pt", "colbert_linear.pt")


def build(fam: BGEM3, repo: Path, source: str, precision: str = "fp32", allow_unmeasured: bool = False) -> BuildReport:
    try:
        weights = resolve_weights(source, fam.family, fam.hub_hint)
        module, tokenizer, text, post = load(weights)
        check_configs(repo, post["dim"])
    except WeightsUnavailable as exc:  # resolve_weights names the flag after the family: the CLI spells it with a dash
        return BuildReport(fam.family, "missing weights", str(exc))
    status = precision_status(fam, weights, precision, allow_unmeasured)
    if isinstance(status, BuildReport):
        return status
    onnx_path = repo / "bge_m3_onnx/1/model.onnx"
    diff = export_onnx(module, tokenizer, text, onnx_path)
    config = module.encoder.config
    fusion = Fusion("bert", int(config.num_attention_heads), int(config.hidden_size))
    cpu = cpu_graph(onnx_path, fusion, check_inputs(tokenizer, text), fam.family, precision)
    tokenizer.save(str(repo / "bge_m3_tokenize/1/tokenizer.json"))
    (repo / "bge_m3_tokenize/1/text.json").write_text(json.dumps(text, indent=2))
    (repo / "bge_m3_post/1/post.json").write_text(json.dumps(post, indent=2))
    recorded = bge_m3_golden.record(fam, repo, module, weights, source, text["model_max_length"],  # for `search models verify`
                                    post["special_ids"])
    write_manifest(fam, repo, source, weights, dim=post["dim"], max_abs_diff_vs_torch=diff, precision=precision,
                   precision_status=status, cpu_graph=cpu, **recorded)
    return BuildReport(fam.family, "built", f"from {source} ({weights}); {post['dim']}-d, up to "
                       f"{text['model_max_length']} tokens; ONNX vs PyTorch max |Δ| {diff:.1e}; "
                       f"{describe_cpu_graph(cpu, status)}")


def check_inputs(tok, text: dict) -> list[dict]:
    """Batches the CPU graph must answer as the exported one does: mixed lengths, one text."""
    ids, mask = tokenize(tok, text, ["What is BGE M3?", "", "Définition: un modèle multilingue " * 12], 128)
    one, one_mask = tokenize(tok, text, ["a single query"])
    return [{"input_ids": ids, "attention_mask": mask}, {"input_ids": one, "attention_mask": one_mask}]


def load(weights: Path):
    """The torch module to export (input_ids, attention_mask -> dense, token_weights, colbert), the
    ``tokenizers`` tokenizer, text.json (pad id, the model's token limit) and post.json."""
    cfg = weights / "config.json"
    if not cfg.exists() or json.loads(cfg.read_text()).get("model_type") != "xlm-roberta":
        raise WeightsUnavailable(f"bge_m3: {weights} is not an XLM-RoBERTa model folder (config.json with "
                                 "model_type 'xlm-roberta')")
    missing = [h for h in HEADS if not (weights / h).exists()]
    if missing:
        raise WeightsUnavailable(f"bge_m3: {weights} lacks {' and '.join(missing)} (BGE-M3's sparse and ColBERT "
                                 f"heads, next to the model in the '{BGEM3.hub_hint}' repository)")
    import torch  # noqa: PLC0415
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.disable_progress_bar()
    encoder = AutoModel.from_pretrained(str(weights), attn_implementation="eager", add_pooling_layer=False).eval()
    hidden = int(encoder.config.hidden_size)
    sparse_linear = _head(weights / "sparse_linear.pt", hidden)
    colbert_linear = _head(weights / "colbert_linear.pt", hidden)
    if sparse_linear.out_features != 1:
        raise WeightsUnavailable(f"bge_m3: sparse_linear.pt maps to {sparse_linear.out_features} values, not 1")
    if colbert_linear.out_features != hidden:  # the dense and ColBERT outputs share one declared width
        raise WeightsUnavailable(f"bge_m3: colbert_linear.pt is {colbert_linear.out_features}-d, the encoder {hidden}-d")
    tok = AutoTokenizer.from_pretrained(str(weights))
    special = sorted({int(i) for i in (tok.cls_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id)
                      if i is not None})

    class M3(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.sparse_linear, self.colbert_linear = encoder, sparse_linear, colbert_linear

        def forward(self, input_ids, attention_mask):
            # Keyword arguments: positional ones collide with newer transformers signatures.
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.to(h.dtype)
            dense = torch.nn.functional.normalize(h[:, 0], p=2, dim=-1)
            token_weights = torch.relu(self.sparse_linear(h)).squeeze(-1) * mask
            colbert = self.colbert_linear(h[:, 1:]) * mask[:, 1:, None]
            return dense, token_weights, torch.nn.functional.normalize(colbert, p=2, dim=-1)

    # XLM-R numbers positions from padding_idx + 1, so it takes max_position_embeddings - 2 tokens.
    limit = int(encoder.config.max_position_embeddings) - int(encoder.config.pad_token_id) - 1
    text = {"model_max_length": min(limit, MAX_LENGTH), "pad_id": int(tok.pad_token_id), "pad_token": str(tok.pad_token)}
    post = {"dim": hidden, "special_ids": special}
    backend = tok.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    return M3().eval(), backend, text, post


def _head(path: Path, hidden: int):
    import torch  # noqa: PLC0415

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WeightsUnavailable(f"bge_m3: {path} cannot be read ({str(exc).splitlines()[0][:120]})") from exc
    weight = state.get("weight") if isinstance(state, dict) else None
    if weight is None or weight.ndim != 2 or weight.shape[1] != hidden:
        raise WeightsUnavailable(f"bge_m3: {path} is not a Linear({hidden}, n) state dict")
    linear = torch.nn.Linear(hidden, int(weight.shape[0]), bias="bias" in state)
    linear.load_state_dict(state)
    return linear.eval()


def check_configs(repo: Path, dim: int) -> None:
    """The committed configs declare 1024-d vectors (Triton's onnxruntime backend wants a config's
    output dims to equal the graph's exactly); another width needs them edited, which this says."""
    wanted = {("bge_m3_onnx", "dense"): [dim], ("bge_m3_onnx", "colbert"): [-1, dim],
              ("bge_m3_post", "dense"): [dim], ("bge_m3_post", "colbert"): [-1, dim],
              ("bge_m3_post", "DENSE"): [dim], ("bge_m3_post", "COLBERT"): [-1, dim],
              ("bge_m3", "DENSE"): [dim], ("bge_m3", "COLBERT"): [-1, dim]}
    check_config_dims(repo, "bge_m3", wanted, f"a {dim}-d model")


def tokenize(tok, text: dict, texts: list[str], max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """What bge_m3_tokenize does (its own code): truncate to the limit, pad to the longest text."""
    limit = steps.limit(max_length or 0, min(MAX_LENGTH, text["model_max_length"]))
    out = steps.tokenize(tok, texts, [limit] * len(texts), text["pad_id"])
    return out["input_ids"], out["attention_mask"]


def export_onnx(module, tok, text: dict, dest: Path) -> float:
    """bge_m3_onnx: input_ids, attention_mask [batch, seq] -> dense [batch, D], token_weights
    [batch, seq], colbert [batch, seq - 1, D]; returns the max |ONNX - PyTorch| on a check batch."""
    import torch  # noqa: PLC0415

    ids, mask = tokenize(tok, text, ["What is BGE M3?", "", "Définition: un modèle multilingue " * 6], 64)
    feeds = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    outputs = ["dense", "token_weights", "colbert"]
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "dense": {0: "batch"}, "token_weights": {0: "batch", 1: "sequence"}, "colbert": {0: "batch", 1: "tokens"}}
    return export_checked(module, feeds, outputs, axes, dest, "bge_m3")
