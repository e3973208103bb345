"""Post-processing step of the ``ofa_ve`` ensemble: the answer logits (no, yes, maybe, the order
post.json records) -> LOGITS and PROBS ordered entailment, neutral, contradiction, and LABEL
(``search.triton.steps.ofa_ve.verdict``: the softmax over the three answers, OFA's SNLI-VE rule)."""

from search.triton.steps import backend, ofa_ve


class TritonPythonModel:
    def initialize(self, args):
        self.post = backend.read_json(args, "post.json")

    def execute(self, requests):
        return backend.execute_each(requests, self._one)

    def _one(self, request):
        logits, probs, labels = ofa_ve.verdict(backend.tensor(request, "answer_logits"), self.post)
        return {"PROBS": probs, "LOGITS": logits, "LABEL": labels}
