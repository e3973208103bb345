"""Images as documents: a photo or a scan whose only text is in its pixels, one page per frame (a
multi-page TIFF is a scanned document), each page an image for OCR to read."""

from __future__ import annotations

import io
import warnings

from PIL import Image

from indexer.loaders.base import BadDocument, Budget, LoadedDocument, Page, _reason

MAX_FRAME_PIXELS = 100_000_000  # a frame larger than this is not decoded (the OCR step's own limit)


def _load_scan(data: bytes, budget: Budget) -> LoadedDocument:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            frames = getattr(image, "n_frames", 1)
            if frames == 1:
                if image.width * image.height > MAX_FRAME_PIXELS:
                    raise BadDocument(f"image too large: {image.width}x{image.height} pixels")
                return LoadedDocument(None, [Page(None, "", scan=data)])  # the file as it is: OCR decodes it
            budget.pages(frames)
            pages = []
            for k in range(frames):
                budget.check_time()
                image.seek(k)
                if image.width * image.height > MAX_FRAME_PIXELS:
                    raise BadDocument(f"page {k + 1} too large: {image.width}x{image.height} pixels")
                buf = io.BytesIO()
                image.convert("RGB").save(buf, "PNG", compress_level=1)
                pages.append(Page(k + 1, "", scan=buf.getvalue()))
            return LoadedDocument(None, pages)
    except BadDocument:
        raise
    except Exception as exc:  # Pillow raises many kinds for broken files
        raise BadDocument(f"not a readable image: {_reason(exc)}") from None
