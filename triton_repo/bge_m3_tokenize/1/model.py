"""Tokenizer step of the ``bge_m3`` ensemble: text -> XLM-R SentencePiece ids and attention mask.

tokenizer.json is the model's own fast tokenizer (``<s> text </s>``); text.json gives the pad token
and the model's token limit. Each text is truncated to the ``max_length`` parameter (8192), the
model's limit if smaller, and its request's MAX_LENGTH when that is positive and smaller (at least
2: ``<s>`` and ``</s>``). Each request is then padded to the longest text of a group of requests
of similar lengths in the dynamic batch (``tokens.widths``): those share one shape and the encoder
batches them, while a query is not padded to the length of a long document beside it.
"""

from tokenizers import Tokenizer

from search.triton.steps import backend, bge_m3
from search.triton.steps.requests import one_each


class TritonPythonModel:
    def initialize(self, args):
        text = backend.read_json(args, "text.json")
        self.limit = min(int(backend.parameter(args, "max_length")), int(text["model_max_length"]))
        self.pad_id = int(text["pad_id"])
        self.tokenizer = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_grouped(requests, self._rows, self._run)

    def _rows(self, request):
        texts = backend.text(request, "TEXT")
        asked = backend.tensor(request, "MAX_LENGTH")
        asked = [0] * len(texts) if asked is None else one_each(asked, len(texts), "MAX_LENGTH", "TEXT")
        return [(t, bge_m3.limit(a, self.limit)) for t, a in zip(texts, asked)]

    def _run(self, per_request):
        rows = [row for request in per_request for row in request]
        return bge_m3.tokenize_requests(self.tokenizer, [t for t, _ in rows], [lim for _, lim in rows], self.pad_id,
                                        [len(request) for request in per_request])
