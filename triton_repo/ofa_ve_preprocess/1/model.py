"""Pre-processing step of the ``ofa_ve`` ensemble: image bytes + hypothesis (+ premise) -> the OFA
encoder's inputs and the decoder prompt (``search.triton.steps.ofa_ve``, configured by ve.json and
tokenizer.json). A bad item fails its own request (INVALID_ARG naming it), never the batch."""

from PIL import Image
from tokenizers import Tokenizer

from search.triton.steps import backend, ofa_ve


class TritonPythonModel:
    def initialize(self, args):
        self.max_pixels = int(backend.parameter(args, "max_pixels"))
        Image.MAX_IMAGE_PIXELS = self.max_pixels
        self.ve = backend.read_json(args, "ve.json")
        self.tok = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_each(requests, self._one)

    def _one(self, request):
        column = lambda name: backend.column(request, name)  # noqa: E731
        return ofa_ve.preprocess(self.tok, self.ve, column("IMAGE"), column("HYPOTHESIS"), column("PREMISE"),
                                 self.max_pixels)
