"""Images as documents: a photo or a scan whose only text is in its pixels, one page per frame (a
multi-page TIFF is a scanned document), each page an image for OCR to read (search.media.pages
splits them, as for `search ocr`)."""

from __future__ import annotations

from indexer.loaders.base import BadDocument, Budget, LoadedDocument, Page
from search.media.pages import PageError, scan_pages

MAX_FRAME_PIXELS = 100_000_000  # a frame larger than this is not decoded (the OCR step's own limit)


def _load_scan(data: bytes, budget: Budget) -> LoadedDocument:
    try:
        pages = list(scan_pages(data, max_pixels=MAX_FRAME_PIXELS, count=budget.pages, tick=budget.check_time))
    except PageError as exc:
        raise BadDocument(str(exc)) from None
    if len(pages) == 1:
        return LoadedDocument(None, [Page(None, "", scan=pages[0].image)])  # the file as it is: OCR decodes it
    return LoadedDocument(None, [Page(p.number, "", scan=p.image) for p in pages])
