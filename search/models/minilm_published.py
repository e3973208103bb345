"""all-MiniLM-L6-v2's published answers: the publisher's example, checked against the served model when the build came from
that checkpoint (``search.models.published``, docs/verify.md). ``served`` asks the live ensembles,
``judge`` compares with the published numbers (a pure function the tests feed)."""

from __future__ import annotations

import numpy as np

from search.models.minilm import embed
from search.models.published import Context, close
from search.models.verify import Check, Tolerance

# -- all-MiniLM-L6-v2: sentence-transformers' quickstart (README.md, docs/quickstart.rst)
MINILM_SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
MINILM_SIMILARITY = [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]
MINILM_ATOL = 1e-3  # printed to 4 decimals


def served(ctx: Context) -> np.ndarray:
    vectors, _ = embed(ctx.client, MINILM_SENTENCES)
    return vectors


def judge(vectors: np.ndarray, tol: Tolerance) -> list[Check]:
    sim = np.asarray(vectors, np.float64) @ np.asarray(vectors, np.float64).T
    return [close("minilm", "published: sentence-transformers quickstart similarity (3×3)", sim, MINILM_SIMILARITY,
                   MINILM_ATOL * tol.scale)]


def run(ctx: Context) -> list[Check]:
    return judge(served(ctx), ctx.tol)
