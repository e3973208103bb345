"""CLIP to ONNX: the image and text towers (projection + L2 norm in the graph), plus the image
preprocessing and tokenizer the Python steps read; weights via
``search.models.export.clip_weights`` (transformers or open_clip).

Each tower: ``model.onnx`` as exported (GPU configs) and ``model.cpu.onnx`` (config.pbtxt), the
fastest here of exported, fused and (transformers' text tower) packed graphs (int8 only with
``--allow-unmeasured-int8``). The text tower takes any length up to the context: it is causal and
pools at the end token, so padding to the batch's longest equals padding to 77 (checked per build
as ``variable_length`` in text.json; else the tokenizer pads to the context)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from search.models.base import BuildReport, WeightsUnavailable
from search.models.clip import CLIP
from search.models.export import clip_golden
from search.models.export.clip_weights import (
    OPEN_CLIP,
    OPENAI_MEAN,
    OPENAI_STD,
    Loaded,
    clip_bpe_tokenizer,
    hf_preprocess,
    load_open_clip,
    load_transformers,
)
from search.models.export.common import (
    agreement,
    check_config_dims,
    cpu_graph,
    describe_cpu_graph,
    export_checked,
    precision_status,
    resolve_weights,
    run_graph,
    write_manifest,
)
from search.triton.steps import tokens  # the served tokenizer step's own code

# With the loading's public names (clip_weights.py), which callers import from here.
__all__ = ["CHECK_TEXTS", "OPENAI_MEAN", "OPENAI_STD", "OPEN_CLIP", "TIMING_QUERIES", "Loaded", "build", "check_configs",
           "clip_bpe_tokenizer", "export_textual", "export_visual", "hf_preprocess", "load_open_clip", "load_transformers",
           "packed_textual", "query_timing", "text_checks", "tokenize", "trimmed", "variable_length", "visual_checks"]


def build(fam: CLIP, repo: Path, source: str, precision: str = "fp32", allow_unmeasured: bool = False) -> BuildReport:
    try:
        if source.startswith(OPEN_CLIP):
            loaded = load_open_clip(source[len(OPEN_CLIP):])
        else:
            loaded = load_transformers(resolve_weights(source, fam.family, fam.hub_hint))
        dim = check_configs(repo, loaded)
    except WeightsUnavailable as exc:
        return BuildReport(fam.family, "missing weights", str(exc))
    status = precision_status(fam, loaded.weights, precision, allow_unmeasured)
    if isinstance(status, BuildReport):
        return status
    visual_path, text_path = repo / "clip_visual/1/model.onnx", repo / "clip_textual/1/model.onnx"
    visual_diff = export_visual(loaded, visual_path)
    text_diff = export_textual(loaded, text_path)
    loaded.text["variable_length"] = variable_length(loaded, text_path)
    cpu = {"clip_visual": cpu_graph(visual_path, loaded.visual_fusion, visual_checks(loaded), fam.family, precision),
           "clip_textual": cpu_graph(text_path, loaded.text_fusion, text_checks(loaded), fam.family, precision,
                                     timing=query_timing(loaded), pack=packed_textual(loaded))}
    (repo / "clip_image_preprocess/1/preprocess.json").write_text(json.dumps(loaded.preprocess, indent=2))
    loaded.tokenizer.save(str(repo / "clip_text_tokenize/1/tokenizer.json"))
    (repo / "clip_text_tokenize/1/text.json").write_text(json.dumps(loaded.text, indent=2))
    diff = max(visual_diff, text_diff)
    recorded = clip_golden.record(fam, repo, loaded, source)  # for `search models verify`
    write_manifest(fam, repo, source, loaded.weights, dim=dim, max_abs_diff_vs_torch=diff, precision=precision,
                   precision_status=status, cpu_graph=cpu, variable_length_text=loaded.text["variable_length"], **recorded)
    graphs = "; ".join(f"{name}: {describe_cpu_graph(c, status)}" for name, c in cpu.items())
    length = "padded to the batch's longest" if loaded.text["variable_length"] else f"padded to {loaded.text['context_length']}"
    return BuildReport(fam.family, "built", f"from {source} ({loaded.weights}); {dim}-d; ONNX vs PyTorch max |Δ| "
                       f"{diff:.1e}; texts {length}; {graphs}")


def check_configs(repo: Path, loaded: Loaded) -> int:
    """The embedding width, once the committed configs are known to take this model's shapes.

    Their dims are concrete (512-d, 224 px, 77 tokens: ViT-B/32) because Triton's onnxruntime
    backend wants a config's output dims to equal the graph's exactly; other widths need those
    dims edited, which this says instead of exporting files the server would refuse."""
    import torch  # noqa: PLC0415

    size, n = loaded.preprocess["image_size"], loaded.text["context_length"]
    with torch.no_grad():
        dim = int(loaded.visual(torch.zeros((1, 3, size, size))).shape[1])
        text_dim = int(loaded.textual(*map(torch.from_numpy, tokenize(loaded.tokenizer, loaded.text, [""]))).shape[1])
    if dim != text_dim:
        raise WeightsUnavailable(f"clip: image vectors are {dim}-d but text vectors {text_dim}-d")
    wanted = {("clip_image_preprocess", "pixel_values"): [3, size, size], ("clip_visual", "pixel_values"): [3, size, size],
              ("clip_visual", "embedding"): [dim], ("clip_image", "EMBEDDING"): [dim],
              ("clip_text_tokenize", "input_ids"): [-1], ("clip_textual", "input_ids"): [-1],
              ("clip_textual", "embedding"): [dim], ("clip_text", "EMBEDDING"): [dim]}
    check_config_dims(repo, "clip", wanted, f"a {dim}-d, {size} px CLIP")
    limit = _max_length(repo)
    if limit is not None and n > limit:
        raise WeightsUnavailable(f"clip: this model reads {n} tokens but clip_text_tokenize's max_length is {limit} "
                                 "(and the GPU config's TensorRT profile ends there): raise both to match")
    return dim


def _max_length(repo: Path) -> int | None:
    """clip_text_tokenize's max_length parameter, where the committed config has one."""
    path = repo / "clip_text_tokenize" / "config.pbtxt"
    if not path.exists():
        return None
    from google.protobuf import text_format  # noqa: PLC0415
    from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

    cfg = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    return int(cfg.parameters["max_length"].string_value) if "max_length" in cfg.parameters else None


# -- export
def export_visual(loaded: Loaded, dest: Path) -> float:
    """clip_visual: pixel_values [batch, 3, 224, 224] -> embedding [batch, D]; returns max |ONNX - PyTorch|."""
    import torch  # noqa: PLC0415

    size = loaded.preprocess["image_size"]
    pixels = torch.randn((3, 3, size, size), generator=torch.Generator().manual_seed(0))
    return _export(loaded.visual, {"pixel_values": pixels}, dest)


CHECK_TEXTS = ["a photo of a cat", "", "two dogs playing in the snow " * 20, "a red car", "people walking on the "
               "beach at sunset with their dog, the sky orange and purple above the sea"]
# Short photo queries of different lengths: what the build times the text graphs on (bench/bench_clip.py queries with them).
TIMING_QUERIES = ["a dog on the beach", "two people riding bicycles", "a plate of food", "a city street at night",
                  "a cat sleeping on a sofa", "a train at the station", "children playing football", "a bowl of fruit"]


def export_textual(loaded: Loaded, dest: Path, packed: bool = False) -> float:
    """clip_textual: input_ids, attention_mask [batch, tokens] -> embedding [batch, D]; traced on
    texts padded to the context length, with a dynamic token axis (``variable_length`` checks it).
    ``packed``: the packed text graph (``search.models.export.packed``), checked against the model
    as loaded."""
    import torch  # noqa: PLC0415

    ids, mask = tokenize(loaded.tokenizer, loaded.text, CHECK_TEXTS[:3])
    feeds = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}, "embedding": {0: "batch"}}
    if packed:
        return export_checked(loaded.packed_text, feeds, ["embedding"], axes, dest, "clip", reference=loaded.textual)
    return export_checked(loaded.textual, feeds, ["embedding"], axes, dest, "clip")


def packed_textual(loaded: Loaded) -> Callable[[Path], float] | None:
    """The export of the packed text graph, where the weights' library has one (transformers;
    open_clip's towers are served as exported or fused)."""
    if loaded.packed_text is None:
        return None
    return lambda dest: export_textual(loaded, dest, packed=True)


def text_checks(loaded: Loaded) -> list[dict]:
    """Text batches as the tokenizer step sends them: padded to the context length, and (when the
    graph takes it) each text alone at its own length and the short ones padded to their longest."""
    ids, mask = tokenize(loaded.tokenizer, loaded.text, CHECK_TEXTS)
    checks = [{"input_ids": ids, "attention_mask": mask}]
    if loaded.text.get("variable_length"):
        checks += trimmed(ids, mask)
    return checks


def trimmed(ids: np.ndarray, mask: np.ndarray) -> list[dict]:
    """Each row alone cut to its own length, and the rows shorter than the context together, cut
    to their longest: what the tokenizer step sends instead of 77 tokens."""
    lengths = mask.sum(axis=1)
    out = [{"input_ids": ids[r:r + 1, :n], "attention_mask": mask[r:r + 1, :n]} for r, n in enumerate(lengths)]
    short = np.flatnonzero(lengths < ids.shape[1])
    if len(short) > 1:
        n = int(lengths[short].max())
        out.append({"input_ids": ids[short, :n], "attention_mask": mask[short, :n]})
    return out


def variable_length(loaded: Loaded, graph: Path) -> bool:
    """Whether the exported text graph gives each text the vector it gives that text padded to the
    context length, when the text is padded only to the longest of its batch: true for a causal
    text tower that pools at the end token and builds its masks and positions from the input's
    shape; false (the tokenizer step then pads to the context) for a graph that fixed the length
    while tracing (it fails or differs at other lengths)."""
    ids, mask = tokenize(loaded.tokenizer, loaded.text, CHECK_TEXTS)
    full = run_graph(graph, [{"input_ids": ids, "attention_mask": mask}])[0][0]
    cases = trimmed(ids, mask)
    try:
        got = run_graph(graph, cases)
    except Exception:  # a shape the traced graph cannot take
        return False
    lengths = mask.sum(axis=1)
    rows = [[r] for r in range(len(ids))] + ([list(np.flatnonzero(lengths < ids.shape[1]))] if len(cases) > len(ids) else [])
    return agreement([[full[r]] for r in rows], got) >= 0.9999


def query_timing(loaded: Loaded) -> list[dict] | None:
    """What the text tower mostly runs: one short query at a time (at its own length where it can),
    and, under load, the queries that waited together as one request, of different lengths (padded
    to the longest, as the tokenizer step pads them: 8 concurrent clients' requests held ~3.7 queries)."""
    if not loaded.text.get("variable_length"):
        return None  # the check inputs, at the context length
    ids, mask = tokenize(loaded.tokenizer, loaded.text, TIMING_QUERIES)
    lengths = mask.sum(axis=1)
    alone = [{"input_ids": ids[r:r + 1, :n], "attention_mask": mask[r:r + 1, :n]} for r, n in enumerate(lengths[:4])]
    together = [slice(0, 4), slice(4, 8)]
    return [*alone, *({"input_ids": ids[s, :lengths[s].max()], "attention_mask": mask[s, :lengths[s].max()]} for s in together)]


def visual_checks(loaded: Loaded) -> list[dict]:
    size = loaded.preprocess["image_size"]
    pixels = np.random.default_rng(0).normal(size=(3, 3, size, size)).astype(np.float32)
    return [{"pixel_values": pixels}, {"pixel_values": pixels[:1]}]


def tokenize(tok, text: dict, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """CLIP's reference tokenization: truncate, then pad to the context length, as CLIP was
    trained (the tokenizer step's code; it pads only to the batch's longest where the graph allows)."""
    n = text["context_length"]
    out = tokens.pad(tokens.encode(tok, texts, n), text["pad_id"], width=n)
    return out["input_ids"], out["attention_mask"]


def _export(module, feeds: dict, dest: Path) -> float:
    axes = {n: {0: "batch"} for n in [*feeds, "embedding"]}
    return export_checked(module, feeds, ["embedding"], axes, dest, "clip")

