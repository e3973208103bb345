"""Exponential backoff with jitter, for the calls that ride out a busy or restarting server (Triton,
a Qdrant server): waits double from the first, up to a cap, and half of each is random so that the
calls one stall failed together do not all come back at once."""

from __future__ import annotations

import random

FIRST_S, MAX_S = 0.25, 8.0


def backoff_s(attempt: int, first_s: float = FIRST_S, max_s: float = MAX_S) -> float:
    """The wait after failed try number ``attempt`` (1 for the first)."""
    step = min(max_s, first_s * 2 ** max(attempt - 1, 0))
    return step / 2 + random.uniform(0, step / 2)
