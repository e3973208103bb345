"""triton_repo/ as Triton (and the official container) reads it: every config parses as a
ModelConfig, ensembles wire existing steps and tensors, ONNX models use the standard platform."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from search.config import PROJECT_ROOT
from search.models import FAMILIES, WeightsUnavailable
from search.models.base import resolve_weights

REPO = PROJECT_ROOT / "triton_repo"
CONFIGS = sorted(REPO.glob("*/config.pbtxt"))


def load(path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_config_parses_and_names_its_folder(path):
    cfg = load(path)
    assert cfg.name == path.parent.name
    assert (path.parent / "1").is_dir()
    if cfg.platform == "ensemble":
        return
    assert cfg.backend == "python" or cfg.platform == "onnxruntime_onnx"
    if cfg.backend == "python":
        assert (path.parent / "1" / "model.py").exists()
    assert cfg.max_batch_size > 0 and cfg.HasField("dynamic_batching")


def test_ensembles_wire_existing_steps_and_tensors():
    configs = {p.parent.name: load(p) for p in CONFIGS}
    for name, cfg in configs.items():
        if cfg.platform != "ensemble":
            continue
        available = {i.name for i in cfg.input}
        for step in cfg.ensemble_scheduling.step:
            sub = configs[step.model_name]
            assert cfg.max_batch_size <= sub.max_batch_size
            assert set(step.input_map) == {i.name for i in sub.input}, (name, step.model_name)
            assert set(step.input_map.values()) <= available, (name, step.model_name)
            assert set(step.output_map) <= {o.name for o in sub.output}
            available |= set(step.output_map.values())
        assert {o.name for o in cfg.output} <= available


def test_catalogue_matches_the_repository():
    names = {p.parent.name for p in CONFIGS}
    for fam in FAMILIES:
        assert set(fam.triton_models) <= names


def test_weight_sources(tmp_path, monkeypatch):
    assert resolve_weights(str(tmp_path), "minilm", "x/y") == tmp_path.resolve()
    with pytest.raises(WeightsUnavailable, match="not a model directory"):
        resolve_weights(str(tmp_path / "missing"), "minilm", "x/y")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailable, match="--minilm-source /path/to/model-dir"):
        resolve_weights("sentence-transformers/all-MiniLM-L6-v2", "minilm", "sentence-transformers/all-MiniLM-L6-v2")


def test_models_build_reports_unreachable_weights(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SEARCH_TRITON_REPO": str(tmp_path), "SEARCH_DATA_DIR": str(tmp_path / "d")}
    proc = subprocess.run([sys.executable, "-m", "search", "models", "build", "--minilm-source", "someone/some-model"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "missing weights" in proc.stdout and "--minilm-source" in proc.stdout
    assert not any(tmp_path.rglob("*.onnx"))
