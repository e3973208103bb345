"""OFA's golden outputs: its PyTorch reference run on the golden inputs, recorded at build time for
`search models verify` (the shared part is ``search.models.export.golden``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from search.models import golden
from search.models.base import Family
from search.models.export.golden import torch_module, write


# -- OFA: the exported PyTorch module, modelscope's image rule
def record(fam: Family, repo: Path, module, tok, ve: dict, labels_order: list[int], source: str, weights: Path) -> dict:
    """One pair at a time: the prompt (the served step's text code, which the export check also
    runs) and modelscope's image rule written here with Pillow (EXIF orientation, RGB, bicubic
    S×S resize, /255, (x - mean) / std); the exported module's answer logits, ordered as served."""
    torch = torch_module()
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
