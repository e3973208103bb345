"""Open a photo safely, or say in one line why it cannot be indexed; read its EXIF metadata."""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

# Import the plugins we accept explicitly: they register their openers, and Image.open(formats=...)
# then never has to load (or try) Pillow's other plugins, e.g. EPS, which shells out to Ghostscript.
from PIL import (  # noqa: F401
    BmpImagePlugin,
    GifImagePlugin,
    Image,
    ImageOps,
    JpegImagePlugin,
    MpoImagePlugin,
    PngImagePlugin,
    TiffImagePlugin,
    UnidentifiedImageError,
    WebPImagePlugin,
)

from search.media.files import NOT_REGULAR, NotRegular, Refused, read_regular

try:
    import pillow_heif
except (ImportError, OSError):  # optional; OSError: installed but its shared library will not load
    pillow_heif = None
else:
    pillow_heif.register_heif_opener()  # module import runs once, so this registers once


# Pillow warns on stderr (a raw multi-line warning) above its MAX_IMAGE_PIXELS (89.5 MP). Our own
# limit (max_pixels, checked from the header before decoding) decides instead, and a file over it
# fails with a one-line reason; Pillow's error at twice its limit stays on.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class BadImage(Exception):
    """A file that cannot be indexed as a photo; str(exc) is a short human reason."""


_HEIF = "HEIF"
# Formats the model server's plain Pillow decodes, so the file's own bytes can be sent to it.
# (Multi-picture JPEGs, "MPO", open through the JPEG entry.)
_PLAIN_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
_FORMATS = tuple(f for f in (*_PLAIN_FORMATS, _HEIF) if f in Image.OPEN)

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
    | ({".heic", ".heif"} if _HEIF in _FORMATS else set())
)

_EXIF_IFD, _GPS_IFD = 0x8769, 0x8825
_MAKE, _MODEL, _DATETIME = 0x010F, 0x0110, 0x0132
_DATETIME_ORIGINAL, _OFFSET_TIME, _OFFSET_TIME_ORIGINAL = 0x9003, 0x9010, 0x9011
_GPS_LAT_REF, _GPS_LAT, _GPS_LON_REF, _GPS_LON = 1, 2, 3, 4

_EXIF_DATETIME = re.compile(r"(\d{4})[:-](\d{2})[:-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
_EXIF_OFFSET = re.compile(r"([+-])(\d{2}):?(\d{2})")


@dataclass(frozen=True)
class Photo:
    data: bytes = field(repr=False)  # what the model server gets: the file's bytes, or PNG for HEIF
    sha256: str  # of the file's bytes
    width: int  # after EXIF orientation
    height: int
    format: str  # "JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "HEIF"
    taken_at: float | None  # UTC unix timestamp
    camera_make: str | None
    camera_model: str | None
    latitude: float | None
    longitude: float | None
    frames: int  # >1 for animations; the model sees the first frame


def open_photo(path: Path, *, max_pixels: int = 100_000_000,
               max_bytes: int = 100_000_000) -> tuple[Photo, Image.Image]:
    """The photo, and its decoded first frame (EXIF-transposed, in its own mode) for thumbnails."""
    return decode_photo(_read(path, max_bytes), max_pixels=max_pixels)


def decode_photo(data: bytes, *, max_pixels: int = 100_000_000, draft: int | None = None) -> tuple[Photo, Image.Image]:
    """open_photo for bytes already read (and size-checked) by the caller.

    ``draft``: a JPEG may be decoded at a reduced scale (at least this many pixels on its longest
    side), enough for a thumbnail and much cheaper; the whole file is still decoded, so a truncated one
    is still caught, and width/height stay the full image's."""
    if not data:
        raise BadImage("empty file")
    try:
        # Image.open only parses the header, so the size check below happens before any decoding.
        im = Image.open(io.BytesIO(data), formats=_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow's own guard (2x its MAX_IMAGE_PIXELS, or 1x when warnings are errors) fired first.
        raise BadImage(_bomb_reason(data, exc, max_pixels)) from exc
    except UnidentifiedImageError as exc:
        raise BadImage("not an image (unrecognised format)") from exc
    except Exception as exc:  # a recognised header that the plugin cannot parse
        raise BadImage(f"corrupt image: {_short(exc)}") from exc

    width, height = im.size
    if width * height > max_pixels:
        raise BadImage(f"too many pixels: {width}×{height} = {_mp(width * height)} MP > {_mp(max_pixels)} MP limit")
    fmt = "JPEG" if im.format == "MPO" else im.format
    try:
        # MPO's extra frames are previews or depth maps, not animation. Counted before load():
        # counting seeks through the file, which would throw away the decoded first frame.
        frames = 1 if im.format == "MPO" else max(1, getattr(im, "n_frames", 1))
        if draft and fmt == "JPEG" and max(width, height) > draft:
            scale = draft / max(width, height)  # the longest side must stay >= draft
            im.draft(im.mode, (math.ceil(width * scale), math.ceil(height * scale)))
        im.load()  # a full decode; ImageFile.LOAD_TRUNCATED_IMAGES stays False, so truncation raises
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BadImage(f"too many pixels: {_short(exc)}") from exc
    except Exception as exc:  # OSError, SyntaxError, ValueError, struct.error, zlib.error, EOFError, ...
        raise BadImage(f"corrupt image: {_short(exc)}") from exc

    # After load(): a PNG's eXIf chunk may follow its pixel data.
    meta = _metadata(im)
    before = im.size
    try:
        ImageOps.exif_transpose(im, in_place=True)
    except Exception:
        pass  # malformed EXIF: keep the pixels as stored rather than reject the photo
    if im.size != before and im.size == before[::-1]:  # rotated by 90°: so are the full dimensions
        width, height = height, width

    if fmt == _HEIF:
        try:
            data_out = _png(im)
        except Exception as exc:
            raise BadImage(f"corrupt image: {_short(exc)}") from exc
    else:
        data_out = data
    photo = Photo(data=data_out, sha256=hashlib.sha256(data).hexdigest(), width=width, height=height,
                  format=fmt, frames=frames, **meta)
    return photo, im


def save_thumbnail(image: Image.Image, dest: Path, size: int = 320) -> Path:
    """A JPEG whose longest side is ``size`` (smaller images are not enlarged), written atomically.

    Raises BadImage for a mode it cannot turn into RGB; OSError from the filesystem is left as is."""
    im = image
    icc = im.info.get("icc_profile") if im.mode in ("RGB", "RGBA", "RGBX", "P", "PA") else None
    try:
        # Palette and bilevel images resize with nearest-neighbour only: convert them first.
        if im.mode in ("P", "PA"):
            im = im.convert("RGBA" if im.mode == "PA" or "transparency" in im.info else "RGB")
        elif im.mode == "1":
            im = im.convert("L")
        scale = min(1.0, size / max(im.size))
        target = (max(1, round(im.width * scale)), max(1, round(im.height * scale)))
        if target != im.size:
            im = im.resize(target, Image.Resampling.BICUBIC, reducing_gap=2.0)  # a thumbnail: speed over LANCZOS
        im = _to_rgb(im)
    except (ValueError, OSError) as exc:  # e.g. "conversion from La to RGB not supported"
        raise BadImage(f"cannot make a thumbnail of a {image.mode} image: {_short(exc)}") from exc

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            im.save(f, "JPEG", quality=85, icc_profile=icc)
        os.replace(tmp, dest)  # readers see the old thumbnail or the new one, never half of one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def _read(path: Path, max_bytes: int) -> bytes:
    """The file's bytes: opened without blocking, a regular file only, its size checked before reading."""
    try:
        data = read_regular(path, max_bytes)
    except NotRegular as exc:
        raise BadImage(f"unreadable: {NOT_REGULAR}" if str(exc) == NOT_REGULAR else str(exc)) from exc
    except Refused as exc:
        raise BadImage(str(exc)) from exc
    if not data:
        raise BadImage("empty file")
    return data


def _bomb_reason(data: bytes, exc: Exception, max_pixels: int) -> str:
    size = _header_size(data)
    if size is None:
        return f"too many pixels: {_short(exc)}"
    pixels = size[0] * size[1]
    if pixels > max_pixels:
        limit, whose = max_pixels, ""
    else:  # within the caller's limit but over Pillow's; Pillow's guard stays on
        limit = (2 if isinstance(exc, Image.DecompressionBombError) else 1) * (Image.MAX_IMAGE_PIXELS or 0)
        whose = " (Pillow's decompression-bomb guard)"
    return f"too many pixels: {size[0]}×{size[1]} = {_mp(pixels)} MP > {_mp(limit)} MP limit{whose}"


def _header_size(data: bytes) -> tuple[int, int] | None:
    """The size in the header, parsed the way Image.open does but without its bomb check (which is
    what just refused the file). Only the header is read: opening an image does not decode it."""
    prefix = data[:16]
    for fmt in _FORMATS:
        factory, accept = Image.OPEN[fmt]
        ok = accept is None or accept(prefix)
        if not ok or isinstance(ok, str):
            continue
        try:
            return factory(io.BytesIO(data), "").size
        except Exception:
            continue
    return None


def _metadata(im: Image.Image) -> dict:
    """taken_at, camera and GPS fields; malformed EXIF gives Nones, never an error."""
    try:
        exif = im.getexif()
    except Exception:
        exif = Image.Exif()
    exif_ifd, gps = _ifd(exif, _EXIF_IFD), _ifd(exif, _GPS_IFD)
    taken_at = None
    if original := _text(exif_ifd.get(_DATETIME_ORIGINAL) or exif.get(_DATETIME_ORIGINAL)):
        taken_at = _timestamp(original, _text(exif_ifd.get(_OFFSET_TIME_ORIGINAL)))
    elif modified := _text(exif.get(_DATETIME)):
        taken_at = _timestamp(modified, _text(exif_ifd.get(_OFFSET_TIME)))
    lat = _coordinate(gps.get(_GPS_LAT), gps.get(_GPS_LAT_REF), "N", "S", 90)
    lon = _coordinate(gps.get(_GPS_LON), gps.get(_GPS_LON_REF), "E", "W", 180)
    if lat is None or lon is None or (lat == 0 and lon == 0):
        lat = lon = None  # half a position is useless; 0,0 is what cameras without a fix write
    return {"taken_at": taken_at, "camera_make": _text(exif.get(_MAKE)), "camera_model": _text(exif.get(_MODEL)),
            "latitude": lat, "longitude": lon}


def _ifd(exif: Image.Exif, tag: int) -> dict:
    try:
        return dict(exif.get_ifd(tag))
    except Exception:
        return {}


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return value.strip(" \t\r\n\x00") or None


def _timestamp(value: str, offset: str | None) -> float | None:
    """EXIF 'YYYY:MM:DD HH:MM:SS' as UTC seconds; its offset tag if valid, else the time is taken as UTC."""
    m = _EXIF_DATETIME.match(value)
    if not m:
        return None
    tz = UTC
    if offset and (o := _EXIF_OFFSET.fullmatch(offset)):
        try:
            delta = timedelta(hours=int(o[2]), minutes=int(o[3]))
            tz = timezone(-delta if o[1] == "-" else delta)
        except ValueError:  # 24h or more
            pass
    try:
        return datetime(*map(int, m.groups()), tzinfo=tz).timestamp()
    except (ValueError, OverflowError):  # e.g. the "0000:00:00 00:00:00" some cameras write
        return None


def _coordinate(value: object, ref: object, positive: str, negative: str, limit: float) -> float | None:
    """Degrees from EXIF (degrees, minutes, seconds) rationals; None unless finite and in range."""
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        return None
    try:
        # Pillow gives IFDRational (float() of a zero denominator is nan); older writers (num, den) pairs.
        parts = [p[0] / p[1] if isinstance(p, (tuple, list)) else float(p) for p in value]
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    if not all(math.isfinite(p) and p >= 0 for p in parts) or any(p >= 60 for p in parts[1:]):
        return None
    degrees = sum(p / 60**i for i, p in enumerate(parts))
    direction = (_text(ref) or positive).upper()
    if degrees > limit or direction not in (positive, negative):
        return None
    return -degrees if direction == negative else degrees


def _to_rgb(im: Image.Image) -> Image.Image:
    """8-bit RGB; alpha is flattened onto white, high-bit-depth greys are scaled, not clipped."""
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        im = _to_8bit(im)
    if im.mode in ("LA", "La", "PA", "RGBA", "RGBa"):
        im = im.convert("RGBA")
        background = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, im).convert("RGB")
    return im if im.mode == "RGB" else im.convert("RGB")  # L, CMYK, YCbCr, LAB, HSV, RGBX


def _to_8bit(im: Image.Image) -> Image.Image:
    # Pillow's convert("L") clips these modes at 255, which turns most 16-bit images white.
    if im.mode != "F":
        im = im.convert("I")
    lo, hi = im.getextrema()
    if im.mode == "I;16" or im.mode == "I":
        if hi <= 255:
            return im.convert("L")
        scale, offset = (1 / 257, 0.0) if hi <= 65535 else (255 / hi, 0.0)
    elif lo >= 0 and hi <= 1:  # float images are usually 0..1
        scale, offset = 255.0, 0.0
    elif lo >= 0 and hi <= 255:
        scale, offset = 1.0, 0.0
    else:
        scale = 255 / (hi - lo) if hi > lo else 0.0
        offset = -lo * scale
    return im.point(lambda v: v * scale + offset).convert("L")


def _png(im: Image.Image) -> bytes:
    """Lossless PNG of the (transposed) first frame, for servers without a HEIF decoder."""
    if im.mode not in ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"):
        im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)  # transient bytes: speed matters more than size
    return buf.getvalue()


def _mp(pixels: int) -> str:
    mp = pixels / 1e6
    return f"{mp:.1f}".removesuffix(".0") if mp >= 1 else f"{mp:.2g}"


def _short(exc: BaseException) -> str:
    """The first line of an exception's message, kept short."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
