"""BGE-M3: export the XLM-RoBERTa encoder with its two heads as one ONNX graph (dense, sparse token
weights, ColBERT vectors), record the tokenizer and the special tokens for the Python steps, and
encode via Triton.

Weights are a BGE-M3 folder as FlagEmbedding reads it (a Hugging Face XLM-RoBERTa model with its
tokenizer, plus ``sparse_linear.pt`` and ``colbert_linear.pt`` next to it) or the hub id
``BAAI/bge-m3``. The semantics are FlagEmbedding's ``BGEM3FlagModel``:

- dense: the CLS hidden state, L2-normalised;
- sparse: ``relu(sparse_linear(h))`` per token, the max weight per token id, special tokens (cls,
  eos, pad, unk) and zero weights dropped; score = sum over shared ids of q_weight * d_weight;
- ColBERT: ``colbert_linear(h[:, 1:])`` over the real tokens (the eos token included), each vector
  L2-normalised; score = mean over query vectors of the max dot product with the document's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search.models.base import BuildReport, ServedModel, WeightsUnavailable, check_config_dims, export_checked, resolve_weights
from search.triton.client import TritonClient, text_tensor
from search.triton.steps import bge_m3 as steps  # the served tokenizer step, which the export runs too

DIM = 1024  # BGE-M3's hidden size: the dims the committed configs declare
MAX_LENGTH = 8192  # BGE-M3's context (max_position_embeddings 8194 minus XLM-R's position offset)
BATCH = 16  # max_batch_size of the bge_m3 models (texts may be 8192 tokens long)
HEADS = ("sparse_linear.pt", "colbert_linear.pt")


@dataclass
class M3Output:
    dense: np.ndarray  # [D], unit length
    sparse: dict[int, float]  # token id -> weight (special tokens and zero weights left out)
    colbert: np.ndarray | None  # [n_tokens - 1, D] unit vectors, None when not asked for
    truncated: bool  # the text had more tokens than the max length
    n_tokens: int  # tokens the model saw, <s> and </s> included


class BGEM3(ServedModel):
    family = "bge_m3"
    ensembles = ("bge_m3",)
    steps = ("bge_m3_tokenize", "bge_m3_onnx", "bge_m3_post")
    hub_hint = "BAAI/bge-m3"

    def artifacts(self, repo: Path) -> list[Path]:
        return [repo / "bge_m3_tokenize/1/tokenizer.json", repo / "bge_m3_tokenize/1/text.json",
                repo / "bge_m3_onnx/1/model.onnx", repo / "bge_m3_post/1/post.json", self.manifest_path(repo)]

    def build(self, repo: Path, source: str, *, force: bool = False) -> BuildReport:
        if not force and self.built_from(repo) == source:
            return BuildReport(self.family, "up to date", f"from {source}")
        try:
            weights = resolve_weights(source, self.family, self.hub_hint)
            module, tokenizer, text, post = load(weights)
            check_configs(repo, post["dim"])
        except WeightsUnavailable as exc:  # base names the flag after the family: the CLI spells it with a dash
            return BuildReport(self.family, "missing weights", str(exc))
        diff = export_onnx(module, tokenizer, text, repo / "bge_m3_onnx/1/model.onnx")
        tokenizer.save(str(repo / "bge_m3_tokenize/1/tokenizer.json"))
        (repo / "bge_m3_tokenize/1/text.json").write_text(json.dumps(text, indent=2))
        (repo / "bge_m3_post/1/post.json").write_text(json.dumps(post, indent=2))
        self.write_manifest(repo, source, weights, dim=post["dim"], max_abs_diff_vs_torch=diff)
        return BuildReport(self.family, "built", f"from {source} ({weights}); {post['dim']}-d, up to "
                           f"{text['model_max_length']} tokens; ONNX vs PyTorch max |Δ| {diff:.1e}")


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


# -- client helpers
def encode(client: TritonClient, texts: list[str], *, colbert: bool = True, max_length: int | None = None) -> list[M3Output]:
    """Dense, sparse and (unless ``colbert=False``) ColBERT outputs per text from the ``bge_m3``
    ensemble; ``max_length`` lowers the served limit (8192 tokens, or the model's own if smaller)."""
    outs: list[M3Output] = []
    names = ["DENSE", "SPARSE_INDICES", "SPARSE_VALUES", "COLBERT", "TRUNCATED", "NUM_TOKENS"]
    for start in range(0, len(texts), BATCH):
        chunk = texts[start:start + BATCH]
        n = len(chunk)
        inputs = {"TEXT": text_tensor(chunk), "WITH_COLBERT": np.full((n, 1), bool(colbert), bool)}
        if max_length:  # absent: the server's limit
            inputs["MAX_LENGTH"] = np.full((n, 1), int(max_length), np.int32)
        res = client.infer("bge_m3", inputs, names)
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
