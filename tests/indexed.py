"""One ingest shared by the tests of a module that only read the index: the module builds it once
(ingesting the same folder in every test cost ~10-15 s each) and each test gets its own copy of the
data dir, so a test still cannot see another's changes."""

from __future__ import annotations

import errno
import os
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
    shutil.copytree(settings.data_dir, data_dir, copy_function=copy_sparse)
    return settings.model_copy(update={"data_dir": data_dir})


def copy_sparse(src: str, dst: str) -> None:
    """``shutil.copy2`` that keeps the file's holes. The embedded store preallocates its files: a
    store of the sample docs holds ~80 MB on disk in 413 MB of files, and a plain copy writes all of
    it (~40 copies wrote 16 GB in one run here)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size, at = os.fstat(fi.fileno()).st_size, 0
        while at < size:
            try:
                start = os.lseek(fi.fileno(), at, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: only a hole is left
                    raise
                break
            end = os.lseek(fi.fileno(), start, os.SEEK_HOLE)
            while start < end:
                chunk = os.pread(fi.fileno(), min(end - start, 1 << 20), start)
                if not chunk:  # the file shrank under us
                    break
                start += os.pwrite(fo.fileno(), chunk, start)
            at = end
        fo.truncate(size)
    shutil.copystat(src, dst)


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
