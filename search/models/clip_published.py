"""CLIP's published answers: the publisher's example, checked against the served model when the build came from
that checkpoint (``search.models.published``, docs/verify.md). ``served`` asks the live ensembles,
``judge`` compares with the published numbers (a pure function the tests feed)."""

from __future__ import annotations

import numpy as np

from search.models.clip import embed_images, embed_texts
from search.models.published import Context, close, unavailable
from search.models.verify import Check, Tolerance

# -- openai/clip-vit-base-patch32: transformers' CLIPModelIntegrationTest.test_inference
CLIP_IMAGE_URL = "http://images.cocodataset.org/val2017/000000039769.jpg"
CLIP_IMAGE_FILE = "coco-val2017-000000039769.jpg"
CLIP_TEXTS = ["a photo of a cat", "a photo of a dog"]
CLIP_LOGITS = [[24.5701, 19.3049]]  # logits_per_image = 100 (the checkpoint's exp(logit_scale)) × cosine
CLIP_ATOL, CLIP_RTOL = 1e-3, 1e-3  # torch.testing.assertclose(..., rtol=1e-3, atol=1e-3)
CLIP_LOGIT_SCALE = 100.0


def served(ctx: Context) -> tuple[np.ndarray, np.ndarray] | None:
    image = ctx.fetch(CLIP_IMAGE_URL, CLIP_IMAGE_FILE)
    if image is None:
        return None
    return embed_images(ctx.client, [image]), embed_texts(ctx.client, CLIP_TEXTS)[0]


def judge(image: np.ndarray, texts: np.ndarray, tol: Tolerance) -> list[Check]:
    logits = CLIP_LOGIT_SCALE * (np.asarray(image, np.float64) @ np.asarray(texts, np.float64).T)
    bound = (CLIP_ATOL + CLIP_RTOL * np.abs(np.asarray(CLIP_LOGITS))) * tol.scale
    return [close("clip", "published: transformers CLIP integration test, two cats (logits_per_image)", logits,
                   CLIP_LOGITS, bound)]


def run(ctx: Context) -> list[Check]:
    out = served(ctx)
    if out is None:
        return [unavailable("clip", "published: transformers CLIP integration test, two cats", CLIP_IMAGE_URL,
                            CLIP_IMAGE_FILE, ctx)]
    return judge(*out, ctx.tol)
