"""Tokenizer step of the ``minilm`` ensemble: text -> WordPiece ids, attention mask, type ids.

The shipped tokenizer.json carries its own truncation (128) and fixed padding; both are replaced
here by the model's limit (``max_length`` parameter, 256) and padding to the longest text: each
request to the longest of a group of requests of similar lengths in the dynamic batch
(``tokens.widths``), so that those requests share one shape and the encoder batches them, while a
short request is not padded to a long one's length.
"""

from tokenizers import Tokenizer

from search.triton.steps import backend, tokens


class TritonPythonModel:
    def initialize(self, args):
        self.max_length = int(backend.parameter(args, "max_length"))
        self.tokenizer = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_grouped(requests, lambda r: backend.text(r, "TEXT"), self._run)

    def _run(self, per_request):
        encodings = tokens.encode(self.tokenizer, [t for texts in per_request for t in texts], self.max_length)
        return tokens.pad_requests(encodings, [len(texts) for texts in per_request])
