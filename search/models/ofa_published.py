"""OFA visual entailment's published answers: the publisher's example, checked against the served model when the build came from
that checkpoint (``search.models.published``, docs/verify.md). ``served`` asks the live ensembles,
``judge`` compares with the published numbers (a pure function the tests feed)."""

from __future__ import annotations

from search.models.base import image_tensor
from search.models.published import Context, unavailable
from search.models.verify import FAIL, PASS, Check, Tolerance
from search.triton.client import text_tensor

# -- iic/ofa_visual-entailment_snli-ve_large_en: the ModelScope model card's example
OFA_IMAGE_URL = "https://xingchen-data.oss-cn-zhangjiakou.aliyuncs.com/maas/visual-entailment/visual_entailment.jpg"
OFA_IMAGE_FILE = "modelscope-visual_entailment.jpg"
OFA_HYPOTHESIS = "there are two birds."
OFA_LABEL = "contradiction"  # the card prints the answer "no"


def served(ctx: Context) -> str | None:
    image = ctx.fetch(OFA_IMAGE_URL, OFA_IMAGE_FILE)
    if image is None:
        return None
    res = ctx.client.infer("ofa_ve", {"IMAGE": image_tensor([image]), "HYPOTHESIS": text_tensor([OFA_HYPOTHESIS]),
                                      "PREMISE": text_tensor([""])}, ["LABEL"])
    label = res["LABEL"].reshape(-1)[0]
    return label.decode() if isinstance(label, bytes) else str(label)


def judge(label: str, tol: Tolerance) -> list[Check]:
    ok = label == OFA_LABEL
    return [Check("ofa", "published: ModelScope model card example (\"there are two birds.\")", PASS if ok else FAIL,
                  f"label {label}", f"label {OFA_LABEL} (answer \"no\")", "" if ok else "the served model disagrees")]


def run(ctx: Context) -> list[Check]:
    label = served(ctx)
    if label is None:
        return [unavailable("ofa", "published: ModelScope model card example", OFA_IMAGE_URL, OFA_IMAGE_FILE, ctx)]
    return judge(label, ctx.tol)
