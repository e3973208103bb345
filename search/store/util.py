"""Helpers the backends share."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from qdrant_client import models


def disk_usage(path: Path) -> int:
    """Bytes allocated under ``path`` (like ``du``); files that vanish meanwhile are skipped."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def plain_points(points: list[models.PointStruct]) -> list[models.PointStruct]:
    """``points`` with their array vectors as lists, which qdrant-client's models serialize (the
    ingest keeps vectors as float32 arrays until they are written)."""
    return [p.model_copy(update={"vector": plain_vector(p.vector)}) for p in points]


def plain_vector(v):
    if isinstance(v, dict):
        return {k: x.tolist() if isinstance(x, np.ndarray) else x for k, x in v.items()}
    return v.tolist() if isinstance(v, np.ndarray) else v
