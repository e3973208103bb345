"""Where things are, without loading the settings machinery: the CLI's fast path through a running
server (search/owner.py) needs only the data dir, and pydantic-settings is slow to import."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = PROJECT_ROOT / ".data"


def _env(*names: str) -> str | None:
    """The first of ``names`` set in the environment, matched case-insensitively as pydantic-settings does."""
    lower = {k.lower(): v for k, v in os.environ.items()}
    return next((lower[n.lower()] for n in names if lower.get(n.lower())), None)


def data_dir(override: Path | None = None) -> Path:
    """As Settings resolves it: the flag, else SEARCH_DATA_DIR, else <project>/.data."""
    return Path(override) if override else Path(_env("SEARCH_DATA_DIR") or DEFAULT_DATA_DIR)


def qdrant_url(override: str | None = None) -> str | None:
    """As Settings resolves it: the flag, else SEARCH_QDRANT_URL, else QDRANT_URL."""
    return override or _env("SEARCH_QDRANT_URL", "QDRANT_URL")
