"""One ingest shared by the tests of a module that only read the index: the module builds it once
(ingesting the same folder in every test cost ~10-15 s each) and each test gets its own copy of the
data dir, so a test still cannot see another's changes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ingest_helper import ingest

from search.config import PROJECT_ROOT, Settings
from search.services import SearchService


def settings_for(data_dir: Path, model_repo: Path, grpc_port: int) -> Settings:
    """What conftest's `settings` fixture gives, for fixtures wider than one test."""
    # qdrant_url given as None: an init value wins over a QDRANT_URL left in the environment.
    return Settings(data_dir=data_dir, triton_repo=model_repo, triton_url=f"127.0.0.1:{grpc_port}",
                    search_mode="semantic", qdrant_url=None)


def copy_index(settings: Settings, data_dir: Path) -> Settings:
    """``settings`` on a copy of its data dir (the store must be closed)."""
    shutil.copytree(settings.data_dir, data_dir)
    return settings.model_copy(update={"data_dir": data_dir})


def sample_docs(root: Path) -> Path:
    """A writable copy of the sample knowledge base under ``root``."""
    return shutil.copytree(PROJECT_ROOT / "samples" / "docs", root / "kb")


@contextmanager
def ingested(root: Path, model_repo: Path, grpc_port: int, folders: list[Path]) -> Iterator[tuple[SearchService, object]]:
    """A service on ``root``/data with ``folders`` ingested, and the ingest's report; the store is
    closed on leaving, so copies can be taken."""
    svc = SearchService(settings_for(root / "data", model_repo, grpc_port))
    try:
        yield svc, ingest(svc, folders)
    finally:
        svc.close()
