"""Images made in memory for the open_photo / save_thumbnail tests (tests/test_images.py, tests/test_image_thumbnails.py)."""

from __future__ import annotations

import io
import struct
import zlib
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


def photo(path: Path, seed: int, *, taken: str | None = None, make: str | None = None, model: str | None = None,
          gps: tuple[float, float] | None = None, size=(320, 240)) -> Path:
    """A distinct picture (blocks of colour from the seed) with the EXIF asked for."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    img = Image.fromarray(blocks).resize(size, Image.NEAREST)
    exif = Image.Exif()
    if make:
        exif[0x010F] = make
    if model:
        exif[0x0110] = model
    if taken:
        exif.get_ifd(0x8769)[0x9003] = taken
    if gps:
        lat, lon = gps
        g = exif.get_ifd(0x8825)
        g[1], g[2] = ("N" if lat >= 0 else "S"), _dms(abs(lat))
        g[3], g[4] = ("E" if lon >= 0 else "W"), _dms(abs(lon))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, "JPEG", exif=exif.tobytes(), quality=92)
    return path


def _dms(x: float) -> tuple[float, float, float]:
    d = int(x)
    m = int((x - d) * 60)
    return (float(d), float(m), round(((x - d) * 60 - m) * 60, 4))


def bomb_png(path: Path, width: int, height: int) -> Path:
    """A valid 1-bit PNG of all zeros, written row by row: tiny on disk, huge when decoded.
    (Image.new("1", (20000, 20000)) would itself take 400 MB in this process.)"""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    z = zlib.compressobj(9)
    row = bytes(1 + (width + 7) // 8)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path
