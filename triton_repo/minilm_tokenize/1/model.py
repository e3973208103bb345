"""Tokenizer step of the ``minilm`` ensemble: text -> WordPiece ids, attention mask, type ids.

The shipped tokenizer.json carries its own truncation (128) and fixed padding; both are replaced
here by the model's limit (``max_length`` parameter, 256) and padding to the longest text of the
whole dynamic batch, so every request of the batch has one shape and the encoder batches them.
"""

from tokenizers import Tokenizer

from search.triton.steps import backend, tokens


class TritonPythonModel:
    def initialize(self, args):
        self.max_length = int(backend.parameter(args, "max_length"))
        self.tokenizer = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_batched(requests, lambda r: backend.text(r, "TEXT"), self._run)

    def _run(self, texts):
        return tokens.pad(tokens.encode(self.tokenizer, texts, self.max_length))
