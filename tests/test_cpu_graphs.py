"""The CPU graphs (model.cpu.onnx: onnxruntime's transformer fusions, opt-in int8) next to the
exported graphs (model.onnx, checked against PyTorch; the GPU configs serve them): what the CPU
configs serve, that the fused graphs give the exported graphs' outputs on fresh inputs, and the
precision rules of `search models build` (int8 measured for MiniLM only, recorded, shown)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import typer
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from search.config import PROJECT_ROOT
from search.models import CLIP, FAMILIES, Int8Quality, MiniLM, family
from search.models.base import INT8_MIN_COSINE, INT8_TOLERANCE
from search.models.export import clip as clip_export
from search.models.export import clip_weights, common
from search.models.export.common import MIN_GAIN, agreement, sha256
from search.models.minilm import package_weights
from search.models.verify import TOLERANCES
from search.triton.local import LocalTriton

REPO = PROJECT_ROOT / "triton_repo"
ONNX_MODELS = {"minilm_onnx": "minilm", "clip_visual": "clip", "clip_textual": "clip", "bge_m3_onnx": "bge_m3"}
MICROSOFT_FUSED = {"Attention", "SkipLayerNormalization", "BiasGelu", "QuickGelu", "EmbedLayerNormalization"}


def config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


@pytest.mark.parametrize("model", sorted(ONNX_MODELS))
def test_cpu_configs_serve_the_cpu_graph_and_gpu_configs_the_exported_one(model):
    assert config(REPO / model / "config.pbtxt").default_model_filename == "model.cpu.onnx"
    assert config(REPO / model / "configs" / "gpu.pbtxt").default_model_filename in ("", "model.onnx")


def inputs(model: str, repo: Path) -> list[dict]:
    """Fresh inputs (not the export's check inputs): padded batches, one row, long rows."""
    rng = np.random.default_rng(123)
    if model == "clip_visual":
        return [{"pixel_values": rng.normal(size=(2, 3, 224, 224)).astype(np.float32)}]
    if model == "clip_textual":
        text = json.loads((repo / "clip_text_tokenize/1/text.json").read_text())
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(repo / "clip_text_tokenize/1/tokenizer.json"))
        texts = ["a photo of a cat", "a cup of coffee on a table", " ".join(["cat"] * 75), "snow " * 90, ""]
        ids, mask = clip_export.tokenize(tok, text, texts)
        return [{"input_ids": ids, "attention_mask": mask}, *clip_export.trimmed(ids, mask)]
    vocab = 1000 if model == "bge_m3_onnx" else 29000
    out = []
    for batch, length in ((3, 17), (1, 2), (2, 200)):
        ids = rng.integers(5, vocab, (batch, length), dtype=np.int64)
        mask = np.ones_like(ids)
        if batch > 1:
            mask[0, length // 3:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask}
        if model == "minilm_onnx":
            feeds["token_type_ids"] = np.zeros_like(ids)
        out.append(feeds)
    return out


PACKED = {"minilm_onnx", "clip_textual"}  # the models whose export adds a packed graph (search.models.export.packed)


@pytest.mark.parametrize("model", sorted(ONNX_MODELS))
def test_cpu_graph_is_the_fastest_of_its_candidates_and_equals_the_exported_graph(model_repo, model, tmp_path):
    folder = model_repo / model / "1"
    manifest = family(ONNX_MODELS[model]).manifest(model_repo)
    cpu = manifest["cpu_graph"][model] if ONNX_MODELS[model] == "clip" else manifest["cpu_graph"]
    assert cpu["precision"] == manifest["precision"] == "fp32" and cpu["fused_vs_exported_min_cosine"] >= 0.9999
    kinds = {"exported", "fused"} | ({"packed"} if model in PACKED else set())
    assert cpu["fused_ops"] and set(cpu["cpu_ms_per_run"]) == kinds
    gains = {k: cpu[f"{k}_gain"] for k in kinds - {"exported"}}
    best = max(gains, key=gains.get)
    assert cpu["served"] == (best if gains[best] >= MIN_GAIN else "exported")
    if model in PACKED:
        assert cpu["packed_vs_exported_min_cosine"] >= 0.9999
    served_graph = onnx.load(str(folder / "model.cpu.onnx"), load_external_data=False).graph
    served_ops = {n.op_type for n in served_graph.node if n.domain == "com.microsoft"}
    assert bool(served_ops & MICROSOFT_FUSED) == (cpu["served"] == "fused"), served_ops
    assert ("NonZero" in {n.op_type for n in served_graph.node}) == (cpu["served"] == "packed")
    # The fused graph, served or not, gives the exported graph's outputs on fresh inputs; so does the served one.
    from search.models.export.common import Fusion, _fuse

    fused = tmp_path / "fused.onnx"
    assert _fuse(folder / "model.onnx", fused, Fusion(cpu["fusion"], *_shape(model_repo, model)), False) == cpu["fused_ops"]
    feeds = inputs(model, model_repo)
    run = {name: [ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, f) for f in feeds]
           for name, path in (("exported", folder / "model.onnx"), ("cpu", folder / "model.cpu.onnx"), ("fused", fused))}
    assert agreement(run["exported"], run["cpu"]) >= 0.9999 and agreement(run["exported"], run["fused"]) >= 0.9999


def test_a_graph_chosen_on_a_busy_machine_says_so(monkeypatch):
    """CPU time does not shield the build's timing from other work (a packed graph timed at 0.99x
    beside an xz job, 1.11-1.36x quiet): a build timed above one runnable task per CPU says so."""
    monkeypatch.setattr(common.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(common.os, "getloadavg", lambda: (3.14, 1.0, 0.5))
    assert common.busy_load() == 3.14
    cpu = {"precision": "fp32", "served": "exported", "fused_ops": {}, "packed_gain": 0.992, "timed_under_load": 3.14}
    line = common.describe_cpu_graph(cpu, "")
    assert "exported graph served" in line and "busy (load average 3.14 on 2 CPUs)" in line and "--force" in line
    monkeypatch.setattr(common.os, "getloadavg", lambda: (1.9, 1.0, 0.5))
    assert common.busy_load() is None
    del cpu["timed_under_load"]
    assert "busy" not in common.describe_cpu_graph(cpu, "")


def test_the_packed_minilm_graph_equals_the_padded_one_on_every_padding(model_repo, tmp_path):
    """The packed graph (real tokens only) against the exported padded graph, served or not: rows
    of every length in one batch, a batch without padding, one token, 256 tokens, one text."""
    from search.models.export.minilm import export_onnx

    packed = tmp_path / "packed.onnx"
    assert export_onnx(package_weights(), packed, packed=True) < 1e-4  # against PyTorch's padded model
    rng = np.random.default_rng(7)
    feeds = []
    for lengths in ([1, 5, 17, 40, 3, 40], [12, 12, 12], [1], [256, 2], [9]):
        mask = (np.arange(max(lengths)) < np.array(lengths)[:, None]).astype(np.int64)
        ids = rng.integers(1000, 29000, mask.shape, dtype=np.int64) * mask
        ids[:, 0] = 101
        feeds.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    run = {name: [ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, f) for f in feeds]
           for name, path in (("exported", model_repo / "minilm_onnx/1/model.onnx"), ("packed", packed))}
    assert agreement(run["exported"], run["packed"]) >= 0.99999
    for ref, got in zip(run["exported"], run["packed"]):
        assert np.abs(ref[0] - got[0]).max() < 1e-5


def test_the_packed_clip_text_graph_equals_the_padded_one_on_every_padding(model_repo, tmp_path):
    """The packed text graph (real tokens only; the last layer on the pooled token only) against the
    exported graph, served or not: the texts padded to the context (77 tokens, one truncated), each
    alone at its own length, rows of every length in one batch, the empty text."""
    loaded = clip_export.load_transformers(model_repo.parent / "tiny-clip")
    packed = tmp_path / "packed.onnx"
    assert clip_export.packed_textual(loaded)(packed) < 1e-4  # against transformers' model, padded to 77
    texts = ["a photo of a cat", "", "two dogs playing in the snow " * 20, "a red car", "people on the beach at sunset",
             "a bowl of fruit on a wooden table next to a window"]
    ids, mask = clip_export.tokenize(loaded.tokenizer, loaded.text, texts)
    lengths = mask.sum(axis=1)
    assert lengths.max() == ids.shape[1] == 77 and len(set(lengths)) == len(texts)
    feeds = [{"input_ids": ids, "attention_mask": mask}, *clip_export.trimmed(ids, mask)]
    keep = lengths < 77
    feeds.append({"input_ids": ids[keep, :lengths[keep].max()], "attention_mask": mask[keep, :lengths[keep].max()]})
    run = {name: [ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, f) for f in feeds]
           for name, path in (("exported", model_repo / "clip_textual/1/model.onnx"), ("packed", packed))}
    assert agreement(run["exported"], run["packed"]) >= 0.99999
    for ref, got in zip(run["exported"], run["packed"]):
        assert np.abs(ref[0] - got[0]).max() < 1e-5


def test_the_clip_text_graphs_are_timed_on_queries_alone_and_batched_at_different_lengths(model_repo):
    """The build's timing mix for a variable-length text graph: single queries at their own length,
    and requests of queries of different lengths padded to the longest (where a packed graph gains:
    a mix without padding served the exported graph under load)."""
    loaded = clip_export.load_transformers(model_repo.parent / "tiny-clip")
    loaded.text["variable_length"] = True  # what the build finds for this tower
    feeds = clip_export.query_timing(loaded)
    alone = [f for f in feeds if len(f["input_ids"]) == 1]
    together = [f for f in feeds if len(f["input_ids"]) > 1]
    assert len(alone) == 4 and all(f["attention_mask"].all() for f in alone)
    assert len(together) == 2 and sum(len(f["input_ids"]) for f in together) == len(clip_export.TIMING_QUERIES)
    for f in together:
        lengths = f["attention_mask"].sum(axis=1)
        assert lengths.max() == f["input_ids"].shape[1] and len(set(lengths.tolist())) > 1


def test_the_packed_clip_text_pools_as_the_model_does():
    """Pooled at argmax(input_ids) (configs with eos_token_id 2) or at the first end token: the same
    token where the end token has the highest id, as in CLIP's vocabularies; and the model's vector."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    from search.models.export.packed import PackedCausalText

    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig(text_config={**tower, "vocab_size": 100, "eos_token_id": 99, "bos_token_id": 98},
                                 vision_config={**tower, "image_size": 32, "patch_size": 16})).eval()
    ids = torch.tensor([[98, 5, 7, 99, 0, 0], [98, 3, 4, 5, 6, 99]])
    mask = (torch.arange(6) < torch.tensor([[4], [6]])).long()
    with torch.no_grad():
        first, argmax = (PackedCausalText(model, pooling, 99)(ids, mask) for pooling in ("first_eos", "argmax"))
        ref = clip_weights._features(model.get_text_features(input_ids=ids, attention_mask=mask))
    assert torch.allclose(first, argmax)
    assert torch.allclose(first, torch.nn.functional.normalize(ref, dim=-1), atol=1e-6)


def _shape(repo: Path, model: str) -> tuple[int, int]:
    """(heads, hidden) of the tested model, as the export passed them to the optimizer."""
    if model == "minilm_onnx":
        return 12, 384
    weights = Path(family(ONNX_MODELS[model]).manifest(repo)["weights"])
    cfg = json.loads((weights / "config.json").read_text())
    if model == "bge_m3_onnx":
        return cfg["num_attention_heads"], cfg["hidden_size"]
    tower = cfg["vision_config" if model == "clip_visual" else "text_config"]
    return tower["num_attention_heads"], tower["hidden_size"]


def test_minilm_fuses_every_layer(model_repo):
    ops = MiniLM().manifest(model_repo)["cpu_graph"]["fused_ops"]
    assert ops == {"EmbedLayerNormalization": 1, "Attention": 6, "BiasGelu": 6, "SkipLayerNormalization": 12}


# -- precision
def test_precisions_offered_per_family():
    offered = {f.family: {p: f.precision_status(p) for p in ("fp32", "int8")} for f in FAMILIES}
    assert offered == {"minilm": {"fp32": "reference", "int8": "measured"},
                       "clip": {"fp32": "reference", "int8": "unmeasured"},
                       "bge_m3": {"fp32": "reference", "int8": "unmeasured"},
                       "ofa": {"fp32": "reference", "int8": None},
                       "ppocr": {"fp32": "reference", "int8": None}}  # the published graphs, served as they are


def test_minilm_int8_figures_are_recorded_for_the_shipped_weights():
    q = MiniLM().int8_quality
    assert q is not None and q.within_tolerance() and set(q.figures) == set(INT8_TOLERANCE)
    assert q.weights_sha256 == sha256(package_weights() / "model.safetensors")
    assert "bench/quality_minilm.py" in q.measured_by


def test_int8_is_measured_only_within_tolerance():
    ok = Int8Quality("x", {"stsb_spearman": (86.72, 86.30), "msmarco_ndcg10": (79.8, 78.9)}, "test")
    assert ok.within_tolerance()
    assert not Int8Quality("x", {"stsb_spearman": (86.72, 86.1), "msmarco_ndcg10": (79.8, 79.8)}, "test").within_tolerance()
    assert not Int8Quality("x", {"stsb_spearman": (86.72, 86.7)}, "test").within_tolerance()  # a figure missing


def test_unoffered_and_unmeasured_precisions_are_refused(tmp_path):
    assert family("ofa").build(tmp_path, "anything", precision="int8").status == "refused"
    report = CLIP().build(tmp_path, "anything", precision="int8")
    assert report.status == "refused" and "--allow-unmeasured-int8" in report.detail
    assert not any(tmp_path.iterdir())


def test_precision_option_parses():
    from search.cli.models import parse_precision

    assert parse_precision("fp32") == ("fp32", {})
    assert parse_precision("int8") == ("int8", {})
    assert parse_precision("minilm=int8, clip=fp32") == ("fp32", {"minilm": "int8", "clip": "fp32"})
    for bad in ("fp16", "nobody=int8", "minilm=int4"):
        with pytest.raises(typer.BadParameter):
            parse_precision(bad)


def test_int8_minilm_is_built_recorded_listed_and_verified(model_repo, tmp_path):
    repo = tmp_path / "triton_repo"
    shutil.copytree(model_repo, repo, ignore=shutil.ignore_patterns("clip_*", "bge_m3*", "ofa_*"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SEARCH_TRITON_REPO": str(repo), "SEARCH_DATA_DIR": str(tmp_path / "d")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "search", "models", *args], env=env, capture_output=True, text=True,
                              timeout=600)

    fp32 = MiniLM().manifest(repo)
    built = cli("build", "--precision", "int8", "--clip-source", str(tmp_path / "no-clip"))
    assert built.returncode == 1, built.stdout + built.stderr  # the named CLIP folder is missing: exit 1 ...
    assert "minilm: built" in built.stdout and "int8 (measured)" in built.stdout  # ... but MiniLM was built
    manifest = MiniLM().manifest(repo)
    assert manifest["precision"] == "int8" and manifest["precision_status"] == "measured"
    assert manifest["files"]["minilm_onnx/1/model.onnx"] == fp32["files"]["minilm_onnx/1/model.onnx"]  # GPU graph: same
    graph = onnx.load(str(repo / "minilm_onnx/1/model.cpu.onnx"))
    assert {"DynamicQuantizeLinear", "MatMulInteger"} & {n.op_type for n in graph.graph.node}
    assert 0.95 <= manifest["cpu_graph"]["int8_vs_fp32_min_cosine"] < 1
    listed = cli("list")
    assert listed.returncode == 0 and "int8 (measured)" in listed.stdout, listed.stdout
    again = cli("build", "--precision", "minilm=int8")
    assert again.returncode == 0 and "minilm: up to date" in again.stdout
    # `search models verify` judges the served int8 graph against PyTorch's fp32 golden outputs at the int8 bounds
    server = LocalTriton(repo, tmp_path / "run", models=list(MiniLM().triton_models))
    server.start(timeout=120)
    try:
        env["SEARCH_TRITON_URL"] = f"127.0.0.1:{server.grpc_port}"
        verified = cli("verify", "minilm", "--json")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        (minilm,) = json.loads(verified.stdout)["families"]
        assert minilm["precision"] == "int8" and minilm["status"] == "pass"
        vectors = next(c for c in minilm["checks"] if c["check"].startswith("golden: text vectors"))
        assert vectors["bound"] == f">= {TOLERANCES['int8'].cosine}"
        assert TOLERANCES["int8"].cosine <= float(vectors["measured"].split()[2]) < TOLERANCES["fp32"].cosine  # int8 shows
    finally:
        server.stop()
    refused = cli("build", "--precision", "clip=int8")
    assert refused.returncode == 1 and "--allow-unmeasured-int8" in refused.stdout


def test_an_int8_build_timed_on_a_busy_machine_still_serves_a_graph_within_the_int8_bound(model_repo, tmp_path):
    """On a loaded machine the timing once picked the exported graph, whose int8 copy gave 0.977 on
    the check inputs and failed `search models verify` (0.979 < 0.98); the packed one's gives 0.983.
    Here the exported graph is made the fastest: the build must move on to a graph whose int8 copy
    meets the bound."""
    repo = tmp_path / "triton_repo"
    shutil.copytree(model_repo, repo, ignore=shutil.ignore_patterns("clip_*", "bge_m3*", "ofa_*"))
    program = ("import runpy, sys; import search.models.export.common as c; "
               "c.time_graphs = lambda graphs, feeds, rounds=3: {k: 1.0 if k == 'exported' else 2.0 for k in graphs}; "
               "sys.argv = ['search', 'models', 'build', '--precision', 'minilm=int8']; runpy.run_module('search', run_name='__main__')")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SEARCH_TRITON_REPO": str(repo), "SEARCH_DATA_DIR": str(tmp_path / "d")}
    built = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
    assert "minilm: built" in built.stdout, built.stdout + built.stderr
    cpu = MiniLM().manifest(repo)["cpu_graph"]
    tried = cpu.get("int8_tried_min_cosine", {cpu["served"]: cpu["int8_vs_fp32_min_cosine"]})  # one: it passed
    assert list(tried)[0] == "exported", cpu  # the fastest first
    good = [kind for kind, cos in tried.items() if cos >= INT8_MIN_COSINE]
    assert good and cpu["served"] == good[0] and list(tried)[-1] == good[0], cpu  # then no further than the first good one
    assert cpu["int8_vs_fp32_min_cosine"] == tried[cpu["served"]]
