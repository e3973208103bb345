"""Write samples/photos/ (the demo's photos) and the golden photos shipped in search/models/golden/
from the public-domain / CC0 photographs that scikit-image ships as sample data (offline).

    .venv/bin/python tools/sample_photos.py

The committed files are the output of this script (scikit-image 0.26.0, Pillow 12); the licences and
sources are listed in samples/photos/README.md and search/models/golden/README.md. EXIF carries each
photo's description, author and licence; a date and GPS position only where the source documents
them (the DSCOVR launch: 2015-02-11 23:03 UTC, Space Launch Complex 40, Cape Canaveral).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from skimage import data as skdata

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "photos"
GOLDEN = ROOT / "search" / "models" / "golden"
MAX_SIDE = 640  # samples: small enough for the repository (each under ~100 KB), large enough for CLIP's 224 px
MAX_BYTES = 100_000
GOLDEN_SIDE = 224

# file name -> (scikit-image function, description, author, licence)
PHOTOS = {
    "chelsea-the-cat.jpg": ("chelsea", "Chelsea the cat, a tabby, lying down", "Stefan van der Walt", "CC0 1.0"),
    "coffee-cup.jpg": ("coffee", "A cup of coffee on a saucer, on a wooden table (Pikolo Espresso Bar)",
                       "Rachel Michetti", "CC0 1.0"),
    "astronaut-eileen-collins.jpg": ("astronaut", "Astronaut Eileen Collins in her flight suit, with the US flag",
                                     "NASA", "Public domain (NASA, no known copyright restrictions)"),
    "falcon9-dscovr-launch.jpg": ("rocket", "Launch of a SpaceX Falcon 9 carrying DSCOVR from Launch Complex 40, "
                                  "Cape Canaveral", "SpaceX", "Public domain (released by SpaceX, March 2015)"),
    "photographer-with-camera.jpg": ("camera", "A photographer with a camera on a tripod, black and white",
                                     "Lav Varshney", "CC0 1.0"),
    "wall-clock-motion-blur.jpg": ("clock", "A wall clock, blurred by moving the camera", "Stefan van der Walt",
                                   "Public domain (dedicated by the photographer)"),
    "hubble-deep-field.jpg": ("hubble_deep_field", "Hubble eXtreme Deep Field: thousands of galaxies", "NASA",
                              "Public domain (NASA)"),
    "retina-fundus.jpg": ("retina", "Fundus photograph of a normal left human eye (retina)", "Mikael Häggström",
                          "CC0 1.0"),
    "brick-wall.jpg": ("brick", "A brick wall", "CC0Textures (Bricks25)", "CC0 1.0"),
    "grass.jpg": ("grass", "Grass, close up, black and white", "linolafett (DeviantArt)", "CC0 1.0"),
    "gravel.jpg": ("gravel", "Gravel, close up, black and white", "CC0Textures (Gravel04)", "CC0 1.0"),
    "cell-microscopy.jpg": ("cell", "A cell floating in saline (quantitative phase microscopy)",
                            "Paul Müller et al.", "CC0 1.0"),
}
# Only what the source documents: the DSCOVR launch (NASA/SpaceX, 11 February 2015, 23:03:42 UTC, SLC-40).
DATED = {"falcon9-dscovr-launch.jpg": ("2015:02:11 23:03:42", "+00:00", (28.5618, -80.5772))}
# Golden photos for `search models verify`: small copies, one greyscale PNG (the RGB conversion path).
GOLDEN_PHOTOS = {"cat.jpg": "chelsea", "coffee.jpg": "coffee", "astronaut.jpg": "astronaut", "rocket.jpg": "rocket",
                 "camera.png": "camera"}


def pixels(name: str) -> Image.Image:
    arr = getattr(skdata, name)()
    arr = (arr * 255).astype(np.uint8) if arr.dtype != np.uint8 else arr
    return Image.fromarray(arr)


def shrink(im: Image.Image, side: int) -> Image.Image:
    im = im.copy()
    im.thumbnail((side, side), Image.Resampling.LANCZOS)
    return im


def dms(value: float) -> tuple[float, float, float]:
    value = abs(value)
    deg = int(value)
    minutes = int((value - deg) * 60)
    return float(deg), float(minutes), round((value - deg - minutes / 60) * 3600, 2)


def exif(file: str, description: str, author: str, licence: str) -> Image.Exif:
    ex = Image.Exif()
    ex[0x010E] = description  # ImageDescription
    ex[0x013B] = author  # Artist
    ex[0x8298] = f"{licence}; via scikit-image sample data"  # Copyright
    ex[0x0131] = "tools/sample_photos.py (resized from scikit-image data)"  # Software
    if file in DATED:
        taken, offset, (lat, lon) = DATED[file]
        sub = ex.get_ifd(0x8769)
        sub[0x9003] = taken  # DateTimeOriginal
        sub[0x9011] = offset  # OffsetTimeOriginal
        gps = ex.get_ifd(0x8825)
        gps[1], gps[2] = ("N" if lat >= 0 else "S"), dms(lat)
        gps[3], gps[4] = ("E" if lon >= 0 else "W"), dms(lon)
    return ex


def main() -> int:
    SAMPLES.mkdir(parents=True, exist_ok=True)
    for file, (name, description, author, licence) in PHOTOS.items():
        im = shrink(pixels(name), MAX_SIDE)
        for quality in (85, 80, 75, 70):  # fine-grained textures compress worst: keep every file under MAX_BYTES
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=quality, optimize=True, exif=exif(file, description, author, licence))
            if len(buf.getvalue()) <= MAX_BYTES:
                break
        (SAMPLES / file).write_bytes(buf.getvalue())
        print(f"{file}: {im.size[0]}×{im.size[1]}, {len(buf.getvalue()) / 1000:.0f} KB")
    for file, name in GOLDEN_PHOTOS.items():
        im = shrink(pixels(name), GOLDEN_SIDE)
        buf = io.BytesIO()
        im.save(buf, "PNG", optimize=True) if file.endswith(".png") else im.save(buf, "JPEG", quality=90)
        (GOLDEN / file).write_bytes(buf.getvalue())
        print(f"golden/{file}: {im.size[0]}×{im.size[1]}, {len(buf.getvalue()) / 1000:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
