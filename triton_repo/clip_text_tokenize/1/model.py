"""Tokenizer step of the ``clip_text`` ensemble: text -> CLIP BPE ids and attention mask, 77 each.

tokenizer.json is the model's own fast tokenizer; text.json gives the context length and the pad
token. Like CLIP (and ``CLIPTokenizerFast(padding="max_length", max_length=77, truncation=True)``)
every text becomes start token, up to 75 tokens, end token, then padding to exactly 77.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, "text.json")) as f:
            text = json.load(f)
        self.length = int(text["context_length"])
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tokenizer.enable_truncation(self.length)
        self.tokenizer.enable_padding(length=self.length, pad_id=int(text["pad_id"]), pad_token=text["pad_token"])

    def execute(self, requests):
        texts, counts, responses = [], [], [None] * len(requests)
        for i, request in enumerate(requests):
            raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            try:
                decoded = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in raw]
            except UnicodeDecodeError as exc:
                error = pb_utils.TritonError(f"TEXT is not valid UTF-8: {exc}", pb_utils.TritonError.INVALID_ARG)
                responses[i] = pb_utils.InferenceResponse(error=error)
                counts.append(0)
                continue
            texts.extend(decoded)
            counts.append(len(decoded))
        encodings = self.tokenizer.encode_batch(texts) if texts else []
        ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(-1, self.length)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64).reshape(-1, self.length)
        truncated = np.array([[bool(e.overflowing)] for e in encodings], dtype=bool).reshape(-1, 1)

        start = 0
        for i, n in enumerate(counts):
            if responses[i] is not None:
                continue
            sl = slice(start, start + n)
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("input_ids", ids[sl]),
                pb_utils.Tensor("attention_mask", mask[sl]),
                pb_utils.Tensor("TRUNCATED", truncated[sl]),
            ])
            start += n
        return responses
