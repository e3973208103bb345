"""Image steps' shared code: encoded image bytes -> an RGB picture -> normalised pixels. Every image
step decodes with these, so they cannot drift apart.

Pure functions (``load_image``, ``to_rgb``, ``pixels``), tested against the reference processors
without a server. They follow the references exactly (settings from the step's preprocess.json)
except where those go wrong on real files:
- EXIF orientation is applied (the references embed a phone photo lying on its side);
- 16-bit greyscale is scaled to 8 bits (``convert("RGB")`` clips it to white)."""

from __future__ import annotations

import functools
import io
import math
import warnings

import numpy as np
from PIL import Image, ImageOps

from search.triton.steps.requests import BadInput

try:  # HEIC/HEIF (phone photos) where pillow-heif is installed, as the indexer reads them
    from pillow_heif import register_heif_opener

    register_heif_opener()
except ImportError:
    pass

HIGH_BIT_GREY = ("I;16", "I;16L", "I;16B", "I;16N", "I")
MAX_RESIZE_PIXELS = 1 << 24  # above this, resize only the region the crop keeps


class BadImage(BadInput):
    """The bytes are not an image this step can use; the message says why."""


def load_image(data: bytes, max_pixels: int) -> Image.Image:
    """Decode the first frame and apply the EXIF orientation. Images over ``max_pixels`` are refused
    before their pixels are decoded, and Pillow's decompression-bomb warning is an error too."""
    if not data:
        raise BadImage("the image is empty (0 bytes)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data))  # reads the header only
            if image.width * image.height > max_pixels:
                raise BadImage(f"the image is {image.width}×{image.height} pixels, over the limit of {max_pixels} "
                               "(max_pixels): refused as a possible decompression bomb")
            image.load()  # an animation stays on its first frame
        except BadImage:
            raise
        except Image.UnidentifiedImageError:
            raise BadImage("not an image Pillow can read (unknown format or corrupt header)") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise BadImage(f"the image is over the limit of max_pixels ({exc})") from None
        except Exception as exc:  # truncated or corrupt data, out of memory
            raise BadImage(f"the image cannot be decoded ({type(exc).__name__}: {exc})") from None
    try:
        ImageOps.exif_transpose(image, in_place=True)  # in place: no copy of an upright image
    except Exception:  # unreadable EXIF: keep the pixels as stored
        pass
    return image


def to_rgb(image: Image.Image, alpha: str = "white") -> Image.Image:
    """RGB as the reference converts: ``alpha`` "white" composites transparency onto white
    (transformers), "drop" ignores it (a plain ``convert("RGB")``)."""
    if image.mode in HIGH_BIT_GREY:
        values = np.asarray(image).astype(np.float64)
        grey = np.clip(np.round(values / 257), 0, 255).astype(np.uint8)
        key = image.info.get("transparency")
        if alpha == "white" and isinstance(key, int):
            grey[values == key] = 255
        return Image.fromarray(grey, "L").convert("RGB")
    if alpha == "white" and ("A" in image.getbands() or image.info.get("transparency") is not None):
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, image.convert("RGBA")).convert("RGB")
    return image if image.mode == "RGB" else image.convert("RGB")  # convert("RGB") of RGB is a copy


def pixels(image: Image.Image, cfg: dict, max_resize_pixels: int = MAX_RESIZE_PIXELS) -> np.ndarray:
    """An RGB image -> [3, H, W] float32: resize, center crop, rescale, normalise as the reference."""
    w, h = image.size
    resize = cfg["resize"] or {"width": w, "height": h}
    if "shortest_edge" in resize:  # the shorter side to the size, the other in proportion (rounded down)
        s = resize["shortest_edge"]
        nw, nh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
    else:
        nw, nh = resize["width"], resize["height"]
    ch, cw = cfg["crop"] or (nh, nw)
    top, left = _offset(nh, ch, cfg["crop_rounding"]), _offset(nw, cw, cfg["crop_rounding"])
    resample = int(cfg["resample"])
    if nw * nh > max_resize_pixels and 0 <= top and 0 <= left:
        # A 1×100000 strip would resize to billions of pixels: resize only the kept region. Same
        # filter positions, so at most one level off the whole-image resize (which stays exact below).
        sx, sy = w / nw, h / nh
        arr = np.asarray(image.resize((cw, ch), resample, box=(left * sx, top * sy, (left + cw) * sx, (top + ch) * sy)))
    else:
        arr = _crop(np.asarray(image.resize((nw, nh), resample)), top, left, ch, cw)
    table = normalise_table(float(cfg["rescale_factor"]), tuple(cfg["mean"]), tuple(cfg["std"]))
    out = np.empty((3, *arr.shape[:2]), np.float32)
    for c in range(3):  # one gather per channel instead of four passes over float copies
        np.take(table[c], arr[..., c], out=out[c])
    return out


@functools.lru_cache(maxsize=8)
def normalise_table(rescale: float, mean: tuple, std: tuple) -> np.ndarray:
    """[3, 256] float32: each 8-bit value of each channel, rescaled and normalised with exactly the
    reference's operations ((float64(v) * rescale) as float32, minus mean, over std, in float32), so
    looking values up gives the same bits as computing them per pixel."""
    x = (np.arange(256, dtype=np.float64) * rescale).astype(np.float32)
    table = (x[None, :] - np.array(mean, np.float32)[:, None]) / np.array(std, np.float32)[:, None]
    table.setflags(write=False)
    return table


def _offset(size: int, crop: int, rounding: str) -> int:
    return int(round((size - crop) / 2.0)) if rounding == "round" else (size - crop) // 2


def _crop(arr: np.ndarray, top: int, left: int, ch: int, cw: int) -> np.ndarray:
    """transformers' center_crop, zero padding included for images smaller than the crop."""
    h, w = arr.shape[:2]
    if top >= 0 and left >= 0 and top + ch <= h and left + cw <= w:
        return arr[top:top + ch, left:left + cw]
    nh, nw = max(ch, h), max(cw, w)
    canvas = np.zeros((nh, nw, arr.shape[2]), arr.dtype)
    tp, lp = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    canvas[tp:tp + h, lp:lp + w] = arr
    top, left = top + tp, left + lp
    return canvas[max(0, top):min(nh, top + ch), max(0, left):min(nw, left + cw)]
