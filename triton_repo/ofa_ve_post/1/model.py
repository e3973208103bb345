"""Post-processing step of the ``ofa_ve`` ensemble: the answer logits (no, yes, maybe, the order
post.json records) -> LOGITS and PROBS ordered entailment, neutral, contradiction, and LABEL.
The probabilities are the softmax over the three answers, OFA's SNLI-VE scoring rule."""

import json
import os

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # the tests import ``verdict`` without Triton
    pb_utils = None


def verdict(answer_logits: np.ndarray, post: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, 3] answer logits -> (logits, probs) in label order [B, 3] and labels [B, 1] (bytes)."""
    order = [post["answers"].index(a) for label in post["labels"]
             for a, r in post["relation"].items() if r == label]
    logits = np.asarray(answer_logits, np.float32)[:, order]
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = (z / z.sum(axis=1, keepdims=True)).astype(np.float32)
    labels = np.array([[post["labels"][i].encode()] for i in probs.argmax(axis=1)], dtype=np.object_)
    return logits, probs, labels


class TritonPythonModel:
    def initialize(self, args):
        with open(os.path.join(args["model_repository"], args["model_version"], "post.json")) as f:
            self.post = json.load(f)

    def execute(self, requests):
        responses = []
        for request in requests:
            logits, probs, labels = verdict(pb_utils.get_input_tensor_by_name(request, "answer_logits").as_numpy(), self.post)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PROBS", probs), pb_utils.Tensor("LOGITS", logits), pb_utils.Tensor("LABEL", labels)]))
        return responses
