"""Visual entailment (the family that claims the "entail" mode): does a photo support a statement? Asked on its own, or to verify the
photos a text query found."""

from __future__ import annotations

from pathlib import Path

from tritonclient.utils import InferenceServerException

from search.errors import BadRequest
from search.media.files import Refused, photo_reason, read_regular
from search.models import for_mode
from search.services.base import ServiceBase
from search.services.results import Verdict

ENTAIL = for_mode("entail")  # the family that answers entailment


class Entailment(ServiceBase):
    def entail(self, image: Path | str | bytes, hypothesis: str, premise: str | None = None) -> Verdict:
        """Does the photo (a path or its bytes) support ``hypothesis``, optionally given a text
        ``premise``? The label, the three probabilities, and whether the text was truncated."""
        hypothesis = (hypothesis or "").strip()
        if not hypothesis:
            raise BadRequest("hypothesis: must not be empty")
        premise = (premise or "").strip() or None
        data = image if isinstance(image, bytes) else self._read_image(Path(image), "image")
        if not data:
            raise BadRequest("image: the image is empty (0 bytes)")
        if len(data) > self.settings.max_image_bytes:
            raise BadRequest(f"image: too large: {len(data) / 1e6:.1f} MB > {self.settings.max_image_bytes / 1e6:.1f} MB limit")
        self._require(ENTAIL.ensembles[0], ENTAIL.display)
        try:
            e = ENTAIL.entail(self.triton, [data], [hypothesis], [premise])[0]
            return Verdict(e.label, e.probs, e.truncated)
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            msg = (exc.message() or str(exc)).split(f"in ensemble '{ENTAIL.ensembles[0]}', ")[-1]
            for tensor in ("HYPOTHESIS", "IMAGE"):  # the step names the tensor at fault
                if msg.startswith(tensor + ": "):
                    raise BadRequest(f"{tensor.lower()}: {msg[len(tensor) + 2:]}") from None
            raise BadRequest(f"image: {msg}") from None

    def _entail_many(self, images: list[bytes], text: str) -> list:
        """Verdicts for many photos (one request each, as the family sends them), None for a photo the
        model refuses (undecodable), so one bad file cannot sink the others."""
        out = []
        for data in images:
            try:
                out.append(ENTAIL.entail(self.triton, [data], [text])[0])
            except InferenceServerException as exc:
                if "INVALID_ARG" not in str(exc.status() or ""):
                    raise
                out.append(None)
        return out

    def _read_image(self, path: Path, field_name: str) -> bytes:
        """A photo file named by the machine's own user (the CLI, `search mcp`): any regular file,
        but opened without blocking (a FIFO would hold the thread for ever) and bounded in size."""
        path = path.expanduser()
        try:
            return read_regular(path, self.settings.max_image_bytes)
        except Refused as exc:
            raise BadRequest(f"{field_name}: {path}: {photo_reason(exc)}") from None
