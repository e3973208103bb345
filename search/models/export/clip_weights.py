"""CLIP weights, loaded into what the export (``search.models.export.clip``) needs: the two towers
as torch modules giving unit vectors, the tokenizer, and the settings the image-preprocessing and
tokenizer steps read.

Weights come from a Hugging Face CLIP folder or hub id (transformers ``CLIPModel``), or from
open_clip as ``open_clip:MODEL/PRETRAINED`` (e.g. ``open_clip:ViT-B-32/laion2b_s34b_b79k``; PRETRAINED
may also be a checkpoint file). Either way the served models are the same six.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from search.models.base import WeightsUnavailable
from search.models.clip import CONTEXT_LENGTH
from search.models.export.common import Fusion

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
