"""CLIP's image preprocessing (``clip_image_preprocess``): encoded image bytes -> normalised pixels,
configured by preprocess.json, with the shared image steps' decode and resize (``images``).
"""

from __future__ import annotations

import numpy as np

from search.triton.steps.images import BadImage, load_image, pixels, to_rgb
from search.triton.steps.requests import where

__all__ = ["BadImage", "load_image", "pixels", "preprocess", "preprocess_all", "to_rgb"]


def preprocess(data: bytes, cfg: dict, max_pixels: int) -> np.ndarray:
    """Encoded image bytes -> [3, H, W] float32, or BadImage."""
    return pixels(to_rgb(load_image(data, max_pixels), cfg.get("alpha", "white")), cfg)


def preprocess_all(images, cfg: dict, max_pixels: int) -> np.ndarray:
    """A request's IMAGE values -> [n, 3, H, W]; a bad one refuses the request, naming it."""
    out = []
    for k, data in enumerate(images):
        try:
            out.append(preprocess(bytes(data), cfg, max_pixels))
        except BadImage as exc:
            raise BadImage(f"IMAGE: {where(k, len(images), 'image')}{exc}") from None
    return np.stack(out)
