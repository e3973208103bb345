"""Tokenizer step of the ``clip_text`` ensemble: text -> CLIP BPE ids and attention mask, 77 each.

tokenizer.json is the model's own fast tokenizer; text.json gives the context length and the pad
token. Like CLIP (and ``CLIPTokenizerFast(padding="max_length", max_length=77, truncation=True)``)
every text becomes start token, up to 75 tokens, end token, then padding to exactly 77.
"""

from tokenizers import Tokenizer

from search.triton.steps import backend, tokens


class TritonPythonModel:
    def initialize(self, args):
        text = backend.read_json(args, "text.json")
        self.length, self.pad_id = int(text["context_length"]), int(text["pad_id"])
        self.tokenizer = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_batched(requests, lambda r: backend.text(r, "TEXT"), self._run)

    def _run(self, texts):
        out = tokens.pad(tokens.encode(self.tokenizer, texts, self.length), self.pad_id, width=self.length)
        return {name: out[name] for name in ("input_ids", "attention_mask", "TRUNCATED")}
