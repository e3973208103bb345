"""Visual entailment (the family that claims the "entail" mode): does a photo support a statement? Asked on its own, or to verify the
photos a text query found."""

from __future__ import annotations

from pathlib import Path

from tritonclient.utils import InferenceServerException

from search.errors import BadRequest
from search.models import for_mode
from search.services.base import ServiceBase
from search.services.results import Verdict

ENTAIL = for_mode("entail")  # the family that answers entailment


class PhotoEntailment(ServiceBase):
    def entail(self, image: Path | str | bytes, hypothesis: str, premise: str | None = None) -> Verdict:
        """Does the photo (a path or its bytes) support ``hypothesis``, optionally given a text
        ``premise``? The label, the three probabilities, and whether the text was truncated."""
        hypothesis = (hypothesis or "").strip()
        if not hypothesis:
            raise BadRequest("hypothesis: must not be empty")
        premise = (premise or "").strip() or None
        data = self._image_bytes(image)
        self._require(ENTAIL.ensembles[0], ENTAIL.display)
        try:
            return Verdict(**ENTAIL.entail(self.triton, [data], [hypothesis], [premise])[0])
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            msg = (exc.message() or str(exc)).split(f"in ensemble '{ENTAIL.ensembles[0]}', ")[-1]
            for tensor in ("HYPOTHESIS", "IMAGE"):  # the step names the tensor at fault
                if msg.startswith(tensor + ": "):
                    raise BadRequest(f"{tensor.lower()}: {msg[len(tensor) + 2:]}") from None
            raise BadRequest(f"image: {msg}") from None

    def _entail_many(self, images: list[bytes], text: str) -> list[Verdict | None]:
        """Verdicts for many photos (one request each, as the family sends them), None for a photo the
        model refuses (undecodable), so one bad file cannot sink the others."""
        out = []
        for data in images:
            try:
                out.append(Verdict(**ENTAIL.entail(self.triton, [data], [text])[0]))
            except InferenceServerException as exc:
                if "INVALID_ARG" not in str(exc.status() or ""):
                    raise
                out.append(None)
        return out
