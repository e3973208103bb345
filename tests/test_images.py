"""open_photo: metadata read back exactly, and every unusable file a one-line BadImage. All images are
generated here (helpers in tests/image_helpers.py; odd modes and thumbnails: tests/test_image_thumbnails.py)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from image_helpers import HAS_HEIF, RNG, bomb_png, encode, full_exif, noise, reason, write
from PIL import Image

from search.media.photos import IMAGE_SUFFIXES, BadImage, decode_photo, open_photo

# --- suffixes ---------------------------------------------------------------------------------

def test_suffixes():
    plain = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
    assert IMAGE_SUFFIXES == (plain | {".heic", ".heif"} if HAS_HEIF else plain)


# --- metadata ---------------------------------------------------------------------------------

def test_every_exif_field_is_read_back(tmp_path):
    data = encode(noise((40, 30)), "JPEG", exif=full_exif())
    path = write(tmp_path, "p.jpg", data)
    photo, image = open_photo(path)
    assert photo.data == data and photo.sha256 == hashlib.sha256(data).hexdigest()
    assert (photo.width, photo.height, photo.format, photo.frames) == (40, 30, "JPEG", 1)
    assert photo.taken_at == datetime(2021, 7, 14, 9, 30, tzinfo=UTC).timestamp()  # no offset: UTC
    assert (photo.camera_make, photo.camera_model) == ("Canon", "EOS 5D Mark IV")
    assert photo.latitude == pytest.approx(51.51) and photo.longitude == pytest.approx(0.125)
    assert image.size == (40, 30) and image.mode == "RGB"
    assert "data" not in repr(photo)  # megabytes of bytes stay out of logs


def test_south_and_west_are_negative(tmp_path):
    path = write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=full_exif(lat_ref="S", lon_ref="W")))
    photo, _ = open_photo(path)
    assert photo.latitude == pytest.approx(-51.51) and photo.longitude == pytest.approx(-0.125)


@pytest.mark.parametrize("offset, hours", [("+02:00", 2), ("-05:30", -5.5), ("+0100", 1), ("bogus", 0), ("+25:00", 0)])
def test_offset_time_original(tmp_path, offset, hours):
    path = write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=full_exif(offset=offset)))
    photo, _ = open_photo(path)
    assert photo.taken_at == datetime(2021, 7, 14, 9, 30, tzinfo=UTC).timestamp() - hours * 3600


def test_datetime_is_the_fallback(tmp_path):
    exif = Image.Exif()
    exif[0x0132] = "2020:02:29 23:59:58"
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif)))
    assert photo.taken_at == datetime(2020, 2, 29, 23, 59, 58, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("value", ["0000:00:00 00:00:00", "2021:13:40 10:00:00", "yesterday", "    "])
def test_unparseable_dates_are_none(tmp_path, value):
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = value
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif)))
    assert photo.taken_at is None


def test_missing_exif_gives_nones(tmp_path):
    photo, _ = open_photo(write(tmp_path, "p.png", encode(noise(), "PNG")))
    assert photo.format == "PNG"
    assert (photo.taken_at, photo.camera_make, photo.camera_model, photo.latitude, photo.longitude) == (None,) * 5


def test_empty_make_and_model_are_none(tmp_path):
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "   ", "\x00\x00"
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif)))
    assert (photo.camera_make, photo.camera_model) == (None, None)


@pytest.mark.parametrize("lat, lon", [
    ((91.0, 0.0, 0.0), (1.0, 0.0, 0.0)),  # out of range
    ((10.0, 0.0, 0.0), (181.0, 0.0, 0.0)),
    ((10.0, 75.0, 0.0), (1.0, 0.0, 0.0)),  # 75 minutes
    ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),  # what cameras without a fix write
])
def test_invalid_gps_is_none(tmp_path, lat, lon):
    exif = Image.Exif()
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2], gps[3], gps[4] = "N", lat, "E", lon
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif)))
    assert (photo.latitude, photo.longitude) == (None, None)


def test_gps_zero_denominator_is_none(tmp_path):
    # Pillow writes floats as rationals; patch the stored denominator of the first one to zero.
    exif = Image.Exif()
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2], gps[3], gps[4] = "N", (12.0, 34.0, 56.0), "E", (1.0, 2.0, 3.0)
    raw = exif.tobytes()
    twelve = struct.pack("<2L", 12, 1)
    assert raw.count(twelve) == 1
    exif_bytes = raw.replace(twelve, struct.pack("<2L", 12, 0))
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif_bytes)))
    assert (photo.latitude, photo.longitude) == (None, None)


def test_half_a_position_is_none(tmp_path):
    exif = Image.Exif()
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = "N", (10.0, 0.0, 0.0)
    photo, _ = open_photo(write(tmp_path, "p.jpg", encode(noise(), "JPEG", exif=exif)))
    assert (photo.latitude, photo.longitude) == (None, None)


@pytest.mark.parametrize("orientation, size", [(1, (60, 20)), (3, (60, 20)), (6, (20, 60)), (8, (20, 60))])
def test_exif_orientation_is_applied(tmp_path, orientation, size):
    img = Image.new("RGB", (60, 20), "white")
    img.paste((255, 0, 0), (0, 0, 10, 10))  # a red square in the stored top-left corner
    data = encode(img, "PNG", exif=full_exif(orientation=orientation))
    photo, image = open_photo(write(tmp_path, "p.png", data))
    assert (photo.width, photo.height) == size == image.size
    assert photo.data == data  # the file's own bytes: the orientation tag travels with them
    corner = {1: (2, 2), 3: (57, 17), 6: (17, 2), 8: (2, 57)}[orientation]  # where red ends up
    assert image.getpixel(corner) == (255, 0, 0)
    assert photo.camera_make == "Canon"  # a PNG's eXIf chunk is read too


def test_exif_in_webp(tmp_path):
    photo, _ = open_photo(write(tmp_path, "p.webp", encode(noise(), "WEBP", exif=full_exif())))
    assert (photo.format, photo.camera_model) == ("WEBP", "EOS 5D Mark IV")
    assert photo.taken_at == datetime(2021, 7, 14, 9, 30, tzinfo=UTC).timestamp()
    assert photo.latitude == pytest.approx(51.51)


def test_tiff_tags(tmp_path):
    # Pillow's TIFF writer keeps IFD0 tags but drops the Exif and GPS sub-IFDs: DateTime is the fallback.
    photo, _ = open_photo(write(tmp_path, "p.tif", encode(noise(), "TIFF", exif=full_exif())))
    assert (photo.format, photo.camera_make, photo.camera_model) == ("TIFF", "Canon", "EOS 5D Mark IV")
    assert photo.taken_at == datetime(2022, 1, 1, tzinfo=UTC).timestamp()


# --- files that are not usable ----------------------------------------------------------------

def test_empty_file(tmp_path):
    assert reason(write(tmp_path, "e.jpg", b"")) == "empty file"
    with pytest.raises(BadImage, match="empty file"):
        decode_photo(b"")


def test_missing_file(tmp_path):
    assert reason(tmp_path / "gone.jpg") == "unreadable: No such file or directory"


def test_directory(tmp_path):
    (tmp_path / "d.jpg").mkdir()
    assert reason(tmp_path / "d.jpg") == "unreadable: Is a directory"


def test_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "f.jpg"
    os.mkfifo(fifo)
    assert reason(fifo) == "unreadable: not a regular file"  # reading it would block forever


def test_too_large_is_checked_before_reading(tmp_path):
    path = tmp_path / "huge.jpg"
    with path.open("wb") as f:
        f.truncate(2_500_000)  # sparse NULs: a read would report "not an image" instead
    assert reason(path, max_bytes=1_000_000) == "too large: 2.5 MB > 1.0 MB limit"


def test_text_named_jpg(tmp_path):
    assert reason(write(tmp_path, "notes.jpg", b"this is not a picture\n")) == "not an image (unrecognised format)"


def test_random_bytes_named_png(tmp_path):
    data = RNG.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    assert reason(write(tmp_path, "r.png", data)) == "not an image (unrecognised format)"


def test_unsupported_format_is_not_tried(tmp_path):
    # Pillow reads ICO, but it is not a photo format we accept (nor is EPS, which runs Ghostscript).
    assert reason(write(tmp_path, "i.png", encode(noise((32, 32)), "ICO"))) == "not an image (unrecognised format)"


def test_truncated_jpeg(tmp_path):
    data = encode(noise((200, 200)), "JPEG")
    msg = reason(write(tmp_path, "t.jpg", data[: len(data) // 2]))
    assert msg.startswith("corrupt image: image file is truncated")


def test_truncated_png(tmp_path):
    data = encode(noise((200, 200)), "PNG")
    assert reason(write(tmp_path, "t.png", data[: len(data) // 2])).startswith("corrupt image: ")


def test_corrupt_png_data(tmp_path):
    data = bytearray(encode(noise((100, 100)), "PNG"))
    start = data.index(b"IDAT") + 4
    data[start + 10: start + 400] = bytes(390)  # garbage in the zlib stream
    assert reason(write(tmp_path, "c.png", bytes(data))).startswith("corrupt image: ")


def test_truncated_gif(tmp_path):
    data = encode(noise((100, 100)), "GIF")
    assert reason(write(tmp_path, "t.gif", data[: len(data) // 2])).startswith("corrupt image: ")


def test_header_cut_short_is_not_an_image(tmp_path):
    # Pillow cannot identify a file whose header is incomplete, so this one reads as "not an image".
    data = encode(noise((100, 100)), "GIF")
    assert reason(write(tmp_path, "h.gif", data[:12])) == "not an image (unrecognised format)"


def test_bomb_is_rejected_from_its_header(tmp_path):
    path = bomb_png(tmp_path / "bomb.png", 20000, 20000)
    assert path.stat().st_size < 200_000
    assert reason(path) == "too many pixels: 20000×20000 = 400 MP > 100 MP limit"


def test_bomb_costs_no_memory(tmp_path):
    # A fresh interpreter, so the peak RSS is this call's and not an earlier test's.
    path = bomb_png(tmp_path / "bomb.png", 20000, 20000)
    code = (
        "import json, resource, sys\n"
        "from pathlib import Path\n"
        "from search.media.photos import BadImage, open_photo\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "before = peak()\n"
        "try:\n    open_photo(Path(sys.argv[1]))\nexcept BadImage as exc:\n    msg = str(exc)\n"
        "print(json.dumps({'grew_kb': peak() - before, 'msg': msg}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    result = json.loads(out.stdout)
    assert result["msg"].startswith("too many pixels")
    assert result["grew_kb"] < 100_000, result  # decoding would take 400 MB


def test_bomb_between_pillows_warning_and_our_limit(tmp_path):
    # 108 MP: over our 100 MP default and over Pillow's warning threshold (89 MP), under its error (179 MP).
    assert reason(bomb_png(tmp_path / "b.png", 12000, 9000)) == "too many pixels: 12000×9000 = 108 MP > 100 MP limit"


def test_pillows_own_guard_still_applies(tmp_path):
    path = bomb_png(tmp_path / "b.png", 20000, 20000)
    assert Image.MAX_IMAGE_PIXELS is not None
    msg = reason(path, max_pixels=1_000_000_000)
    assert msg == "too many pixels: 20000×20000 = 400 MP > 179 MP limit (Pillow's decompression-bomb guard)"


def test_decompression_bomb_warning_as_error_is_a_bad_image(tmp_path):
    path = bomb_png(tmp_path / "b.png", 12000, 9000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        msg = reason(path, max_pixels=150_000_000)
    assert msg == "too many pixels: 12000×9000 = 108 MP > 89.5 MP limit (Pillow's decompression-bomb guard)"


def test_custom_pixel_limit(tmp_path):
    path = write(tmp_path, "p.png", encode(noise((100, 60)), "PNG"))
    assert reason(path, max_pixels=5000) == "too many pixels: 100×60 = 0.006 MP > 0.005 MP limit"
    assert open_photo(path, max_pixels=6000)[0].width == 100
