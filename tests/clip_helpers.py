"""Images for the CLIP serving tests (tests/test_clip_serving.py, tests/test_clip_batches.py): real photographs and odd files."""

from __future__ import annotations

import functools

import numpy as np
from image_helpers import encode
from PIL import Image
from skimage import data as skdata


@functools.cache
def photos() -> dict[str, bytes]:
    """Real photographs shipped with scikit-image, as files a user would have."""
    return {
        "chelsea.jpg": encode(Image.fromarray(skdata.chelsea()), "JPEG", quality=92),
        "astronaut.png": encode(Image.fromarray(skdata.astronaut()), "PNG"),
        "coffee.jpg": encode(Image.fromarray(skdata.coffee()), "JPEG", quality=85),
        "rocket.png": encode(Image.fromarray(skdata.rocket()), "PNG"),
    }


@functools.cache
def odd_images() -> dict[str, bytes]:
    cat, coffee, rocket = (Image.fromarray(a) for a in (skdata.chelsea(), skdata.coffee(), skdata.rocket()))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
    rgba = Image.fromarray(skdata.astronaut()).convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(rgba.size))  # from transparent to opaque
    frames = [coffee.resize((160, 120)), cat.resize((160, 120)), rocket.resize((160, 120))]
    grey16 = skdata.camera().astype(np.uint16) * 256 + np.arange(512, dtype=np.uint16)[None, :] % 256  # all 16 bits used
    return {
        "exif_rotated.jpg": encode(cat, "JPEG", quality=92, exif=exif.tobytes()),
        "grey.png": encode(Image.fromarray(skdata.camera()), "PNG"),
        "rgba.png": encode(rgba, "PNG"),
        "palette.gif": encode(coffee.quantize(64), "GIF"),
        "palette_transparent.png": encode(rocket.quantize(32), "PNG", transparency=0),
        "animated.gif": encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0),
        "grey16.png": encode(Image.fromarray(grey16), "PNG"),
        "cmyk.jpg": encode(rocket.convert("CMYK"), "JPEG", quality=92),
        "one_pixel.png": encode(Image.new("RGB", (1, 1), (200, 30, 90)), "PNG"),
        "five_by_three.png": encode(Image.fromarray(np.random.default_rng(1).integers(0, 256, (3, 5, 3), np.uint8)), "PNG"),
        "wide.png": encode(coffee.resize((2000, 20)), "PNG"),
        "tall.jpg": encode(cat.resize((30, 1500)), "JPEG"),
    }
