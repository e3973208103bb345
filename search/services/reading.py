"""Reading the text in a photo or a scan (OCR), with the family that reads text (the registry's
``text_readers``)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.utils import InferenceServerException

from search.errors import BadRequest, ModelNotReady
from search.models import text_readers
from search.services.base import ServiceBase
from search.services.ocr_gate import gate
from search.services.results import TextRead


class TextReading(ServiceBase):
    def read_text(self, image: Path | str | bytes) -> TextRead:
        """The text lines in an image (a path or its bytes), each with its confidence and box. At most
        ``ocr_concurrency`` are prepared and read at once in this process, ``ocr_queue`` more wait."""
        readers = text_readers()
        if not readers:
            raise ModelNotReady("no model that reads text is registered")
        reader = readers[0]
        data = self._image_bytes(image)
        self._require(reader.ensembles[0], reader.display)
        try:
            with gate(self.settings.ocr_concurrency, self.settings.ocr_queue).admitted():
                lines = reader.read_text(self.triton, [data])[0]
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            msg = exc.message() or str(exc)
            raise BadRequest(f"image: {msg.removeprefix('IMAGE: ')}") from None
        return TextRead([line.as_dict() for line in lines], reader.display)
