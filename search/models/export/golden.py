"""Golden outputs, recorded at build time: each family's PyTorch reference run on the golden inputs
(``search.models.golden``) and stored beside the model as ``golden.npz``, for `search models verify`
to compare the served ensembles with later (on another machine, another Triton, TensorRT FP16 ...).

The references follow the publishers' own pipelines where they differ from the served steps: the
transformers tokenizers and image processors (not the Python steps' code), FlagEmbedding's sparse
and ColBERT post-processing, modelscope's OFA image rule. Each ``record_*`` returns what the build
manifest notes about the file (``golden`` in build.json).
"""

from __future__ import annotations

import hashlib
import io
import platform
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from search.models import golden
from search.models.base import Family
from search.models.published import identify


def _torch():
    import torch  # noqa: PLC0415  (the export extra: only a build imports this module)

    return torch


def write(fam: Family, repo: Path, arrays: dict[str, np.ndarray], reference: str, *, source: str, weights: Path | str,
          weights_sha256: str | None = None) -> dict:
    """Save the golden file beside the build manifest; what build.json records about it."""
    gold = golden.inputs()
    torch = _torch()
    meta = {"family": fam.family, "inputs_digest": gold.digest, "reference": reference, "precision": "fp32",
            "torch": torch.__version__, "python": platform.python_version(),
            "texts": [t.id for t in gold.texts], "photos": [p.id for p in gold.photos], "pairs": [p.id for p in gold.pairs]}
    path = fam.manifest_path(repo).parent / golden.FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = golden.save(path, arrays, meta)
    return {"golden": {"file": str(path.relative_to(repo)), "sha256": digest, "inputs_digest": gold.digest,
                       "reference": reference},
            "checkpoint": identify(fam.family, source, str(weights), weights_sha256)}


def file_sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- MiniLM: transformers' BertModel, mean pooling over the attention mask, L2 norm
def record_minilm(fam: Family, repo: Path, weights: Path, source: str, max_tokens: int) -> dict:
    """The reference is sentence-transformers' pipeline for all-MiniLM-L6-v2, written with
    transformers (the export's own dependencies): its tokenizer cut at ``max_tokens`` (the served
    limit), mean pooling over real tokens, L2 normalisation."""
    torch = _torch()
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415  (export extra)

    gold = golden.inputs()
    texts = [t.text for t in gold.texts]
    tok = AutoTokenizer.from_pretrained(str(weights))
    model = AutoModel.from_pretrained(str(weights), attn_implementation="eager").eval()
    enc = tok(texts, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    dense = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), p=2, dim=1)
    truncated = np.array([len(tok(t, verbose=False)["input_ids"]) > max_tokens for t in texts])
    return write(fam, repo, {"text_dense": dense.numpy().astype(np.float32), "text_truncated": truncated},
                 "transformers AutoModel + mean pooling + L2 norm (sentence-transformers' pipeline)",
                 source=source, weights=weights, weights_sha256=file_sha256(weights / "model.safetensors"))


# -- CLIP: the two towers in PyTorch, the publisher's image processor, the CLIP tokenizer at 77 tokens
def record_clip(fam: Family, repo: Path, loaded, source: str) -> dict:
    """Text: the tokenizer's ids (start, end, cut at the context length, padded), the text tower;
    image: transformers' CLIPImageProcessor from the checkpoint folder (or open_clip's own transform),
    the image tower. Both towers as exported (projection + L2 norm)."""
    torch = _torch()
    gold = golden.inputs()
    texts = [t.text for t in gold.texts]
    ids, mask, truncated = _clip_tokens(loaded.tokenizer, loaded.text, texts)
    pixels = _clip_pixels(loaded, [p.data for p in gold.photos])
    with torch.no_grad():
        text_dense = loaded.textual(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        image_dense = loaded.visual(pixels).numpy()
    arrays = {"text_dense": text_dense.astype(np.float32), "text_truncated": truncated,
              "image_dense": image_dense.astype(np.float32)}
    how = "open_clip" if getattr(loaded, "reference_transform", None) is not None else "transformers CLIPModel"
    return write(fam, repo, arrays, f"{how} towers; reference tokenizer and image processor", source=source,
                 weights=loaded.weights)


def _clip_tokens(tok, text: dict, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, pad = text["context_length"], text["pad_id"]
    ids = np.full((len(texts), n), pad, np.int64)
    mask = np.zeros((len(texts), n), np.int64)
    truncated = np.zeros(len(texts), bool)
    tok.no_truncation()  # the ids as the tokenizer gives them; cut and padded here
    tok.no_padding()
    for i, t in enumerate(texts):
        full = tok.encode(t).ids  # the tokenizer adds the start and end tokens
        if len(full) > n:  # cut, keeping the end token last (as CLIP's tokenizers do)
            full, truncated[i] = [*full[:n - 1], full[-1]], True
        ids[i, :len(full)], mask[i, :len(full)] = full, 1
    return ids, mask, truncated


def _clip_pixels(loaded, images: list[bytes]):
    torch = _torch()
    pictures = [Image.open(io.BytesIO(data)) for data in images]
    transform = getattr(loaded, "reference_transform", None)
    if transform is not None:  # open_clip: its own torchvision transform
        return torch.stack([transform(p) for p in pictures])
    from transformers import CLIPImageProcessor  # noqa: PLC0415  (export extra)
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "falling back to the PIL backend" where torchvision is absent
    try:
        processor = CLIPImageProcessor.from_pretrained(str(loaded.weights))
    finally:
        hf_logging.set_verbosity(level)
    return torch.from_numpy(np.stack([processor(images=p, return_tensors="np")["pixel_values"][0] for p in pictures]))


# -- BGE-M3: the exported module, FlagEmbedding's tokenizer call and post-processing
def record_bge_m3(fam: Family, repo: Path, module, weights: Path, source: str, limit: int, special_ids: list[int]) -> dict:
    """Per text: the transformers tokenizer cut at the text's limit (``max_length`` of the golden
    text, else the model's), the encoder with its heads, then FlagEmbedding's BGEM3FlagModel rules:
    dense = normalised CLS; sparse = max relu weight per token id, special tokens and zeros dropped;
    ColBERT = the normalised vectors of tokens 1..n-1."""
    torch = _torch()
    from transformers import AutoTokenizer  # noqa: PLC0415  (export extra)

    tok = AutoTokenizer.from_pretrained(str(weights))
    special = set(special_ids)
    dense, sparse_ids, sparse_values, colbert, truncated = [], [], [], [], []
    for t in golden.inputs().texts:
        cap = min(t.max_length or limit, limit)
        enc = tok([t.text], truncation=True, max_length=cap, return_tensors="pt")
        truncated.append(len(tok(t.text, verbose=False)["input_ids"]) > cap)
        with torch.no_grad():
            d, weights_, cb = module(enc["input_ids"], enc["attention_mask"])
        ids = enc["input_ids"][0].tolist()
        best: dict[int, float] = {}
        for w, i in zip(weights_[0].tolist(), ids):
            if i not in special and w > 0 and w > best.get(i, 0.0):
                best[i] = w
        dense.append(d[0].numpy())
        sparse_ids.append(np.array(sorted(best), np.int64))
        sparse_values.append(np.array([best[i] for i in sorted(best)], np.float32))
        colbert.append(cb[0, :len(ids) - 1].numpy())
    flat_ids, offsets = golden.ragged(sparse_ids, np.int64)
    flat_values, _ = golden.ragged(sparse_values)
    flat_colbert, colbert_offsets = golden.ragged(colbert, width=int(dense[0].shape[0]))
    arrays = {"text_dense": np.stack(dense).astype(np.float32), "text_truncated": np.array(truncated),
              "sparse_ids": flat_ids, "sparse_values": flat_values, "sparse_offsets": offsets,
              "colbert": flat_colbert, "colbert_offsets": colbert_offsets}
    return write(fam, repo, arrays, "the exported PyTorch module; transformers tokenizer; FlagEmbedding's post-processing",
                 source=source, weights=weights)


# -- OFA: the exported PyTorch module, modelscope's image rule
def record_ofa(fam: Family, repo: Path, module, tok, ve: dict, labels_order: list[int], source: str, weights: Path) -> dict:
    """One pair at a time: the prompt (the served step's text code, which the export check also
    runs) and modelscope's image rule written here with Pillow (EXIF orientation, RGB, bicubic
    S×S resize, /255, (x - mean) / std); the exported module's answer logits, ordered as served."""
    torch = _torch()
    from search.triton.steps import ofa_ve  # noqa: PLC0415  (the served prompt code, as the export check)

    gold = golden.inputs()
    logits, truncated = [], []
    for pair in gold.pairs:
        ids, cut = ofa_ve.encode_text(tok, ve, pair.hypothesis, pair.premise)
        src, dec, last = ofa_ve.pad_batch([ids], ve)
        pixels = _ofa_pixels(gold.photo(pair.photo).data, ve)
        with torch.no_grad():
            out = module(torch.from_numpy(src), torch.from_numpy(pixels[None]), torch.from_numpy(dec), torch.from_numpy(last))
        logits.append(out[0].numpy()[labels_order])
        truncated.append(cut)
    arrays = {"pair_logits": np.stack(logits).astype(np.float32), "pair_truncated": np.array(truncated)}
    return write(fam, repo, arrays, "the exported PyTorch module (encoder + one decoder step); modelscope's image rule",
                 source=source, weights=weights)


def _ofa_pixels(data: bytes, ve: dict) -> np.ndarray:
    size = ve["patch_image_size"]
    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    x = np.asarray(img, np.float32) / 255.0
    x = (x - np.array(ve["mean"], np.float32)) / np.array(ve["std"], np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)
