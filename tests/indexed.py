"""One ingest shared by the tests of a module that only read the index: the module builds it once
(ingesting the same folder in every test cost ~10-15 s each) and each test gets its own copy of the
data dir, so a test still cannot see another's changes."""

from __future__ import annotations

import shutil
from pathlib import Path

from search.config import Settings


def settings_for(data_dir: Path, model_repo: Path, grpc_port: int) -> Settings:
    """What conftest's `settings` fixture gives, for fixtures wider than one test."""
    # qdrant_url given as None: an init value wins over a QDRANT_URL left in the environment.
    return Settings(data_dir=data_dir, triton_repo=model_repo, triton_url=f"127.0.0.1:{grpc_port}",
                    search_mode="semantic", qdrant_url=None)


def copy_index(settings: Settings, data_dir: Path) -> Settings:
    """``settings`` on a copy of its data dir (the store must be closed)."""
    shutil.copytree(settings.data_dir, data_dir)
    return settings.model_copy(update={"data_dir": data_dir})
