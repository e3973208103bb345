"""Helpers the backends share."""

from __future__ import annotations

import os
from pathlib import Path


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
