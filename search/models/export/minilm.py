"""all-MiniLM-L6-v2 to ONNX: the encoder with mean pooling + L2 norm in the graph, and its tokenizer.

Two graphs: ``model.onnx`` as exported (checked against PyTorch; the GPU configs serve it) and
``model.cpu.onnx`` (config.pbtxt serves it): onnxruntime's BERT fusions, checked against the
exported graph, and with ``precision="int8"`` quantized per token (``search.models.export.int8``;
checked on the sentences of samples/docs and short everyday ones, its quality figures: ``MiniLM.int8_quality``, measured by
bench/quality_minilm.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from search.models.base import BuildReport, WeightsUnavailable
from search.models.export import minilm_golden
from search.models.export.common import (
    Fusion,
    cpu_graph,
    describe_cpu_graph,
    export_checked,
    precision_status,
    resolve_weights,
    write_manifest,
)
from search.models.minilm import MAX_TOKENS, MiniLM, package_weights


def build(fam: MiniLM, repo: Path, source: str, precision: str = "fp32", allow_unmeasured: bool = False) -> BuildReport:
    try:
        weights = package_weights() if source == "package" else resolve_weights(source, fam.family, fam.hub_hint)
    except WeightsUnavailable as exc:
        return BuildReport(fam.family, "missing weights", str(exc))
    status = precision_status(fam, weights, precision, allow_unmeasured)
    if isinstance(status, BuildReport):
        return status
    _check_pooling(weights)
    onnx_path = repo / "minilm_onnx/1/model.onnx"
    max_diff = export_onnx(weights, onnx_path)
    config = json.loads((weights / "config.json").read_text())
    fusion = Fusion("bert", int(config["num_attention_heads"]), int(config["hidden_size"]))
    from search.models.export.packed import supports  # noqa: PLC0415  (torch at import)

    # a configuration the packed encoder does not reproduce is served as exported or fused
    pack = (lambda dest: export_onnx(weights, dest, packed=True)) if supports(config) else None
    text = text_inputs(weights) if precision == "int8" else None
    cpu = cpu_graph(onnx_path, fusion, check_inputs(), fam.family, precision, timing=timing_inputs(), pack=pack, text=text,
                    keep_float=fam.int8_float)
    save_tokenizer(weights, fam.tokenizer_path(repo))
    link_query_copy(repo)
    recorded = minilm_golden.record(fam, repo, weights, source, MAX_TOKENS)  # for `search models verify`
    write_manifest(fam, repo, source, weights, max_abs_diff_vs_torch=max_diff, precision=precision,
                   precision_status=status, cpu_graph=cpu, **recorded)
    return BuildReport(fam.family, "built", f"from {source} ({weights}); ONNX vs PyTorch max |Δ| {max_diff:.1e}; "
                       f"{describe_cpu_graph(cpu, status)}")


def link_query_copy(repo: Path) -> None:
    """The query deployment (minilm_query_onnx) serves the same graphs: hard links (one copy on
    disk; a copy where the file system has none), replaced atomically."""
    for name in ("model.onnx", "model.cpu.onnx"):
        src, dst = repo / "minilm_onnx/1" / name, repo / "minilm_query_onnx/1" / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{name}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def timing_inputs() -> list[dict]:
    """What the served model mostly sees, padded as the server pads: a request of 32 sentences of
    8-40 tokens at its longest (32 STS-B sentences carry 1.6 padded tokens per real one), a batch
    of 16 passages from ingest's length-sorted windows (120-160 tokens), a lone query."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(1)
    out = []
    for batch, shortest, longest in ((32, 8, 40), (16, 120, 160), (1, 12, 12)):
        lengths = rng.integers(shortest, longest + 1, batch)
        mask = (np.arange(lengths.max()) < lengths[:, None]).astype(np.int64)
        ids = rng.integers(1000, 29000, mask.shape, dtype=np.int64) * mask
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return out


SAMPLES = Path(__file__).resolve().parents[3] / "samples"  # the repository's sample documents


def sentences() -> list[str]:
    """Real text the repository ships: every sentence (heading, list item) of samples/docs, the
    sample queries, the golden texts and short everyday sentences (SHORT_TEXTS)."""
    from search.models import golden  # noqa: PLC0415
    from search.models.export.short_texts import SHORT_TEXTS  # noqa: PLC0415

    out = []
    for path in sorted((SAMPLES / "docs").glob("*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = re.sub(r"[*#`>]|^\s*(\d+\.|-)\s+", "", line).strip()
            out += [s for s in re.split(r"(?<=[.!?])\s+", line) if len(s) > 2]
    queries = SAMPLES / "queries.json"
    if queries.is_file():
        out += [q["query"] for q in json.loads(queries.read_text(encoding="utf-8"))]
    return out + [t.text for t in golden.inputs().texts] + list(SHORT_TEXTS)


def text_inputs(weights: Path, batch: int = 64) -> list[dict]:
    """``sentences()`` tokenized as served (cut at MAX_TOKENS), in batches of ``batch`` mixed lengths
    (shuffled: padding must not leak into the vectors)."""
    import numpy as np  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415

    texts = sentences()
    if (weights / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(weights / "tokenizer.json"))
    else:
        from transformers import AutoTokenizer  # noqa: PLC0415

        tok = AutoTokenizer.from_pretrained(weights).backend_tokenizer
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    encoded = [e.ids for e in tok.encode_batch(texts)]
    np.random.default_rng(0).shuffle(encoded)
    out = []
    for start in range(0, len(encoded), batch):
        rows = encoded[start:start + batch]
        mask = (np.arange(max(map(len, rows))) < np.array([len(r) for r in rows])[:, None]).astype(np.int64)
        ids = np.zeros_like(mask)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return out


def check_inputs() -> list[dict]:
    """Batches the CPU graph must answer as the exported one does: padded rows, one token, 256 tokens."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    out = []
    for batch, length in ((4, 12), (1, 1), (2, 256)):
        ids = rng.integers(1000, 29000, (batch, length), dtype=np.int64)
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
        mask = np.ones_like(ids)
        if batch > 1:
            mask[1, length // 2:] = 0
            ids[1, length // 2:] = 0
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return out


def _check_pooling(weights: Path) -> None:
    cfg = weights / "1_Pooling" / "config.json"
    if cfg.exists() and not json.loads(cfg.read_text()).get("pooling_mode_mean_tokens"):
        raise WeightsUnavailable(f"minilm: {weights} is not a mean-pooled sentence-transformers model")


def save_tokenizer(weights: Path, dest: Path) -> None:
    src = weights / "tokenizer.json"
    if src.exists():
        shutil.copy2(src, dest)
        return
    from transformers import AutoTokenizer  # noqa: PLC0415  (only for folders without tokenizer.json)

    AutoTokenizer.from_pretrained(weights).backend_tokenizer.save(str(dest))


def export_onnx(weights: Path, dest: Path, packed: bool = False) -> float:
    """Export encoder + mean pooling + L2 norm; returns the max |ONNX - PyTorch| on a check batch
    (PyTorch: the model as loaded, padded, also for the ``packed`` form, which runs the encoder on
    the real tokens only: ``search.models.export.packed``)."""
    import torch  # noqa: PLC0415
    from transformers import AutoModel  # noqa: PLC0415
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    from search.models.export.packed import PackedEncoder  # noqa: PLC0415  (torch at import)

    hf_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(weights), attn_implementation="eager").eval()

    class MeanPooledEncoder(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module, packed: bool) -> None:
            super().__init__()
            self.encoder = PackedEncoder(encoder) if packed else encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            # Keyword arguments: positional ones collide with newer transformers signatures.
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            if not isinstance(self.encoder, PackedEncoder):
                hidden = hidden.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    wrapper = MeanPooledEncoder(model, packed).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    types = torch.zeros_like(ids)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    axes = {n: {0: "batch", 1: "sequence"} for n in feeds} | {"embedding": {0: "batch"}}
    reference = MeanPooledEncoder(model, False).eval() if packed else None
    return export_checked(wrapper, feeds, ["embedding"], axes, dest, "minilm", reference=reference)
