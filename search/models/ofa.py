"""OFA visual entailment: image + hypothesis (+ optional text premise) -> entailment / neutral /
contradiction with probabilities, served by Triton as the ``ofa_ve`` ensemble (the semantics, which
are OFA's SNLI-VE evaluation rule, are in ``search.models.export.ofa``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from search.models.base import Family, image_tensor
from search.triton.client import TritonClient, text_tensor

# max_batch_size of the ofa_ve models is 2: on CPU a batch costs gigabytes of activations per pair
# and is slower per pair than one at a time (docs/ofa.md), so the
# client sends one pair per request; the dynamic batcher pairs up concurrent requests only.
PAIRS_PER_REQUEST = 1
ANSWERS = ("no", "yes", "maybe")  # OFA's snli_ve ans2label order: the ONNX graph's answer_logits order
RELATION = {"yes": "entailment", "no": "contradiction", "maybe": "neutral"}
LABELS = ("entailment", "neutral", "contradiction")  # the served PROBS / LOGITS order
HUB_ID = "iic/ofa_visual-entailment_snli-ve_large_en"


class OFA(Family):
    family, display = "ofa", "OFA"
    ensembles = ("ofa_ve",)
    modes = {"entail": None}
    doc_page = "docs/ofa.md"
    build_hint = f"with a ModelScope OFA visual-entailment checkpoint (see {doc_page})"
    steps = ("ofa_ve_preprocess", "ofa_ve_onnx", "ofa_ve_post")
    # No vectors and no ingest kind: it re-ranks photo hits (entail below).
    source_setting, cli_option = "ofa_source", "--ofa-source"
    source_help = ("OFA visual entailment: a local ModelScope checkpoint folder (config.json, pytorch_model.bin, "
                   f"configuration.json, vocab.json, merges.txt), e.g. from `modelscope download --model {HUB_ID} "
                   "--local_dir DIR` on a connected machine.")
    hub_hint = HUB_ID
    export_module = "search.models.export.ofa"
    # ModelScope renamed its "damo" organisation "iic"; `modelscope download --local_dir` leaves ORG/NAME
    checkpoints = ("iic/ofa_visual-entailment_snli-ve_large_en", "damo/ofa_visual-entailment_snli-ve_large_en")
    checkpoint_orgs = ("iic", "damo")
    published_module = "search.models.ofa_published"

    def artifacts(self, repo: Path) -> list[Path]:
        return [repo / "ofa_ve_preprocess/1/tokenizer.json", repo / "ofa_ve_preprocess/1/ve.json",
                repo / "ofa_ve_onnx/1/model.onnx", repo / "ofa_ve_post/1/post.json", self.manifest_path(repo)]

    def entail(self, client: TritonClient, images: list[bytes], hypotheses: list[str],
               premises: list[str | None] | None = None) -> list[dict]:
        return entail(client, images, hypotheses, premises)

    def served_golden(self, client: TritonClient, gold) -> dict[str, np.ndarray]:
        logits, truncated = [], []
        for pair in gold.pairs:  # one pair per request, as the service sends them
            res = client.infer("ofa_ve", {"IMAGE": image_tensor([gold.photo(pair.photo).data]),
                                          "HYPOTHESIS": text_tensor([pair.hypothesis]),
                                          "PREMISE": text_tensor([pair.premise or ""])}, ["LOGITS", "TRUNCATED"])
            logits.append(res["LOGITS"][0])
            truncated.append(bool(res["TRUNCATED"].reshape(-1)[0]))
        return {"pair_logits": np.stack(logits).astype(np.float32), "pair_truncated": np.array(truncated)}


def entail(client: TritonClient, images: list[bytes], hypotheses: list[str],
           premises: list[str | None] | None = None) -> list[dict]:
    """One verdict per (image, hypothesis[, premise]) from ``ofa_ve``: {"label": entailment | neutral |
    contradiction, "probs": the three, summing to 1, "truncated": the text was cut to the model's length}
    (the services' ``Verdict``). A request holding a bad
    image or an empty hypothesis fails whole (INVALID_ARGUMENT naming it): callers retry one by one."""
    premises = premises or [None] * len(images)
    if not (len(images) == len(hypotheses) == len(premises)):
        raise ValueError("images, hypotheses and premises must have the same length")
    out: list[dict] = []
    for start in range(0, len(images), PAIRS_PER_REQUEST):
        sl = slice(start, start + PAIRS_PER_REQUEST)
        res = client.infer("ofa_ve", {"IMAGE": image_tensor(images[sl]), "HYPOTHESIS": text_tensor(hypotheses[sl]),
                                      "PREMISE": text_tensor([p or "" for p in premises[sl]])},
                           ["PROBS", "LABEL", "TRUNCATED"])
        for probs, label, truncated in zip(res["PROBS"], res["LABEL"].reshape(-1), res["TRUNCATED"].reshape(-1)):
            out.append({"label": label.decode() if isinstance(label, bytes) else str(label),
                        "probs": {k: float(v) for k, v in zip(LABELS, probs)}, "truncated": bool(truncated)})
    return out
