"""Inputs and one request for the OFA serving tests (tests/test_ofa_serving.py, tests/test_ofa_verify.py): noise images, ofa_ve served."""

from __future__ import annotations

import numpy as np
from PIL import Image

from search.models.base import image_tensor
from search.triton.client import TritonClient, text_tensor

RNG = np.random.default_rng(11)


def noise(w: int, h: int, mode: str = "RGB") -> Image.Image:
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = RNG.integers(0, 256, (h, w, channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)


def serve(client: TritonClient, items) -> dict[str, np.ndarray]:
    """Requests of up to 2 pairs (the configs' max_batch_size), outputs concatenated."""
    outs = [client.infer("ofa_ve", {"IMAGE": image_tensor([d for d, _, _ in chunk]),
                                    "HYPOTHESIS": text_tensor([h for _, h, _ in chunk]),
                                    "PREMISE": text_tensor([p or "" for _, _, p in chunk])},
                         ["PROBS", "LOGITS", "LABEL", "TRUNCATED"]) for chunk in (items[:2], items[2:4]) if chunk]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
