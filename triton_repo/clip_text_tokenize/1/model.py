"""Tokenizer step of the ``clip_text`` ensemble: text -> CLIP BPE ids and attention mask.

tokenizer.json is the model's own fast tokenizer; text.json gives the context length, the pad
token and ``variable_length``. Like CLIP (and ``CLIPTokenizerFast(max_length=77, truncation=True)``)
every text becomes start token, up to 75 tokens, end token. Where the export found that the text
graph gives the same vectors at any length (``variable_length``: a causal tower that pools at the
end token, so the padding after it changes nothing), each request is padded only to the longest
text of a group of requests of similar lengths in the dynamic batch (``tokens.widths``: those share
one shape and the text tower batches them); otherwise every text to exactly the context length,
as CLIP was trained.
"""

from tokenizers import Tokenizer

from search.triton.steps import backend, tokens


class TritonPythonModel:
    def initialize(self, args):
        text = backend.read_json(args, "text.json")
        self.length = min(int(text["context_length"]), int(backend.parameter(args, "max_length")))
        self.pad_id = int(text["pad_id"])
        self.variable = bool(text.get("variable_length"))
        self.tokenizer = Tokenizer.from_file(backend.path(args, "tokenizer.json"))

    def execute(self, requests):
        return backend.execute_grouped(requests, lambda r: backend.text(r, "TEXT"), self._run)

    def _run(self, per_request):
        encodings = tokens.encode(self.tokenizer, [t for texts in per_request for t in texts], self.length)
        counts = [len(texts) for texts in per_request]
        if self.variable:
            padded = tokens.pad_requests(encodings, counts, self.pad_id)
        else:
            padded = [tokens.pad(part, self.pad_id, width=self.length) for part in _split(encodings, counts)]
        return [{name: out[name] for name in ("input_ids", "attention_mask", "TRUNCATED")} for out in padded]


def _split(items: list, counts: list[int]) -> list[list]:
    out, start = [], 0
    for n in counts:
        out.append(items[start:start + n])
        start += n
    return out
