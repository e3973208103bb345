"""Session fixtures: a model repository built by the project's own export code, and the real
local Triton server serving it on free ports. Nothing here is mocked."""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The umask every face sets once it opens a data dir (search/datadir.py): tests start from it, so a
# CLI run's output does not depend on whether an earlier test in this process opened one already
# (tests/test_datadir.py loosens it on purpose).
os.umask(0o077)

from indexed import copy_index, ingested, sample_docs, settings_for  # noqa: E402
from processes import serving  # noqa: E402
from store_helpers import BACKENDS, open_backend  # noqa: E402

from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import FAMILIES, Family, built_triton_models  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.services.relevance import MIN_POINTS  # noqa: E402
from search.store import DOCUMENTS  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402


def pytest_configure(config) -> None:
    LocalTriton.stop_with = os.getpid()  # a worker killed (for memory, by a hang guard) takes its Tritons along
    config.addinivalue_line("markers", "served(model): the model the module's `client` checks is loaded "
                                       "before each test (a clear error rather than every request failing)")


def _part(fam: Family) -> tuple[str, Callable[[Path, Path], None]]:
    """A family's part of the test repository: its tiny random model where tests/tiny_<family>.py
    makes one (tests only), else its real default weights (which must be reachable offline)."""
    if importlib.util.find_spec(f"tiny_{fam.family}") is not None:
        name = "tiny-" + fam.family.replace("_", "-")
        return name, lambda repo, shared: importlib.import_module(f"tiny_{fam.family}").build_into(repo, shared / name)

    def real(repo: Path, shared: Path) -> None:
        report = fam.build(repo, Settings.model_fields[fam.source_setting].default)
        assert report.status in ("built", "up to date"), report.detail  # a fresh clone always exports

    return fam.family, real


# Each family exports into its own folders of the repository, so the parts can be built at once.
# The real-weight one (~45 s of one core, mostly the timing of its candidate graphs) comes first.
_PARTS = dict(_part(fam) for fam in FAMILIES)


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    """A copy of triton_repo/ with MiniLM, a tiny random CLIP, BGE-M3 and OFA exported into it (the
    checkout stays untouched). Exported once per run: pytest-xdist's workers (scripts/test.sh runs
    two) share it; each part is built by the first worker to reach it while another builds a
    different part, and a worker waits for the parts others are building. Tests only read it.
    SEARCH_TEST_MODELS=DIR keeps the repository in DIR across runs (built there once): for running
    a few tests at a time while developing."""
    if kept := os.environ.get("SEARCH_TEST_MODELS"):
        return _build_parts(Path(kept))
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, which holds every worker's own
    return _build_parts(root / "models")


def _build_parts(shared: Path) -> Path:
    root = shared.parent
    root.mkdir(parents=True, exist_ok=True)
    repo = shared / "triton_repo"
    with _locked(root / "models.lock"):
        if not (shared / "copied").exists():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that failed half-way
            shutil.copytree(PROJECT_ROOT / "triton_repo", repo)
            (shared / "copied").touch()
    for wait in (False, True):  # first the parts nobody is building, then wait for the rest
        for name, build in _PARTS.items():
            with _locked(shared / f"{name}.lock", wait=wait) as held:
                if held and not (shared / f"{name}.built").exists():
                    build(repo, shared)  # a part that failed half-way is built again by the next to come
                    (shared / f"{name}.built").touch()
    return repo


@contextmanager
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """An exclusive lock on ``path`` between the test processes; without ``wait``, False if taken."""
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


@pytest.fixture(scope="session")
def triton(model_repo, tmp_path_factory) -> LocalTriton:
    # Free ports picked at start, and picked again if the other xdist worker binds one first.
    server = LocalTriton(model_repo, tmp_path_factory.mktemp("triton-run"), models=built_triton_models(model_repo))
    server.start(timeout=120)
    yield server
    if restarted := server.restarts():  # never silent: the run's warnings summary shows it
        warnings.warn(f"the session's Triton was started again {len(restarted)} time(s): {restarted} "
                      f"(log: {server.state.log})", stacklevel=1)
    server.stop()


@pytest.fixture
def settings(tmp_path, model_repo, triton, monkeypatch) -> Settings:
    for var in ("QDRANT_URL", "SEARCH_QDRANT_URL", "SEARCH_TRITON_URL", "SEARCH_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    # search_mode: the tiny BGE-M3 is random, so checks of what a query finds use MiniLM; tests of
    # the BGE-M3 modes (test_hybrid.py) ask for them by name.
    return settings_for(tmp_path / "data", model_repo, serving(triton).grpc_port)


@pytest.fixture
def docs(tmp_path) -> Path:
    """A writable copy of the sample knowledge base."""
    return sample_docs(tmp_path)


@pytest.fixture(scope="module")
def kb_index(model_repo, triton, tmp_path_factory) -> tuple[Settings, Path]:
    """The sample knowledge base, ingested once for the module (tests/indexed.py): its settings and
    its folder. Tests search their own copy of it (``kb``)."""
    root = tmp_path_factory.mktemp("sample-kb")
    docs = sample_docs(root)
    with ingested(root, model_repo, triton.grpc_port, [docs]) as (svc, _):
        assert svc.store.count(DOCUMENTS.name) >= MIN_POINTS  # enough points to calibrate relevance on
        return svc.settings, docs


@pytest.fixture
def kb(kb_index, tmp_path):
    """A service on this test's own copy of the ingested sample knowledge base."""
    svc = SearchService(copy_index(kb_index[0], tmp_path / "data"))
    yield svc
    svc.close()


@pytest.fixture
def service(settings):
    """A search service on this test's own empty data directory."""
    svc = SearchService(settings)
    yield svc
    svc.close()


@pytest.fixture
def env(settings) -> dict:
    """The environment a CLI subprocess of this test's settings runs with."""
    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1", "SEARCH_SEARCH_MODE": settings.search_mode}
    env.pop("COLUMNS", None)  # rich would take the width from it
    return env


@pytest.fixture
def client(triton, request) -> TritonClient:
    """A gRPC client of the session's Triton (the API's TestClient is ``api``, the OpenAI SDK's ``sdk``)."""
    c = TritonClient(f"127.0.0.1:{triton.grpc_port}")
    if (served := request.node.get_closest_marker("served")) and not c.model_ready(*served.args):
        pytest.fail(f"model {served.args[0]!r} is not loaded in the session's Triton (tests/conftest.py builds it)")
    return c


# -- the store contract's backends (tests/store_helpers.py)
@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def opener(backend, tmp_path):
    """The store contract's backends (tests/store_helpers.py): opens the backend's store (the same folder or server each time) with a test-unique prefix."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    opened = []

    def open_():
        s = open_backend(backend, tmp_path, prefix)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        if backend == "server":
            for c in s.collections():
                s.client.delete_collection(s.name(c))
        s.close()


@pytest.fixture
def store(opener):
    s = opener()
    s.ensure(DOCUMENTS)
    return s
