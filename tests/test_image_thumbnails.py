"""open_photo on odd images that must index (pixel modes, animations, HEIC) and save_thumbnail of every mode."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from image_helpers import HAS_HEIF, RNG, encode, full_exif, noise, reason, write
from PIL import Image

from search.media.photos import BadImage, Photo, decode_photo, open_photo, save_thumbnail

# --- odd images that must index ---------------------------------------------------------------

def test_cmyk_jpeg(tmp_path):
    photo, image = open_photo(write(tmp_path, "c.jpg", encode(Image.new("CMYK", (64, 48), (10, 200, 30, 0)), "JPEG")))
    assert (photo.format, photo.width, photo.height) == ("JPEG", 64, 48) and image.mode == "CMYK"


def test_16_bit_png(tmp_path):
    deep = Image.fromarray((RNG.random((30, 50)) * 65535).astype(np.uint16))
    assert deep.mode == "I;16"
    photo, image = open_photo(write(tmp_path, "d.png", encode(deep, "PNG")))
    assert (photo.width, photo.height) == (50, 30) and image.mode in ("I;16", "I")


def test_rgba_and_palette_pngs(tmp_path):
    rgba = Image.new("RGBA", (30, 20), (255, 0, 0, 0))
    pal = Image.new("P", (30, 20), 3)
    for name, img, kw in [("a.png", rgba, {}), ("p.png", pal, {"transparency": 3})]:
        photo, image = open_photo(write(tmp_path, name, encode(img, "PNG", **kw)))
        assert (photo.width, photo.height) == (30, 20) and image.mode == img.mode


def test_grayscale_bmp(tmp_path):
    photo, image = open_photo(write(tmp_path, "g.bmp", encode(noise(mode="L"), "BMP")))
    assert (photo.format, image.mode) == ("BMP", "L")


def test_animated_gif_counts_frames_and_decodes_the_first(tmp_path):
    # (P frames from Image.new("P", size, i) all get the same one-colour palette and are merged.)
    frames = [Image.new("RGB", (32, 32), (i * 60, 0, 0)) for i in range(3)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    photo, image = open_photo(write(tmp_path, "anim.gif", data))
    assert (photo.format, photo.frames, photo.data) == ("GIF", 3, data)
    assert image.tell() == 0 and image.size == (32, 32)


def test_animated_webp(tmp_path):
    frames = [Image.new("RGB", (16, 16), (i * 80, 0, 0)) for i in range(4)]
    photo, _ = open_photo(write(tmp_path, "a.webp", encode(frames[0], "WEBP", save_all=True, append_images=frames[1:])))
    assert (photo.format, photo.frames) == ("WEBP", 4)


def test_multi_picture_jpeg_is_one_jpeg(tmp_path):
    data = encode(noise(), "MPO", save_all=True, append_images=[noise()])
    photo, _ = open_photo(write(tmp_path, "m.jpg", data))
    assert (photo.format, photo.frames) == ("JPEG", 1)  # the second picture is not an animation frame


@pytest.mark.parametrize("size", [(1, 1), (5000, 3), (3, 4000)])
def test_extreme_shapes(tmp_path, size):
    photo, image = open_photo(write(tmp_path, "s.png", encode(Image.new("RGB", size, "blue"), "PNG")))
    assert (photo.width, photo.height) == size == image.size


def test_png_named_jpg_keeps_its_bytes(tmp_path):
    data = encode(noise(), "PNG")
    photo, _ = open_photo(write(tmp_path, "wrong.jpg", data))
    assert photo.format == "PNG" and photo.data == data


@pytest.mark.skipif(not HAS_HEIF, reason="pillow_heif is not installed")
def test_heic_becomes_png_for_the_server(tmp_path):
    img = noise((64, 48))
    data = encode(img, "HEIF", exif=full_exif(orientation=6), quality=-1)  # -1: lossless
    path = write(tmp_path, "p.heic", data)
    photo, image = open_photo(path)
    assert photo.format == "HEIF" and photo.sha256 == hashlib.sha256(data).hexdigest()
    assert photo.camera_model == "EOS 5D Mark IV" and photo.latitude == pytest.approx(51.51)
    # libheif applies the container's rotation and pillow_heif resets EXIF orientation to 1,
    # so the size is what pillow_heif decodes: exif_transpose must not rotate a second time.
    with Image.open(path) as direct:
        assert (photo.width, photo.height) == direct.size == image.size
    png = Image.open(io.BytesIO(photo.data))
    assert png.format == "PNG" and png.size == image.size
    assert png.getexif().get(0x0112, 1) == 1  # the server must not rotate it again
    assert png.convert("RGB").tobytes() == image.convert("RGB").tobytes()  # lossless


@pytest.mark.skipif(not HAS_HEIF, reason="pillow_heif is not installed")
def test_truncated_heic(tmp_path):
    data = encode(noise((64, 48)), "HEIF")
    assert reason(write(tmp_path, "t.heic", data[: len(data) // 2])).startswith(("corrupt image: ", "not an image"))


# --- thumbnails -------------------------------------------------------------------------------

def odd_images() -> dict[str, Image.Image]:
    rgba = noise((400, 200)).convert("RGBA")
    rgba.putalpha(0)  # fully transparent: must come out white
    pal = Image.new("P", (400, 200), 0)
    pal.putpalette([0, 0, 0] * 256)
    pal.info["transparency"] = 0
    return {
        "RGB": noise((400, 200)), "RGBA": rgba, "P": pal, "L": noise((400, 200), "L"), "1": noise((400, 200), "1"),
        "LA": Image.new("LA", (400, 200), (0, 0)), "CMYK": Image.new("CMYK", (400, 200), (0, 0, 0, 0)),
        "I;16": Image.fromarray(np.full((200, 400), 65535, np.uint16)),
        "I": Image.new("I", (400, 200), 65535),
        "F": Image.new("F", (400, 200), 1.0),
    }


@pytest.mark.parametrize("mode", list(odd_images()))
def test_thumbnail_of_each_mode(tmp_path, mode):
    src = odd_images()[mode]
    assert src.mode == mode
    dest = save_thumbnail(src, tmp_path / "a" / "b" / "t.jpg")
    assert dest == tmp_path / "a" / "b" / "t.jpg"
    with Image.open(dest) as thumb:
        assert (thumb.format, thumb.mode, thumb.size) == ("JPEG", "RGB", (320, 160))
        if mode in ("RGBA", "P", "LA", "CMYK", "I;16", "I", "F"):  # all white: alpha flattened, depth scaled
            assert thumb.convert("L").getextrema()[0] > 245, mode
    assert [p.name for p in dest.parent.iterdir()] == ["t.jpg"]  # no temporary file left behind


def test_16_bit_is_scaled_not_clipped(tmp_path):
    mid = Image.fromarray(np.full((10, 10), 32768, np.uint16))
    with Image.open(save_thumbnail(mid, tmp_path / "t.jpg")) as thumb:
        assert 120 < thumb.getpixel((5, 5))[0] < 135  # clipping would give 255


@pytest.mark.parametrize("size, expected", [((1000, 10), (320, 3)), ((10, 1000), (3, 320)), ((4000, 3), (320, 1))])
def test_thumbnail_keeps_aspect(tmp_path, size, expected):
    with Image.open(save_thumbnail(Image.new("RGB", size), tmp_path / "t.jpg")) as thumb:
        assert thumb.size == expected


def test_small_images_are_not_enlarged(tmp_path):
    with Image.open(save_thumbnail(Image.new("RGB", (1, 1), "red"), tmp_path / "t.jpg", size=64)) as thumb:
        assert thumb.size == (1, 1)


def test_thumbnail_from_open_photo_is_upright(tmp_path):
    path = write(tmp_path, "p.jpg", encode(noise((80, 40)), "JPEG", exif=full_exif(orientation=6)))
    _, image = open_photo(path)
    with Image.open(save_thumbnail(image, tmp_path / "t.jpg", size=20)) as thumb:
        assert thumb.size == (10, 20)


def test_thumbnail_replaces_atomically(tmp_path):
    dest = tmp_path / "t.jpg"
    dest.write_bytes(b"old")
    save_thumbnail(noise(), dest)
    with Image.open(dest) as thumb:
        assert thumb.format == "JPEG"


def test_unconvertible_mode_is_a_bad_image(tmp_path):
    img = Image.new("La", (10, 10))
    with pytest.raises(BadImage, match="cannot make a thumbnail of a La image"):
        save_thumbnail(img, tmp_path / "t.jpg")


def test_photo_is_frozen():
    photo = Photo(b"", "", 1, 1, "PNG", None, None, None, None, None, 1)
    with pytest.raises(AttributeError):
        photo.width = 2  # type: ignore[misc]


@pytest.mark.parametrize("width, thumb_side", [(630, 315), (700, 320), (575, 320), (3000, 320)])
def test_a_thumbnail_may_keep_a_reduced_decode_up_to_a_tenth_under_its_size(tmp_path, width, thumb_side):
    # the indexer's draft: a JPEG decoded at 1/2, 1/4 or 1/8 scale when its longest side stays >= 288
    from indexer.kinds import THUMBNAIL_DRAFT, THUMBNAIL_SIZE
    photo, image = decode_photo(encode(noise((width, width * 2 // 3)), "JPEG"), draft=THUMBNAIL_DRAFT)
    assert (photo.width, photo.height) == (width, width * 2 // 3)  # the full image's, whatever the decode
    assert max(image.size) >= THUMBNAIL_DRAFT
    with Image.open(save_thumbnail(image, tmp_path / "t.jpg", THUMBNAIL_SIZE)) as thumb:
        assert max(thumb.size) == thumb_side
