"""Tokenizer step of the ``minilm`` ensemble: text -> WordPiece ids, attention mask, type ids.

The shipped tokenizer.json carries its own truncation (128) and fixed padding; both are replaced
here by the model's limit (``max_length`` parameter, 256) and padding to the longest text of the
whole dynamic batch, so every request of the batch has one shape and the encoder batches them.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.max_length = int(cfg["parameters"]["max_length"]["string_value"])
        path = os.path.join(args["model_repository"], args["model_version"], "tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_length)

    def execute(self, requests):
        texts, counts, responses = [], [], [None] * len(requests)
        for i, request in enumerate(requests):
            raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            try:
                decoded = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in raw]
            except UnicodeDecodeError as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"TEXT is not valid UTF-8: {exc}"))
                counts.append(0)
                continue
            texts.extend(decoded)
            counts.append(len(decoded))
        encodings = self.tokenizer.encode_batch(texts) if texts else []
        width = max((len(e.ids) for e in encodings), default=0)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = enc.ids, enc.attention_mask, enc.type_ids
        truncated = np.array([[bool(e.overflowing)] for e in encodings], dtype=bool)
        lengths = np.array([[len(e.ids)] for e in encodings], dtype=np.int32)

        start = 0
        for i, n in enumerate(counts):
            if responses[i] is not None:
                continue
            sl = slice(start, start + n)
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("input_ids", ids[sl]),
                pb_utils.Tensor("attention_mask", mask[sl]),
                pb_utils.Tensor("token_type_ids", types[sl]),
                pb_utils.Tensor("TRUNCATED", truncated[sl]),
                pb_utils.Tensor("NUM_TOKENS", lengths[sl]),
            ])
            start += n
        return responses
