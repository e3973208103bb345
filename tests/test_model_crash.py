"""A model whose backend process dies: SIGKILL the real Python-backend stub of a model served by a
dedicated local Triton (the session server stays untouched), then check that the faces notice
(probe, status, `search triton status`), that the next request reloads the model instead of
needing `search triton down && search triton up`, and that a crash that cannot be reloaded is one
clear line and stops only the kind of file that needs the model. Nothing is mocked."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from ingest_helper import ingest
from PIL import Image
from processes import stubs

from search.api import create_app
from search.config import Settings
from search.models import CLIP, MiniLM
from search.services import SearchService
from search.triton.client import TritonClient
from search.triton.local import LocalTriton

MODELS = [*MiniLM().triton_models, *CLIP().triton_models]
DOCS = Path(__file__).resolve().parent.parent / "samples" / "docs"


@pytest.fixture(scope="module")
def crash_repo(model_repo, tmp_path_factory) -> Path:
    """MiniLM and CLIP copied from the session's repository: tests take a model file away."""
    repo = tmp_path_factory.mktemp("crash-models") / "triton_repo"
    for name in MODELS:
        shutil.copytree(model_repo / name, repo / name)
    return repo


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The data dir whose triton/ run dir holds the dedicated server's state (`search triton status`)."""
    return tmp_path_factory.mktemp("crash-home")


@pytest.fixture(scope="module")
def server(crash_repo, home):
    srv = LocalTriton(crash_repo, home / "triton", models=MODELS)
    srv.start(timeout=120)
    yield srv
    srv.stop()


@pytest.fixture
def settings(tmp_path, crash_repo, server, monkeypatch) -> Settings:
    for var in ("QDRANT_URL", "SEARCH_QDRANT_URL", "SEARCH_TRITON_URL", "SEARCH_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    yield Settings(data_dir=tmp_path / "data", triton_repo=crash_repo,
                   triton_url=f"127.0.0.1:{server.grpc_port}", search_mode="semantic")
    # Leave the server whole for the next test, whatever this one did to it.
    client = TritonClient(f"127.0.0.1:{server.grpc_port}")
    for name, h in client.health().items():
        if not h.healthy:
            client.heal(name)


def kill_stub(server: LocalTriton, model: str) -> set[int]:
    """SIGKILL every stub of ``model`` (one per instance: minilm_query_onnx runs two)."""
    pids = set(stubs(server, model))
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids & set(stubs(server, model)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids & set(stubs(server, model))
    return pids


def cli(*args: str, module: str = "search") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "QDRANT_"))}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)


def flags(settings: Settings) -> list[str]:
    return ["--data-dir", str(settings.data_dir), "--triton-url", settings.triton_url]


def photo(path: Path, seed: int) -> Path:
    blocks = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(blocks).resize((160, 120), Image.NEAREST).save(path, "JPEG")
    return path


class ModelFileAway:
    """Takes the ONNX file of ``model`` away, so reloading the model fails (as after a bad deploy)."""

    def __init__(self, repo: Path, model: str) -> None:
        self.path = repo / model / "1" / "model.cpu.onnx"  # the graph config.pbtxt serves

    def __enter__(self):
        self.path.rename(self.path.with_suffix(".away"))

    def __exit__(self, *exc):
        self.path.with_suffix(".away").rename(self.path)


def test_probe_answers_for_every_served_ensemble(triton):
    health = TritonClient(f"127.0.0.1:{triton.grpc_port}").health()
    assert set(health) == {"minilm", "minilm_query", "clip_text", "clip_image", "bge_m3", "ofa_ve", "ppocr"}
    assert all(h.healthy for h in health.values()), health


def test_dead_minilm_is_reported_then_reloaded_by_the_next_search(server, settings, home):
    svc = SearchService(settings)
    try:
        assert ingest(svc, [DOCS]).counts["indexed"] == 17
        old = kill_stub(server, "minilm_query_onnx")  # the step a search's query runs on

        models = svc.status()["triton"]["models"]
        assert models["minilm_query"]["ready"] is True  # Triton's own flag does not notice
        assert models["minilm_query"]["healthy"] is False and "minilm_query_onnx" in models["minilm_query"]["reason"]
        assert models["minilm"]["healthy"] is True and models["clip_text"]["healthy"] is True
        shown = cli("--data-dir", str(home), "triton", "status")
        assert shown.returncode == 1 and "Traceback" not in shown.stderr
        [line] = [ln for ln in shown.stdout.splitlines() if ln.strip().startswith("minilm_query v")]
        assert "unhealthy" in line and "minilm_query_onnx" in line
        with TestClient(create_app(settings.model_copy(update={"data_dir": settings.data_dir / "api"}))) as api:
            ready = api.get("/readyz").json()
        assert ready["triton"]["models"]["minilm_query"] is False and ready["triton"]["models"]["clip_text"] is True
        assert "minilm_query_onnx" in ready["triton"]["unhealthy"]["minilm_query"]

        # No `search triton down && up`: the search itself reloads the dead step and is answered. The
        # API's way: the query awaited on Triton's asyncio client (the reload runs in a worker thread).
        encoded = asyncio.run(encode(svc, "I forgot my password"))
        hits = svc.search_documents("I forgot my password", top_k=3, encoded=encoded)
        assert hits and hits[0].path.endswith("reset-password.md")
        assert stubs(server, "minilm_query_onnx") and not old & set(stubs(server, "minilm_query_onnx"))
        assert svc.status()["triton"]["models"]["minilm_query"]["healthy"] is True

        # A second crash is reloaded too: Triton leaves a model whose config is unchanged as it is,
        # so each reload's config must be new (the first reload's, read back, was the loaded one).
        old = kill_stub(server, "minilm_query_onnx")
        hits = svc.search_documents("I forgot my password", top_k=3)
        assert hits and hits[0].path.endswith("reset-password.md")
        assert stubs(server, "minilm_query_onnx") and not old & set(stubs(server, "minilm_query_onnx"))
    finally:
        svc.close()
    assert cli("--data-dir", str(home), "triton", "status").returncode == 0


async def encode(svc: SearchService, query: str):
    try:
        return await svc.encode_query(query)
    finally:
        await svc.triton.aclose()


def test_a_crash_that_cannot_be_reloaded_is_one_line_and_stops_only_documents(server, settings, crash_repo, tmp_path):
    svc = SearchService(settings)
    assert ingest(svc, [DOCS]).counts["indexed"] == 17
    svc.close()
    folder = tmp_path / "new"
    for i in range(3):
        (folder / f"note-{i}.md").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nThe badge reader on floor {i} is broken again.\n")
    photo(folder / "a.jpg", 1), photo(folder / "b.jpg", 2)

    with ModelFileAway(crash_repo, "minilm_onnx"), ModelFileAway(crash_repo, "minilm_query_onnx"):
        kill_stub(server, "minilm_onnx")
        kill_stub(server, "minilm_query_onnx")  # queries go to the query deployment, batches to minilm_onnx
        found = cli(*flags(settings), "query", "reset password")
        assert found.returncode == 4 and "Traceback" not in found.stderr, found.stderr
        [line] = [ln for ln in found.stderr.splitlines() if ln.strip()]
        # the query deployment could not be reloaded, so the query went to `minilm`, which failed too
        assert line.startswith("error:") and "model 'minilm'" in line and "search triton down && search triton up" in line
        with TestClient(create_app(settings)) as api:
            r = api.post("/search/documents", json={"query": "reset password"})
        assert r.status_code == 503 and "'minilm" in r.json()["detail"], r.text

        svc = SearchService(settings)
        try:
            report = ingest(svc, [folder])
        finally:
            svc.close()
        assert list(report.stopped) == ["documents"] and "'minilm'" in report.stopped["documents"]
        assert report.failures == [], "a dead model is not the files' fault"
        assert report.unavailable["documents"][0] == 3
        assert report.counts["indexed"] == 2 and report.as_dict()["by_kind"] == {"images": 2}

        again = cli(*flags(settings), "ingest", str(folder), module="indexer")
        assert again.returncode == 4 and "Traceback" not in again.stderr + again.stdout, again.stderr
        assert "0 failed" in again.stdout and "not indexed 3 documents: stopped: model 'minilm'" in again.stdout

    # The file is back: the next request reloads the model, and the stopped files go in.
    svc = SearchService(settings)
    try:
        report = ingest(svc, [folder])
        assert report.counts["indexed"] == 3 and not report.stopped and not report.failures
        assert svc.search_documents("badge reader broken", top_k=1)[0].path.startswith(str(folder))
    finally:
        svc.close()


def test_dead_clip_visual_photos_are_indexed_after_a_reload_or_stopped_with_the_reason(server, settings, crash_repo, tmp_path):
    album = tmp_path / "album"
    for i in range(3):
        photo(album / f"p{i}.jpg", 10 + i)
    svc = SearchService(settings)
    try:
        kill_stub(server, "clip_visual")
        health = svc.status()["triton"]["models"]
        assert health["clip_image"]["healthy"] is False and "clip_visual" in health["clip_image"]["reason"]
        report = ingest(svc, [album])
        assert report.counts["indexed"] == 3 and not report.failures and not report.stopped
        assert len(svc.search_images("a photo", top_k=5)) == 3

        more = tmp_path / "more"
        photo(more / "q.jpg", 20), photo(more / "r.png", 21)
        (more / "trip.md").write_text("# Trip\n\nNotes from the trip to the coast.\n")
        with ModelFileAway(crash_repo, "clip_visual"):
            kill_stub(server, "clip_visual")
            report = ingest(svc, [more])
        assert list(report.stopped) == ["images"] and "'clip_image'" in report.stopped["images"]
        assert report.failures == [], "not 'rejected by the model server' for every photo"
        assert report.unavailable["images"][0] == 2
        assert report.as_dict()["by_kind"] == {"documents": 1}
        assert svc.store.count("images") == 3
    finally:
        svc.close()
