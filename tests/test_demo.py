"""scripts/demo.sh as a new user runs it, in its own data dir, model repository and ports: with CLIP
served (the tiny test CLIP standing in for the real one, through SEARCH_CLIP_SOURCE) it indexes the
sample photos and shows text-to-image and image-to-image results; without CLIP it says how to
supply it, in one line, and skips the photos. Either way it verifies the served models."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from search.config import PROJECT_ROOT
from search.models import CLIP, MiniLM
from search.triton.local import free_ports

PHOTOS = PROJECT_ROOT / "samples" / "photos"


def test_sample_photos_are_small_and_licensed():
    files = sorted(PHOTOS.glob("*.jpg"))
    readme = (PHOTOS / "README.md").read_text()
    assert len(files) == 12
    for f in files:
        assert f.stat().st_size <= 100_000, f.name
        assert f"`{f.name}`" in readme, f"{f.name} has no licence line"
    assert "CC0" in readme and "public domain" in readme


def demo_repo(model_repo: Path, dest: Path, families) -> Path:
    """The checkout's configs, with the given families' built files from the session's repository."""
    shutil.copytree(PROJECT_ROOT / "triton_repo", dest, ignore=shutil.ignore_patterns("*.onnx", "golden.npz", "build.json"))
    for fam in families:
        for name in fam.triton_models:
            shutil.rmtree(dest / name)
            shutil.copytree(model_repo / name, dest / name)
    return dest


def run_demo(env: dict) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "demo.sh")], env=env, capture_output=True,
                              text=True, timeout=900)
    finally:
        subprocess.run(["search", "triton", "down"], env=env, capture_output=True, timeout=120)
    return proc, time.monotonic() - started


@pytest.fixture
def demo_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "QDRANT_URL"}
    http, grpc, metrics = free_ports(3)
    env.update(SEARCH_DEMO_BOOTSTRAP="0", HF_HUB_OFFLINE="1", SEARCH_DATA_DIR=str(tmp_path / "data"),
               SEARCH_TRITON_HTTP_PORT=str(http), SEARCH_TRITON_GRPC_PORT=str(grpc),
               SEARCH_TRITON_METRICS_PORT=str(metrics), PATH=f"{PROJECT_ROOT / '.venv' / 'bin'}:{env['PATH']}")
    return env


def test_demo_shows_photos_when_clip_is_served(model_repo, tmp_path, demo_env):
    repo = demo_repo(model_repo, tmp_path / "triton_repo", [MiniLM(), CLIP()])
    tiny_clip = CLIP().built_from(repo)  # the tiny CLIP's folder: the build is "up to date" from it
    env = {**demo_env, "SEARCH_TRITON_REPO": str(repo), "SEARCH_CLIP_SOURCE": tiny_clip}
    proc, _ = run_demo(env)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "clip: up to date" in out and "verified: the expected answers from minilm, clip" in out
    assert "reset-password.md" in out
    assert "indexing samples/photos (CLIP is served)" in out and "12 indexed, 0 updated, 0 unchanged, 0 failed" in out, out[-2500:]
    for query in ('search --images "a cat lying down"', 'search --images "a rocket launch"'):
        block = out.split(query, 1)[1].split("$ search", 1)[0]
        assert len(re.findall(r"^\d\. ", block, re.M)) == 3, block  # three photos each (the tiny CLIP is random)
        assert "samples/photos/" in block
    like = out.split("search --like samples/photos/coffee-cup.jpg", 1)[1]
    assert like.splitlines()[1].startswith("1. 1.000") and "coffee-cup.jpg" in like.splitlines()[1]
    assert "CLIP missing" not in out


def test_demo_without_clip_says_how_to_supply_it(model_repo, tmp_path, demo_env):
    repo = demo_repo(model_repo, tmp_path / "triton_repo", [MiniLM()])
    proc, seconds = run_demo({**demo_env, "SEARCH_TRITON_REPO": str(repo)})
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "clip: missing weights" in out and "verified: the expected answers from minilm" in out
    missing = [ln for ln in out.splitlines() if ln.startswith("CLIP missing")]
    assert len(missing) == 1 and "--clip-source" in missing[0]
    assert "search --images" not in out and "indexing samples/photos" not in out
    print(f"offline demo (MiniLM already built): {seconds:.0f} s")
