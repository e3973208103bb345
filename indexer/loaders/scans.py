"""Images as documents: a photo or a scan whose only text is in its pixels, one page per frame (a
multi-page TIFF is a scanned document), each page an image for OCR to read."""

from __future__ import annotations

import io
import re
import warnings

from PIL import Image

from indexer.loaders.base import BadDocument, Budget, LoadedDocument, Page, _reason

MAX_FRAME_PIXELS = 100_000_000  # a frame larger than this is not decoded (the OCR step's own limit)


def _too_large(width: int, height: int, page: int | None = None) -> BadDocument:
    where = f"page {page} too large" if page else "image too large"
    return BadDocument(f"{where}: {width}x{height} pixels = {width * height / 1e6:.1f} MP > "
                       f"{MAX_FRAME_PIXELS / 1e6:g} MP limit")


def _load_scan(data: bytes, budget: Budget) -> LoadedDocument:
    try:
        with warnings.catch_warnings():
            # MAX_FRAME_PIXELS is the limit, checked here: not Pillow's warning at 89.5 MP (its default)
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            frames = getattr(image, "n_frames", 1)
            if frames == 1:
                if image.width * image.height > MAX_FRAME_PIXELS:
                    raise _too_large(image.width, image.height)
                return LoadedDocument(None, [Page(None, "", scan=data)])  # the file as it is: OCR decodes it
            budget.pages(frames)
            pages = []
            for k in range(frames):
                budget.check_time()
                image.seek(k)
                if image.width * image.height > MAX_FRAME_PIXELS:
                    raise _too_large(image.width, image.height, k + 1)
                buf = io.BytesIO()
                image.convert("RGB").save(buf, "PNG", compress_level=1)
                pages.append(Page(k + 1, "", scan=buf.getvalue()))
            return LoadedDocument(None, pages)
    except BadDocument:
        raise
    except Image.DecompressionBombError as exc:  # over twice Pillow's limit: refused at open, before our check
        pixels = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(pixels[1]) / 1e6:.1f} MP" if pixels else "more pixels"
        raise BadDocument(f"image too large: {size} > {MAX_FRAME_PIXELS / 1e6:g} MP limit") from None
    except Exception as exc:  # Pillow raises many kinds for broken files
        raise BadDocument(f"not a readable image: {_reason(exc)}") from None

