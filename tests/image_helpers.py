"""Images made in memory for the open_photo / save_thumbnail tests (tests/test_images.py, tests/test_image_thumbnails.py)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from search.media.photos import BadImage, open_photo

try:
    import pillow_heif  # noqa: F401
    HAS_HEIF = True
except ImportError:
    HAS_HEIF = False

RNG = np.random.default_rng(7)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def noise(size=(64, 48), mode="RGB") -> Image.Image:
    w, h = size
    return Image.fromarray(RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)


def reason(path: Path, **kw) -> str:
    with pytest.raises(BadImage) as exc:
        open_photo(path, **kw)
    msg = str(exc.value)
    assert msg and "\n" not in msg
    return msg


def full_exif(*, lat_ref="N", lon_ref="E", offset: str | None = None, orientation: int | None = None) -> Image.Exif:
    exif = Image.Exif()
    exif[0x010F] = "  Canon "
    exif[0x0110] = "EOS 5D Mark IV\x00"
    exif[0x0132] = "2022:01:01 00:00:00"  # DateTime: only a fallback
    if orientation:
        exif[0x0112] = orientation
    sub = exif.get_ifd(0x8769)
    sub[0x9003] = "2021:07:14 09:30:00"
    if offset:
        sub[0x9011] = offset
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = lat_ref, (51.0, 30.0, 36.0)  # 51.51°
    gps[3], gps[4] = lon_ref, (0.0, 7.0, 30.0)  # 0.125°
    return exif
