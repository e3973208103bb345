"""Reading the text in a photo or a scan (OCR), with the family that reads text (the registry's
``text_readers``): every page of a PDF and every frame of a multi-page image, and a searchable PDF
made of the pages and what was read in them."""

from __future__ import annotations

from pathlib import Path

from tritonclient.utils import InferenceServerException

from search.errors import BadRequest, ModelNotReady
from search.media import searchable_pdf
from search.media.pages import PageError, ScanPage, most, scan_pages
from search.models import text_reader
from search.services.base import ServiceBase
from search.services.ocr_gate import gate
from search.services.results import TextRead

PAGES_PER_CALL = 4  # pages sent to the reader at once (each its own request): a cancel or an error stops between


class TextReading(ServiceBase):
    def read_text(self, image: Path | str | bytes, *, pdf: Path | None = None) -> TextRead:
        """The text lines in an image, a multi-page image or a PDF (a path or its bytes), page by page,
        each line with its confidence, its box and its page. ``pdf``: also write a searchable PDF there.
        At most ``ocr_concurrency`` requests are split, prepared and read at once in this process,
        ``ocr_queue`` more wait (search.services.ocr_gate)."""
        if (reader := text_reader(self.settings.text_reader)) is None:
            raise ModelNotReady("no model that reads text is registered")
        data = self._image_bytes(image)
        self._require(reader.ensembles[0], reader.display)
        with gate(self.settings.ocr_concurrency, self.settings.ocr_queue).admitted():
            pages = self.scan_pages(data)
            lines: list[dict] = []
            for start in range(0, len(pages), PAGES_PER_CALL):
                batch = pages[start:start + PAGES_PER_CALL]
                lines += [{**line.as_dict(), "page": page.number}
                          for page, page_lines in zip(batch, self._read(reader, batch, len(pages)), strict=True)
                          for line in page_lines]
            read = TextRead(lines, reader.display, len(pages))
            if pdf is not None:
                searchable_pdf.write_pages(pages, read.lines, pdf)
        return read

    def _read(self, reader, batch: list[ScanPage], pages: int) -> list[list]:
        try:
            return reader.read_text(self.triton, [p.image for p in batch])
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            msg = (exc.message() or str(exc)).removeprefix("IMAGE: ")
            raise BadRequest(f"image: {msg}" if pages == 1 else f"image: page {batch[0].number}..: {msg}") from None

    def scan_pages(self, data: bytes) -> list[ScanPage]:
        """The pages of an image or a PDF, as images for OCR (bounded by max_read_pages and max_image_pixels)."""
        s = self.settings
        try:
            return list(scan_pages(data, max_pixels=s.max_image_pixels, count=most(s.max_read_pages)))
        except PageError as exc:
            raise BadRequest(f"image: {exc}") from None
