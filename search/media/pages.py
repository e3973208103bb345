"""The pages of a scan, as images for OCR: a PDF's pages rendered by PDFium (pypdfium2), each frame
of a multi-page image (TIFF, GIF, WebP) on its own, a single image as it is. Bounded: the page count
(``count``) and each frame's size are checked before anything is decoded or rendered in full. Ingest's
loaders and `search ocr` / POST /ocr split pages here, the same way."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from PIL import Image

SCAN_DPI = 200  # resolution a PDF page is rendered at for OCR ...
SCAN_MAX_SIDE = 2_000  # ... at most this many pixels on its longer side (what the OCR reads at most)


class PageError(ValueError):
    """A scan that cannot be split into pages: str() says why, in one line."""


@dataclass(frozen=True)
class ScanPage:
    number: int  # 1-based
    image: bytes  # encoded: the file itself for a single image, else PNG
    dpi: float | None = None  # a rendered PDF page's resolution; None: the image's own


def is_pdf(data: bytes) -> bool:
    return b"%PDF-" in data[:1024]


def most(limit: int) -> Callable[[int], None]:
    """A page count check: more than ``limit`` pages is a PageError."""
    def check(n: int) -> None:
        if n > limit:
            raise PageError(f"too many pages: {n}, at most {limit}")
    return check


def scan_pages(data: bytes, *, max_pixels: int, count: Callable[[int], None],
               numbers: list[int] | None = None, tick: Callable[[], None] = lambda: None) -> Iterator[ScanPage]:
    """The pages of ``data`` (a PDF or an image) one at a time; ``numbers``: only these PDF pages.
    ``count`` is given the number of pages first (it raises when there are too many); ``tick`` is
    called before each page (a time budget's check, a cancel). Raises PageError."""
    if is_pdf(data):
        yield from _pdf_pages(data, max_pixels, count, numbers, tick)
    else:
        yield from _image_pages(data, max_pixels, count, tick)


def _pdf_pages(data: bytes, max_pixels: int, count: Callable[[int], None], numbers: list[int] | None,
               tick: Callable[[], None]) -> Iterator[ScanPage]:
    import pypdfium2 as pdfium  # noqa: PLC0415  (only a PDF needs it)

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise PageError(f"broken PDF: cannot render its pages ({exc})") from None
    try:
        count(len(pdf))
        for n in numbers or range(1, len(pdf) + 1):
            tick()
            page = pdf[n - 1]
            try:
                width, height = page.get_size()  # points: 1/72 inch
                scale = min(SCAN_DPI / 72, SCAN_MAX_SIDE / max(width, height, 1))
                if width * scale * height * scale > max_pixels:  # a sliver page a mile long
                    raise too_large(round(width * scale), round(height * scale), max_pixels, n)
                yield ScanPage(n, _png(page.render(scale=scale).to_pil()), dpi=72 * scale)
            finally:
                page.close()
    finally:
        pdf.close()


def _image_pages(data: bytes, max_pixels: int, count: Callable[[int], None],
                 tick: Callable[[], None]) -> Iterator[ScanPage]:
    try:
        with warnings.catch_warnings():
            # max_pixels is the limit, checked here: not Pillow's warning at 89.5 MP (its default)
            warnings.simplefilter("ignore")
            image = Image.open(io.BytesIO(data))
            frames = getattr(image, "n_frames", 1)
    except Image.DecompressionBombError as exc:  # over twice Pillow's limit: refused at open, before our check
        pixels = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(pixels[1]) / 1e6:.1f} MP" if pixels else "more pixels"
        raise PageError(f"image too large: {size} > {max_pixels / 1e6:g} MP limit") from None
    except Exception as exc:  # Pillow raises many kinds for broken files
        raise PageError(f"not a readable image: {_first_line(exc)}") from None
    count(frames)
    for k in range(frames):
        tick()
        try:
            image.seek(k)
            if image.width * image.height > max_pixels:
                raise too_large(image.width, image.height, max_pixels, k + 1 if frames > 1 else None)
            yield ScanPage(k + 1, data if frames == 1 else _png(image.convert("RGB")))
        except PageError:
            raise
        except Exception as exc:
            raise PageError(f"not a readable image: page {k + 1}: {_first_line(exc)}") from None


def too_large(width: int, height: int, max_pixels: int, page: int | None = None) -> PageError:
    where = f"page {page} too large" if page else "image too large"
    return PageError(f"{where}: {width}x{height} pixels = {width * height / 1e6:.1f} MP > {max_pixels / 1e6:g} MP limit")


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
