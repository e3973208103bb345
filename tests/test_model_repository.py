"""triton_repo/ as Triton (and the official container) reads it: every config parses as a
ModelConfig, ensembles wire existing steps and tensors, ONNX models use the standard platform."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from search.config import PROJECT_ROOT, Settings
from search.models import FAMILIES, WeightsUnavailable, family, for_kind, ingest_kinds
from search.models.export.common import resolve_weights

REPO = PROJECT_ROOT / "triton_repo"
CONFIGS = sorted(REPO.glob("*/config.pbtxt"))
# Per-device variants: `tritonserver --model-config-name=gpu` loads <model>/configs/gpu.pbtxt where
# it exists and config.pbtxt elsewhere (docker-compose.yml); config.pbtxt is the CPU setup.
VARIANTS = sorted(REPO.glob("*/configs/*.pbtxt"))
GPU = sorted(REPO.glob("*/configs/gpu.pbtxt"))


def load(path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def model_dir(path):
    return path.parent if path.name == "config.pbtxt" else path.parent.parent


def effective(variant: str | None) -> dict[str, mc.ModelConfig]:
    """What Triton loads per model with --model-config-name=variant (None: config.pbtxt)."""
    out = {}
    for path in CONFIGS:
        chosen = path.parent / "configs" / f"{variant}.pbtxt" if variant else path
        out[path.parent.name] = load(chosen if chosen.exists() else path)
    return out


@pytest.mark.parametrize("path", CONFIGS + VARIANTS, ids=lambda p: str(p.relative_to(REPO)))
def test_config_parses_and_names_its_folder(path):
    cfg = load(path)
    assert cfg.name == model_dir(path).name
    path = model_dir(path) / "config.pbtxt"
    assert (path.parent / "1").is_dir()
    if cfg.platform == "ensemble":
        return
    assert cfg.backend == "python" or cfg.platform == "onnxruntime_onnx"
    if cfg.backend == "python":
        assert (path.parent / "1" / "model.py").exists()
    assert cfg.max_batch_size > 0 and cfg.HasField("dynamic_batching")


@pytest.mark.parametrize("variant", [None, "gpu"], ids=["config.pbtxt", "gpu"])
def test_ensembles_wire_existing_steps_and_tensors(variant):
    configs = effective(variant)
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


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.family)
def test_family_declares_what_its_consumers_iterate(fam):
    assert family(fam.family) is fam
    assert fam.source_setting in Settings.model_fields and fam.source(Settings()) == getattr(Settings(), fam.source_setting)
    assert fam.cli_option == "--" + fam.source_setting.replace("_", "-") and fam.source_help and fam.display
    assert set(fam.kinds) <= set(ingest_kinds()) and set(fam.kinds.values()) <= set(fam.ensembles)
    assert all(v.kind in ("dense", "sparse", "multivector") and not (v.kind == "sparse" and v.dim)
               for v in fam.vectors.values())
    assert bool(fam.vectors) == bool(fam.kinds)  # vectors are stored by the ingest kinds that use the family
    assert importlib.util.find_spec(fam.export_module) is not None


def test_each_kind_has_one_family_it_needs():
    for kind in ingest_kinds():
        assert [f.optional for f in for_kind(kind)][:1] == [False]
    assert [f.family for f in for_kind("documents")] == ["minilm", "bge_m3"]
    assert [f.family for f in for_kind("images")] == ["clip"]


def test_serving_code_does_not_import_the_export_stack():
    """The family modules are client code: torch, transformers and onnx load only in a build."""
    modules = ["search.models", *(f"search.models.{f.family}" for f in FAMILIES)]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\n" \
           "print(sorted(m for m in ('torch', 'transformers', 'onnx') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


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
    assert not any(p for step in family("minilm").steps for p in (tmp_path / step).rglob("*.onnx"))  # offline ones may build


# -- the GPU variants, checked structurally (no GPU here; the served check is in test_deploy.py)
def _trt_profile(value: str) -> dict[str, list[int]]:
    """'input_ids:1x1,attention_mask:1x1' -> {'input_ids': [1, 1], ...}"""
    return {name: [int(d) for d in dims.split("x")] for name, dims in (p.split(":") for p in value.split(","))}


def _tokenizer_max_length(model: str, configs: dict[str, mc.ModelConfig]) -> int | None:
    """The max_length parameter of the step that feeds ``model`` in an ensemble, if it has one."""
    for cfg in configs.values():
        steps = list(cfg.ensemble_scheduling.step)
        for before, step in zip(steps, steps[1:]):
            if step.model_name == model and "max_length" in configs[before.model_name].parameters:
                return int(configs[before.model_name].parameters["max_length"].string_value)
    return None


SESSION_SETTINGS = {"intra_op_thread_count", "inter_op_thread_count", "execution_mode", "enable_mem_arena",
                    "enable_mem_pattern"}  # what Triton's onnxruntime backend reads from parameters
CUDA_SETTINGS = {"cudnn_conv_algo_search", "arena_extend_strategy"}  # its CUDA execution provider's (GPU configs only)


def strip_session(parameters) -> dict:
    return {k: v for k, v in dict(parameters).items() if k not in SESSION_SETTINGS | CUDA_SETTINGS}


def test_cpu_session_settings_are_the_backends_own():
    """The onnxruntime models' parameters are settings the real backend reads (the local stand-in
    reads the same ones): a misspelt key would be ignored silently by both."""
    for path in CONFIGS:
        cfg = load(path)
        if cfg.platform == "onnxruntime_onnx":
            assert set(cfg.parameters) <= SESSION_SETTINGS, path
            threads = int(cfg.parameters["intra_op_thread_count"].string_value) if "intra_op_thread_count" in cfg.parameters else 0
            instances = sum(g.count for g in cfg.instance_group)
            assert threads * instances <= 2 or threads == 0, f"{path}: more threads than the 2-core machines have"


def test_every_onnx_model_has_a_gpu_variant():
    onnx = {p.parent.name for p in CONFIGS if load(p).platform == "onnxruntime_onnx"}
    assert onnx <= {p.parent.parent.name for p in GPU}, "add configs/gpu.pbtxt (see docs/deploy.md)"


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.parent.parent.name)
def test_gpu_variant(path):
    gpu, cpu = load(path), load(path.parent.parent / "config.pbtxt")
    # Same model to its callers: tensors, platform/backend and parameters are config.pbtxt's, but
    # for onnxruntime's session settings (threads, memory), which are per device.
    assert (gpu.platform, gpu.backend) == (cpu.platform, cpu.backend)
    assert list(gpu.input) == list(cpu.input) and list(gpu.output) == list(cpu.output)
    assert strip_session(gpu.parameters) == strip_session(cpu.parameters)
    assert cpu.instance_group and all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in cpu.instance_group)
    # Batching: at least the CPU limits, preferred sizes within the limit, a short queue delay.
    assert gpu.max_batch_size >= cpu.max_batch_size
    db = gpu.dynamic_batching
    assert gpu.HasField("dynamic_batching") and 0 < db.max_queue_delay_microseconds <= 10_000
    assert all(0 < b <= gpu.max_batch_size for b in db.preferred_batch_size)
    kinds = {g.kind for g in gpu.instance_group}
    if gpu.backend == "python":  # pre/post-processing stays on the CPU, with more instances
        assert kinds == {mc.ModelInstanceGroup.KIND_CPU}
        assert sum(g.count for g in gpu.instance_group) > sum(g.count for g in cpu.instance_group)
        assert not gpu.optimization.execution_accelerators.gpu_execution_accelerator
        return
    assert gpu.platform == "onnxruntime_onnx" and kinds == {mc.ModelInstanceGroup.KIND_GPU}
    accelerators = list(gpu.optimization.execution_accelerators.gpu_execution_accelerator)
    assert [a.name for a in accelerators] in ([], ["tensorrt"])  # [] = the CUDA EP alone
    if not accelerators:
        return
    trt = dict(accelerators[0].parameters)
    assert trt["precision_mode"] == "FP16" and trt["trt_engine_cache_enable"] == "1"
    assert trt["trt_engine_cache_path"] == f"/engine_cache/{gpu.name}"  # the trt_cache volume, one folder per model
    # One profile spanning every shape the model is sent: batch 1..max_batch_size, fixed dims as
    # declared, variable dims up to the tokenizer's max_length.
    lo, opt, hi = (_trt_profile(trt[f"trt_profile_{k}_shapes"]) for k in ("min", "opt", "max"))
    assert set(lo) == set(opt) == set(hi) == {i.name for i in gpu.input}
    max_length = _tokenizer_max_length(gpu.name, effective("gpu"))
    for tensor in gpu.input:
        assert lo[tensor.name][0] == 1 and hi[tensor.name][0] == gpu.max_batch_size
        assert all(a <= b <= c for a, b, c in zip(lo[tensor.name], opt[tensor.name], hi[tensor.name]))
        for i, dim in enumerate(tensor.dims, start=1):
            if dim == -1:
                assert max_length and hi[tensor.name][i] >= max_length, (tensor.name, max_length)
            else:
                assert lo[tensor.name][i] == hi[tensor.name][i] == dim


def test_bge_m3_runs_on_the_cuda_ep_without_tensorrt():
    """8192-token inputs: no TensorRT profile (see the comment in its gpu.pbtxt and docs/deploy.md)."""
    cfg = load(REPO / "bge_m3_onnx" / "configs" / "gpu.pbtxt")
    assert not cfg.optimization.execution_accelerators.gpu_execution_accelerator
    assert {g.kind for g in cfg.instance_group} == {mc.ModelInstanceGroup.KIND_GPU}
