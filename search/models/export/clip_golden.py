"""CLIP's golden outputs: its PyTorch reference run on the golden inputs, recorded at build time for
`search models verify` (the shared part is ``search.models.export.golden``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from search.models import golden
from search.models.base import Family
from search.models.export.golden import torch_module, write


# -- CLIP: the two towers in PyTorch, the publisher's image processor, the CLIP tokenizer at 77 tokens
def record(fam: Family, repo: Path, loaded, source: str) -> dict:
    """Text: the tokenizer's ids (start, end, cut at the context length, padded), the text tower;
    image: transformers' CLIPImageProcessor from the checkpoint folder (or open_clip's own transform),
    the image tower. Both towers as exported (projection + L2 norm)."""
    torch = torch_module()
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
    torch = torch_module()
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
