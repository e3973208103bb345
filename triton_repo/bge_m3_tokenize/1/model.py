"""Tokenizer step of the ``bge_m3`` ensemble: text -> XLM-R SentencePiece ids and attention mask.

tokenizer.json is the model's own fast tokenizer (``<s> text </s>``); text.json gives the pad token
and the model's token limit. Each text is truncated to the ``max_length`` parameter (8192), the
model's limit if smaller, and its request's MAX_LENGTH when that is positive and smaller (at least
2: ``<s>`` and ``</s>``). All texts of the dynamic batch are then padded to the longest, so every
request of the batch has one shape and the encoder batches them.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, "text.json")) as f:
            text = json.load(f)
        self.limit = min(int(cfg["parameters"]["max_length"]["string_value"]), int(text["model_max_length"]))
        self.pad_id = int(text["pad_id"])
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tokenizer.no_padding()

    def execute(self, requests):
        texts, limits, counts, responses = [], [], [], [None] * len(requests)
        for i, request in enumerate(requests):
            raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            max_length = pb_utils.get_input_tensor_by_name(request, "MAX_LENGTH")
            asked = max_length.as_numpy().reshape(-1) if max_length is not None else np.zeros(len(raw), np.int32)
            try:
                decoded = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in raw]
            except UnicodeDecodeError as exc:
                error = pb_utils.TritonError(f"TEXT is not valid UTF-8: {exc}", pb_utils.TritonError.INVALID_ARG)
                responses[i] = pb_utils.InferenceResponse(error=error)
                counts.append(0)
                continue
            if len(asked) != len(decoded):
                error = pb_utils.TritonError("MAX_LENGTH needs one value per TEXT", pb_utils.TritonError.INVALID_ARG)
                responses[i] = pb_utils.InferenceResponse(error=error)
                counts.append(0)
                continue
            texts.extend(decoded)
            limits.extend(max(2, min(int(a), self.limit)) if int(a) > 0 else self.limit for a in asked)
            counts.append(len(decoded))
        encodings = [None] * len(texts)
        for limit in set(limits):  # one tokenizer call per distinct limit
            rows = [r for r, lim in enumerate(limits) if lim == limit]
            self.tokenizer.enable_truncation(limit)
            for r, enc in zip(rows, self.tokenizer.encode_batch([texts[r] for r in rows])):
                encodings[r] = enc
        width = max((len(e.ids) for e in encodings), default=0)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n], mask[row, :n] = enc.ids, enc.attention_mask
        truncated = np.array([[bool(e.overflowing)] for e in encodings], dtype=bool).reshape(-1, 1)
        lengths = np.array([[len(e.ids)] for e in encodings], dtype=np.int32).reshape(-1, 1)

        start = 0
        for i, n in enumerate(counts):
            if responses[i] is not None:
                continue
            sl = slice(start, start + n)
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("input_ids", ids[sl]),
                pb_utils.Tensor("attention_mask", mask[sl]),
                pb_utils.Tensor("TRUNCATED", truncated[sl]),
                pb_utils.Tensor("NUM_TOKENS", lengths[sl]),
            ])
            start += n
        return responses
