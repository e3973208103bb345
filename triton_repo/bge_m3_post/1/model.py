"""Post-processing step of the ``bge_m3`` ensemble (FlagEmbedding's BGEM3FlagModel semantics).

post.json gives the special token ids (cls, eos, pad, unk) that carry no sparse weight and the
vector width. Per text: DENSE passes through; SPARSE_INDICES / SPARSE_VALUES hold one weight per
token id (the max over its occurrences; specials and zero weights dropped), sorted by id, padded
with -1 / 0 to the longest of the request; COLBERT holds the text's NUM_TOKENS - 1 vectors (the
graph already masked and normalised them), padded with zero rows to the longest text of the
request, or no rows when the request's WITH_COLBERT is false.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


def sparse(ids: np.ndarray, weights: np.ndarray, special: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token id -> max weight over its occurrences, without special tokens or zero weights."""
    keep = (weights > 0) & ~np.isin(ids, special)
    ids, weights = ids[keep], weights[keep]
    if not len(ids):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    order = np.lexsort((-weights, ids))  # by id, the largest weight first
    ids, weights = ids[order], weights[order]
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    return ids[first].astype(np.int64), weights[first].astype(np.float32)


class TritonPythonModel:
    def initialize(self, args):
        with open(os.path.join(args["model_repository"], args["model_version"], "post.json")) as f:
            post = json.load(f)
        self.special = np.array(post["special_ids"], dtype=np.int64)
        self.dim = int(post["dim"])

    def execute(self, requests):
        responses = []
        for request in requests:
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name)  # noqa: E731
            ids, mask = get("input_ids").as_numpy(), get("attention_mask").as_numpy()
            weights, colbert = get("token_weights").as_numpy(), get("colbert").as_numpy()
            flag = get("WITH_COLBERT")
            with_colbert = bool(flag.as_numpy().reshape(-1).any()) if flag is not None else True
            pairs = [sparse(ids[r], weights[r], self.special) for r in range(len(ids))]
            width = max((len(p[0]) for p in pairs), default=0)
            indices = np.full((len(ids), width), -1, np.int64)
            values = np.zeros((len(ids), width), np.float32)
            for r, (idx, val) in enumerate(pairs):
                indices[r, :len(idx)], values[r, :len(val)] = idx, val
            rows = int(mask.sum(axis=1).max(initial=1)) - 1 if with_colbert else 0
            vectors = np.ascontiguousarray(colbert[:, :rows], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("DENSE", np.ascontiguousarray(get("dense").as_numpy(), dtype=np.float32)),
                pb_utils.Tensor("SPARSE_INDICES", indices),
                pb_utils.Tensor("SPARSE_VALUES", values),
                pb_utils.Tensor("COLBERT", vectors.reshape(len(ids), rows, self.dim)),
            ]))
        return responses
