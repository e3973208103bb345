"""Write the images with text this repository ships: the OCR golden images of `search models verify`
(search/models/golden/text_*.{png,jpg}) and the demo's scanned PDF and whiteboard photo (samples/).

    .venv/bin/python tools/text_images.py

Everything is drawn here with DejaVu Sans (its free licence allows embedding it in images) on plain backgrounds or
on the CC0 / public-domain golden photos; the texts are written for this repository. The committed
files are this script's output (Pillow 12); re-running it changes them only if Pillow's font or
encoders change, which changes the golden set's digest (then `search models build --force`).
"""

from __future__ import annotations

import io
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "search" / "models" / "golden"
SAMPLES = ROOT / "samples"

PAGE = [
    "Printer queue reset procedure",
    "",
    "1. Open the print server console and stop the spooler service.",
    "2. Delete the stuck jobs from the queue folder (not the drivers).",
    "3. Start the spooler again and print a test page from the printer.",
    "If the test page does not come out within two minutes, call the",
    "help desk on extension 4410 and quote the printer's asset number",
    "(for example RE16-0427, on the label at the back).",
]


FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # Debian's fonts-dejavu-core (DejaVu's free licence)


def font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(FONT, size)


def lines_image(lines: list[tuple[str, int]], width: int, fg=(20, 20, 20), bg=(255, 255, 255), margin: int = 24) -> Image.Image:
    height = margin * 2 + sum(int(size * 1.6) for _, size in lines)
    img = Image.new("RGB", (width, height), bg)
    draw, y = ImageDraw.Draw(img), margin
    for text, size in lines:
        draw.text((margin, y), text, font=font(size), fill=fg)
        y += int(size * 1.6)
    return img


def scanned(img: Image.Image, seed: int, angle: float = 0.6) -> Image.Image:
    """A page as a flatbed scan gives it: greyish paper, a slight skew, blur and speckle."""
    rng = random.Random(seed)
    grey = img.convert("L").point(lambda v: 30 + v * 0.82)
    grey = grey.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=235)
    grey = grey.filter(ImageFilter.GaussianBlur(0.6))
    px = grey.load()
    for _ in range(grey.width * grey.height // 400):
        x, y = rng.randrange(grey.width), rng.randrange(grey.height)
        px[x, y] = rng.choice((40, 60, 200))
    return grey.convert("RGB")


def jpeg(img: Image.Image, quality: int = 80) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def sign_photo(photo: Path, words: list[str]) -> Image.Image:
    """A golden photo, enlarged, with a street sign held up in its corner (a slight perspective)."""
    base = Image.open(photo).convert("RGB")
    base = base.resize((base.width * 3, base.height * 3), Image.Resampling.BICUBIC)
    sign = lines_image([(w, 34) for w in words], 300, fg=(255, 255, 255), bg=(16, 92, 52), margin=16)
    sign = sign.transform(sign.size, Image.Transform.QUAD,
                          (0, 6, 0, sign.height - 4, sign.width, sign.height, sign.width - 2, 0),
                          Image.Resampling.BICUBIC, fillcolor=(16, 92, 52))
    base.paste(sign, (base.width - sign.width - 30, 30))
    return base


def main() -> None:
    rendered = lines_image([("Invoice RE16-2041", 40), ("wifi password: hunter2", 30),
                            ("Meeting room B, 3rd floor", 24), ("Total 42.50 USD", 20)], 560)
    (GOLDEN / "text_rendered.png").write_bytes(png(rendered))
    page = lines_image([(t, 22) for t in PAGE], 900, margin=60)
    (GOLDEN / "text_page.jpg").write_bytes(jpeg(scanned(page, seed=1), quality=75))
    (GOLDEN / "text_sign.jpg").write_bytes(jpeg(sign_photo(GOLDEN / "rocket.jpg", ["EXIT 12", "Main Street"])))
    upside = lines_image([("Quarterly report 2024", 32), ("Page 7 of 12", 24)], 480).rotate(180)
    (GOLDEN / "text_upside_down.png").write_bytes(png(upside))

    # The demo: a whiteboard photo and a scanned PDF (an image-only page: no text layer).
    board = lines_image([("Guest wifi", 44), ("network: OfficeGuest", 34), ("password: blue-Harbor-72", 34),
                         ("(changes every Monday)", 26)], 720, fg=(30, 50, 140), bg=(244, 244, 238), margin=40)
    (SAMPLES / "scans" / "whiteboard-wifi.jpg").write_bytes(jpeg(scanned(board, seed=2, angle=-1.2), quality=82))
    scan = scanned(lines_image([(t, 26) for t in PAGE], 1100, margin=80), seed=3)
    scan.save(SAMPLES / "scans" / "printer-queue-scan.pdf", "PDF", resolution=150.0)


if __name__ == "__main__":
    main()
