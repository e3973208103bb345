"""Post-processing step of the ``bge_m3`` ensemble (FlagEmbedding's BGEM3FlagModel semantics).

post.json gives the special token ids (cls, eos, pad, unk) that carry no sparse weight and the
vector width. Per text: DENSE passes through; SPARSE_INDICES / SPARSE_VALUES hold one weight per
token id (the max over its occurrences; specials and zero weights dropped), sorted by id, padded
with -1 / 0 to the longest of the request; COLBERT holds the text's NUM_TOKENS - 1 vectors (the
graph already masked and normalised them), padded with zero rows to the longest text of the
request, or no rows when the request's WITH_COLBERT is false.
"""

import numpy as np

from search.triton.steps import backend, bge_m3


class TritonPythonModel:
    def initialize(self, args):
        post = backend.read_json(args, "post.json")
        self.special = np.array(post["special_ids"], dtype=np.int64)
        self.dim = int(post["dim"])

    def execute(self, requests):
        return backend.execute_each(requests, self._one)

    def _one(self, request):
        get = lambda name: backend.tensor(request, name)  # noqa: E731
        flag = get("WITH_COLBERT")
        with_colbert = bool(flag.reshape(-1).any()) if flag is not None else True
        return bge_m3.post(get("input_ids"), get("attention_mask"), get("token_weights"), get("colbert"),
                           get("dense"), self.special, self.dim, with_colbert)
