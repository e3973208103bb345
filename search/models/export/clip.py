"""CLIP to ONNX: the image and text towers (projection + L2 norm in the graph), plus the image
preprocessing and the tokenizer the Python steps read.

Weights come from a Hugging Face CLIP folder or hub id (transformers ``CLIPModel``), or from
open_clip as ``open_clip:MODEL/PRETRAINED`` (e.g. ``open_clip:ViT-B-32/laion2b_s34b_b79k``; PRETRAINED
may also be a checkpoint file). Either way the served models are the same six.

Each tower is written twice: ``model.onnx`` as exported (checked against PyTorch; the GPU configs
serve it) and ``model.cpu.onnx`` (config.pbtxt serves it): the fastest on this machine of the
exported graph, onnxruntime's CLIP fusions and, for transformers' text tower, the packed graph
(real tokens only, ``search.models.export.packed``), each checked against the exported graph
(int8 only behind ``--allow-unmeasured-int8``: no real CLIP weights were available to measure its
quality). The text tower takes any length up to the context: CLIP's
text transformer is causal and pools at the end token, so a text padded only to the longest of
its batch gives the vector of the same text padded to 77 (checked here on every build, recorded
as ``variable_length`` in text.json; where the check fails the tokenizer step pads to the context
length as before).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search.models.base import BuildReport, WeightsUnavailable
from search.models.clip import CLIP, CONTEXT_LENGTH
from search.models.export import golden
from search.models.export.common import (
    Fusion,
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

OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]
BICUBIC = 3  # PIL.Image.Resampling.BICUBIC
OPEN_CLIP = "open_clip:"


@dataclass
class Loaded:
    """What the export needs, whichever library the weights came from."""

    visual: object  # torch module: pixel_values -> unit vectors
    textual: object  # torch module: input_ids, attention_mask -> unit vectors
    tokenizer: object  # tokenizers.Tokenizer, CLIP-style (start/end tokens added)
    preprocess: dict  # written as clip_image_preprocess/1/preprocess.json
    text: dict  # written as clip_text_tokenize/1/text.json
    weights: Path
    reference_transform: object = None  # open_clip's own image transform (the golden outputs' reference)
    visual_fusion: Fusion | None = None  # how onnxruntime's optimizer reads each tower (None: not fused)
    text_fusion: Fusion | None = None
    packed_text: object = None  # torch module: the text tower on its real tokens only (None: no packed graph)


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
    recorded = golden.record_clip(fam, repo, loaded, source)  # for `search models verify`
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


# -- Hugging Face (transformers) weights
def load_transformers(weights: Path) -> Loaded:
    cfg = weights / "config.json"
    if not cfg.exists() or json.loads(cfg.read_text()).get("model_type") != "clip":
        raise WeightsUnavailable(f"clip: {weights} is not a CLIP model folder (config.json with model_type 'clip')")
    import torch  # noqa: PLC0415
    from transformers import CLIPModel, CLIPTokenizerFast  # noqa: PLC0415
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    from search.models.export.packed import PackedCausalText  # noqa: PLC0415  (torch at import)

    hf_logging.disable_progress_bar()
    model = CLIPModel.from_pretrained(str(weights), attn_implementation="eager").eval()
    tokenizer = CLIPTokenizerFast.from_pretrained(str(weights))
    text_cfg = model.config.text_config

    class Visual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            # Keyword arguments: positional ones collide with newer transformers signatures.
            feats = _features(self.model.get_image_features(pixel_values=pixel_values))
            return torch.nn.functional.normalize(feats, p=2, dim=-1)

    class Textual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            feats = _features(self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask))
            return torch.nn.functional.normalize(feats, p=2, dim=-1)

    # Configs from before transformers PR #24773 carry eos_token_id 2: the model then pools at
    # argmax(input_ids) (the end token has the highest id), otherwise at the first end token.
    pooling = "argmax" if text_cfg.eos_token_id == 2 else "first_eos"
    text = {"context_length": int(text_cfg.max_position_embeddings), "pad_id": int(tokenizer.pad_token_id),
            "pad_token": str(tokenizer.pad_token), "bos_id": int(tokenizer.bos_token_id),
            "eos_id": int(tokenizer.eos_token_id), "pooling": pooling, "lowercase": True}
    preprocess = hf_preprocess(weights / "preprocessor_config.json", int(model.config.vision_config.image_size))
    vision_cfg = model.config.vision_config
    return Loaded(Visual().eval(), Textual().eval(), tokenizer.backend_tokenizer, preprocess, text, weights,
                  visual_fusion=Fusion("clip", int(vision_cfg.num_attention_heads), int(vision_cfg.hidden_size)),
                  text_fusion=Fusion("clip", int(text_cfg.num_attention_heads), int(text_cfg.hidden_size)),
                  packed_text=PackedCausalText(model, pooling, int(text_cfg.eos_token_id)).eval())


def _features(out):
    """transformers 4 returns the projected features, 5 an output object holding them."""
    return out if hasattr(out, "shape") else out.pooler_output


def hf_preprocess(path: Path, image_size: int) -> dict:
    """CLIPImageProcessor's settings (its defaults where the file is silent), for the Python step."""
    cfg = json.loads(path.read_text()) if path.exists() else {}
    size = cfg.get("size", {"shortest_edge": image_size})
    if isinstance(size, int):  # old configs: an int is the shortest edge (CLIP does not default to square)
        size = {"shortest_edge": size}
    crop = cfg.get("crop_size", {"height": image_size, "width": image_size})
    if isinstance(crop, int):
        crop = {"height": crop, "width": crop}
    out = {
        "image_size": image_size,
        "resize": {k: int(v) for k, v in size.items() if k in ("shortest_edge", "height", "width")} if cfg.get("do_resize", True) else None,
        "resample": int(cfg.get("resample", BICUBIC)),
        "crop": [int(crop["height"]), int(crop["width"])] if cfg.get("do_center_crop", True) else None,
        "crop_rounding": "floor",  # transformers' center_crop: (size - crop) // 2
        "rescale_factor": float(cfg.get("rescale_factor", 1 / 255)) if cfg.get("do_rescale", True) else 1.0,
        "mean": [float(v) for v in cfg.get("image_mean", OPENAI_MEAN)] if cfg.get("do_normalize", True) else [0.0] * 3,
        "std": [float(v) for v in cfg.get("image_std", OPENAI_STD)] if cfg.get("do_normalize", True) else [1.0] * 3,
        "do_convert_rgb": bool(cfg.get("do_convert_rgb", True)),
        "alpha": "white",  # transformers' convert_to_rgb composites transparency onto white
    }
    return _check_preprocess(out)


# -- open_clip weights
def load_open_clip(spec: str) -> Loaded:
    """``MODEL/PRETRAINED`` (a pretrained tag or a checkpoint file), or ``hf-hub:org/repo`` /
    ``local-dir:/path`` (open_clip's own schemas, which carry their weights)."""
    if spec.startswith(("hf-hub:", "local-dir:")):
        model_name, pretrained = spec, None
    else:
        model_name, _, pretrained = spec.partition("/")
        if not model_name or not pretrained:
            raise WeightsUnavailable(f"clip: '{OPEN_CLIP}{spec}' should be {OPEN_CLIP}MODEL/PRETRAINED, "
                                     f"e.g. {OPEN_CLIP}ViT-B-32/laion2b_s34b_b79k or {OPEN_CLIP}ViT-B-32//path/to/checkpoint.bin")
    try:
        import open_clip  # noqa: PLC0415  (imports torchvision, which only works where its build matches torch)
    except Exception as exc:  # ImportError, or torchvision's "operator torchvision::nms does not exist"
        raise WeightsUnavailable(
            f"clip: open_clip cannot be imported here ({_reason(exc)}); it needs a torchvision build that matches "
            "torch. Build on a machine where `import open_clip` works and copy its triton_repo files, or use a "
            "Hugging Face CLIP folder with --clip-source."
        ) from exc
    import torch  # noqa: PLC0415

    try:
        model, _, transform = open_clip.create_model_and_transforms(model_name, pretrained=pretrained, device="cpu",
                                                            precision="fp32")
        tokenizer = open_clip.get_tokenizer(model_name)
    except Exception as exc:  # unknown model or tag, no network, missing file: all mean "not here"
        raise WeightsUnavailable(
            f"clip: open_clip could not load '{spec}' ({_reason(exc)}). Pass a checkpoint file "
            f"({OPEN_CLIP}{model_name}//path/to/open_clip_model.safetensors) or build where open_clip can download it."
        ) from exc
    model = model.eval()

    class Visual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            return torch.nn.functional.normalize(self.model.encode_image(pixel_values), p=2, dim=-1)

    class Textual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            # open_clip's text towers need no mask (causal attention, or a mask built from the pad id);
            # "+ mask * 0" keeps attention_mask a graph input so one config serves both sources.
            return torch.nn.functional.normalize(self.model.encode_text(input_ids + attention_mask * 0), p=2, dim=-1)

    text, backend = _open_clip_tokenizer(tokenizer, model)
    weights = Path(pretrained) if pretrained and Path(pretrained).exists() else Path(spec)
    return Loaded(Visual().eval(), Textual().eval(), backend, _open_clip_preprocess(model), text, weights, transform,
                  visual_fusion=_open_clip_fusion(getattr(model.visual, "transformer", None)),
                  text_fusion=_open_clip_fusion(getattr(model, "transformer", None)))


def _open_clip_fusion(transformer) -> Fusion | None:
    """The optimizer's reading of an open_clip tower (nn.MultiheadAttention blocks), where it has one;
    whatever fuses is checked against the exported graph like any other."""
    try:
        return Fusion("clip", int(transformer.resblocks[0].attn.num_heads), int(transformer.width))
    except (AttributeError, IndexError, TypeError):
        return None  # a timm or ModifiedResNet tower: served unfused


def _open_clip_preprocess(model) -> dict:
    cfg = dict(getattr(model.visual, "preprocess_cfg", None) or {})
    size = cfg.get("size", getattr(model.visual, "image_size", 224))
    h, w = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    if h != w or cfg.get("resize_mode", "shortest") != "shortest":
        raise WeightsUnavailable(f"clip: open_clip preprocessing {cfg} (non-square or resize_mode other than "
                                 "'shortest') is not implemented by clip_image_preprocess")
    out = {
        "image_size": int(h),
        "resize": {"shortest_edge": int(h)},
        "resample": 2 if cfg.get("interpolation") == "bilinear" else BICUBIC,
        "crop": [int(h), int(w)],
        "crop_rounding": "round",  # torchvision's CenterCrop: int(round((size - crop) / 2))
        "rescale_factor": 1 / 255,
        "mean": [float(v) for v in cfg.get("mean", OPENAI_MEAN)],
        "std": [float(v) for v in cfg.get("std", OPENAI_STD)],
        "do_convert_rgb": True,
        "alpha": "drop",  # open_clip's image.convert("RGB")
    }
    return _check_preprocess(out)


def _open_clip_tokenizer(tokenizer, model) -> tuple[dict, object]:
    """The ``tokenizers`` equivalent of open_clip's tokenizer, and its text.json."""
    context = int(getattr(tokenizer, "context_length", None) or getattr(model, "context_length", CONTEXT_LENGTH))
    pooling = str(getattr(model, "text_pool_type", "argmax"))
    if hasattr(tokenizer, "bpe_ranks"):  # SimpleTokenizer: OpenAI's BPE (its ftfy/HTML-entity clean-up is not redone)
        if getattr(tokenizer, "reduction_fn", None) is not None or \
                getattr(getattr(tokenizer, "clean_fn", None), "__name__", "_clean_lower") != "_clean_lower":
            raise WeightsUnavailable("clip: this open_clip tokenizer's cleaning/reduction mode is not supported")
        bos, eos = tokenizer.decoder[tokenizer.sot_token_id], tokenizer.decoder[tokenizer.eot_token_id]
        merges = [" ".join(pair) for pair, _ in sorted(tokenizer.bpe_ranks.items(), key=lambda kv: kv[1])]
        backend = clip_bpe_tokenizer(dict(tokenizer.encoder), merges, bos, eos)
        text = {"context_length": context, "pad_id": 0, "pad_token": tokenizer.decoder[0],  # open_clip pads with 0
                "bos_id": tokenizer.sot_token_id, "eos_id": tokenizer.eot_token_id, "pooling": pooling, "lowercase": True}
        return text, backend
    hf = getattr(tokenizer, "tokenizer", None)  # HFTokenizer wraps a transformers tokenizer
    if hf is None or not hasattr(hf, "backend_tokenizer") or getattr(tokenizer, "strip_sep_token", False) \
            or getattr(tokenizer, "tokenizer_mode", ""):
        raise WeightsUnavailable(f"clip: open_clip tokenizer {type(tokenizer).__name__} is not supported by clip_text_tokenize")
    text = {"context_length": context, "pad_id": int(hf.pad_token_id), "pad_token": str(hf.pad_token),
            "bos_id": hf.bos_token_id, "eos_id": hf.eos_token_id, "pooling": pooling, "lowercase": False}
    return text, hf.backend_tokenizer


def clip_bpe_tokenizer(vocab: dict[str, int], merges: list[str], bos: str, eos: str):
    """OpenAI CLIP's byte-level BPE as a ``tokenizers`` pipeline (the one transformers'
    CLIPTokenizerFast builds): NFC, whitespace runs to one space, lowercase, CLIP's word regex,
    ``</w>`` end-of-word suffix, start/end tokens around every text."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors  # noqa: PLC0415
    from tokenizers.models import BPE  # noqa: PLC0415

    tok = Tokenizer(BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], dropout=None,
                        continuing_subword_prefix="", end_of_word_suffix="</w>", fuse_unk=False, unk_token=eos))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    specials = "|".join(re.escape(t) for t in (bos, eos))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(specials + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing((eos, vocab[eos]), (bos, vocab[bos]),
                                                      trim_offsets=False, add_prefix_space=False)
    tok.add_special_tokens([bos, eos])  # written in a text they are that token, as in open_clip
    return tok


def _check_preprocess(cfg: dict) -> dict:
    out = cfg["crop"] or ([cfg["resize"]["height"], cfg["resize"]["width"]] if cfg["resize"] and "height" in cfg["resize"] else None)
    if out != [cfg["image_size"]] * 2:
        raise WeightsUnavailable(f"clip: the preprocessing gives {out} pixels but the model takes "
                                 f"{cfg['image_size']}×{cfg['image_size']}")
    return cfg


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


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

