"""The production deployment, as far as it can be checked without a Docker engine or a GPU:
docker-compose validates the compose file (Debian's docker-compose 1.29.2 works offline), the
images install what the served Python steps import, the one-shot export script fills a model
repository and lists what Triton must load, and the real local Triton serves the GPU variants
(configs/gpu.pbtxt, chosen with --model-config-name=gpu) with only the instance kind switched to
CPU, giving the same embeddings as config.pbtxt."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from search.config import PROJECT_ROOT
from search.models import bge_m3, built_triton_models, clip, minilm
from search.triton.client import TritonClient
from search.triton.local import LocalTriton

COMPOSE = PROJECT_ROOT / "docker-compose.yml"
DOCKER = PROJECT_ROOT / "docker"
LONG_RUNNING = ("triton", "qdrant", "api", "ui")


def docker_compose() -> str:
    """The docker-compose binary; installed with apt when it is missing and this may (scripts/test.sh does it too)."""
    found = shutil.which("docker-compose")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "docker-compose"]):
            subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        found = shutil.which("docker-compose")
    if not found:
        pytest.skip("docker-compose is not installed and cannot be installed here (apt-get install docker-compose)")
    return found


def compose(*args: str, file: Path = COMPOSE, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}, **(env or {})}
    return subprocess.run([docker_compose(), "-f", str(file), *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cluster_compose_file():
    """docker-compose.cluster.yml: a 3-node Qdrant cluster (p2p 6335, bootstrap, 2 copies of each
    shard, SEARCH_QDRANT_SHARDS shards), a Ray head and workers from the project image with Ray
    installed, 2 Triton replicas behind an nginx gRPC load balancer."""
    cluster = PROJECT_ROOT / "docker-compose.cluster.yml"
    proc = compose("config", "-q", file=cluster)
    assert proc.returncode == 0 and not proc.stdout, proc.stderr
    proc = compose("config", file=cluster, env={"SEARCH_QDRANT_SHARDS": "12"})
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    qdrants = [services[f"qdrant-{i}"] for i in (1, 2, 3)]
    assert all(q["environment"]["QDRANT__CLUSTER__ENABLED"] == "true" for q in qdrants)
    assert all(q["environment"]["QDRANT__CLUSTER__P2P__PORT"] == "6335" for q in qdrants)
    assert all("--bootstrap" in q["command"] for q in qdrants[1:]) and "--bootstrap" not in qdrants[0]["command"]
    head, worker = services["ray-head"], services["ray-worker"]
    for svc in (head, worker):
        assert svc["environment"]["SEARCH_QDRANT_SHARDS"] == "12"
        assert svc["environment"]["SEARCH_QDRANT_REPLICATION_FACTOR"] == "2"
        assert svc["environment"]["SEARCH_TRITON_URLS"] == "triton-1:8001,triton-2:8001"
        assert "scale" in svc["build"]["args"]["EXTRAS"]
    assert "ray start --head" in " ".join(head["command"]) and "--address=ray-head:6379" in " ".join(worker["command"])
    conf = (DOCKER / "triton-lb.conf").read_text()
    assert "grpc_pass" in conf and "triton-1:8001" in conf and "triton-2:8001" in conf
    assert services["api"]["environment"]["SEARCH_TRITON_URL"] == "triton-lb:8001"


@pytest.fixture(scope="module")
def services() -> dict:
    proc = compose("config")
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)["services"]


def test_compose_file_is_valid():
    proc = compose("config", "-q")
    assert proc.returncode == 0 and not proc.stdout, proc.stderr
    proc = compose("--env-file", str(DOCKER / "env.example"), "config", "-q")  # with the documented settings
    assert proc.returncode == 0 and not proc.stdout, proc.stderr


def test_compose_services(services):
    assert set(LONG_RUNNING) | {"models"} <= set(services)
    for name in LONG_RUNNING:
        svc = services[name]
        assert svc["restart"] == "unless-stopped", name
        assert svc["healthcheck"]["test"][0] == "CMD", name
    triton = services["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert triton["environment"]["TRITON_MODEL_CONFIG"] == "gpu"
    assert triton["depends_on"]["models"]["condition"] == "service_completed_successfully"
    assert ports(triton) == {8000, 8001, 8002}  # HTTP, gRPC, metrics
    assert "/v2/health/ready" in " ".join(triton["healthcheck"]["test"])
    assert volumes(triton)["/models"] == ("models", "ro")
    assert volumes(services["models"])["/models"] == ("models", "rw")
    assert volumes(triton)["/engine_cache"][0] == volumes(services["models"])["/engine_cache"][0] == "trt_cache"
    for name in ("api", "ui"):
        svc = services[name]
        assert svc["environment"]["SEARCH_TRITON_URL"] == "triton:8001"
        assert svc["environment"]["QDRANT_URL"] == "http://qdrant:6333"
        assert svc["depends_on"]["triton"]["condition"] == svc["depends_on"]["qdrant"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "/_stcore/health" in " ".join(services["ui"]["healthcheck"]["test"])
    assert services["api"]["environment"]["SEARCH_LOG_FORMAT"] == "json"
    qdrant = services["qdrant"]
    assert "/readyz" in " ".join(qdrant["healthcheck"]["test"])
    assert set(volumes(qdrant)) == {"/qdrant/storage", "/qdrant/snapshots"}
    assert ports(qdrant) == {6333, 6334}


def ports(svc: dict) -> set[int]:
    """Container ports, from docker-compose 1.29's short syntax ('127.0.0.1:8000:8000/tcp')."""
    return {int(str(p).split(":")[-1].split("/")[0]) for p in svc["ports"]}


def volumes(svc: dict) -> dict[str, tuple[str, str]]:
    """target -> (source, mode), from 'source:target[:mode]'."""
    out = {}
    for v in svc["volumes"]:
        source, target, *mode = v.split(":")
        out[target] = (source, mode[0] if mode else "rw")
    return out


def test_qdrant_image_matches_the_client():
    """Qdrant's rule: server and client share major.minor (storage moves one minor at a time): the
    pinned server, the client the app image installs and the client installed here agree."""
    image = yaml.safe_load(COMPOSE.read_text())["services"]["qdrant"]["image"]
    tag = re.fullmatch(r"qdrant/qdrant:v(\d+)\.(\d+)\.(\d+)", image)
    assert tag, f"pin an exact version: {image}"
    minor = tag.groups()[:2]
    assert minor == tuple(version("qdrant-client").split(".")[:2])
    pinned = re.search(r'"qdrant-client~=(\d+)\.(\d+)\.\d+"', (DOCKER / "app.Dockerfile").read_text())
    assert pinned and pinned.groups() == minor


def test_app_image_installs_the_tested_versions():
    """The app image installs the project under constraints.txt, as bootstrap.sh does for the suite:
    production runs the versions the tests passed with, not the newest of each range."""
    dockerfile = (DOCKER / "app.Dockerfile").read_text()
    assert re.search(r"^COPY .*\bconstraints\.txt\b.* \./$", dockerfile, re.M), "copy constraints.txt into the image"
    installs = [line for line in dockerfile.splitlines() if re.search(r"pip install .*-e ", line)]
    assert installs, "docker/app.Dockerfile installs no project"
    for line in installs:
        assert "-c constraints.txt" in line, line
    pinned = dict(line.split("==", 1) for line in (PROJECT_ROOT / "constraints.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert tuple(pinned["qdrant-client"].split(".")[:2]) == re.search(r'"qdrant-client~=(\d+)\.(\d+)', dockerfile).groups()


def test_triton_image_matches_the_local_server(triton):
    """The container release is the one whose server the local wheel runs (24.10 = 2.51.0)."""
    dockerfile = (DOCKER / "triton.Dockerfile").read_text()
    assert re.search(r"^FROM nvcr\.io/nvidia/tritonserver:24\.10-py3$", dockerfile, re.M)
    with urllib.request.urlopen(triton.url("/v2"), timeout=5) as r:
        assert json.loads(r.read())["version"] == "2.51.0"


STEP_SOURCES = [*(PROJECT_ROOT / "triton_repo").glob("*/1/model.py"), *(PROJECT_ROOT / "search/triton/steps").glob("*.py")]


def step_imports() -> set[str]:
    """Modules the Python steps and their shared package import (parsed as the image's Python)."""
    imported = set()
    for source in STEP_SOURCES:
        # The 24.10 container runs the python backend on its own Python 3.10 (Ubuntu 22.04).
        for node in ast.walk(ast.parse(source.read_text(), feature_version=(3, 10))):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return imported


def test_triton_image_installs_what_the_python_steps_import():
    pip_names = {"PIL": "pillow", "pillow_heif": "pillow-heif", "tokenizers": "tokenizers", "numpy": "numpy",
                 "cv2": "opencv-python-headless", "pyclipper": "pyclipper", "shapely": "shapely"}
    tops = {name.split(".")[0] for name in step_imports()}
    third_party = tops - set(sys.stdlib_module_names) - {"triton_python_backend_utils", "search"}
    assert third_party <= set(pip_names), f"add to docker/triton.Dockerfile: {third_party - set(pip_names)}"
    dockerfile = (DOCKER / "triton.Dockerfile").read_text().replace("\\\n", " ")  # continued lines as one
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    for module in third_party:
        assert f'"{pip_names[module]}' in install, module
    assert '"numpy<2"' in install  # numpy 2 in the stub's environment empties every output


def test_triton_image_holds_the_steps_shared_package(tmp_path):
    """The Dockerfile's COPY lines, replayed into a folder: every search module a step imports is
    there, and the pure modules import from that folder alone in an isolated Python (as the stub runs)."""
    dockerfile = (DOCKER / "triton.Dockerfile").read_text()
    copies = re.findall(r"^COPY (search/\S*) /opt/search/lib/(\S+)$", dockerfile, re.M)
    assert copies, "docker/triton.Dockerfile copies no part of search"
    for src, dest in copies:
        assert src == dest, (src, dest)
        if src.endswith("/"):
            shutil.copytree(PROJECT_ROOT / src, tmp_path / dest, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (tmp_path / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / src, tmp_path / dest)
    assert re.search(r"echo /opt/search/lib > \S*\.pth", dockerfile), "make /opt/search/lib importable (a .pth)"
    wanted = {n for n in step_imports() if n.startswith("search.")}
    assert wanted and all(n.startswith("search.triton.steps") for n in wanted), wanted
    def in_image(name: str) -> bool:
        path = tmp_path.joinpath(*name.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    for name in wanted:  # a module, or a name from one (from search.triton.steps.clip_image import BadImage)
        assert in_image(name) or in_image(name.rsplit(".", 1)[0]), f"{name} is not in the image"
    pure = sorted(f"search.triton.steps.{p.stem}" for p in (tmp_path / "search/triton/steps").glob("*.py")
                  if p.stem not in ("__init__", "backend"))  # backend needs the stub's triton_python_backend_utils
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import importlib, search\n"
            f"for m in {pure!r}: assert importlib.import_module(m).__file__.startswith({str(tmp_path)!r}), m\n"
            "assert not [m for m in sys.modules if m.startswith('search.') and not m.startswith('search.triton')]")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_shell_scripts_parse():
    for script in DOCKER.glob("*.sh"):
        proc = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, (script.name, proc.stderr)


def test_triton_start_script_command_line(tmp_path):
    """docker/triton-start.sh's command line (a recording `tritonserver` on PATH stands in for the
    container's binary; the served GPU variants are checked for real in the last test)."""
    record = tmp_path / "args"
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "tritonserver"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    fake.chmod(0o755)
    repo = tmp_path / "models"
    repo.mkdir()
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "TRITON_MODEL_REPOSITORY": str(repo)}

    def start(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(DOCKER / "triton-start.sh"), "--log-verbose=1"], env={**env, **extra},
                              capture_output=True, text=True, timeout=30)

    proc = start()
    assert proc.returncode == 1 and "export the models first" in proc.stderr and not record.exists()
    (repo / "served_models.txt").write_text("minilm_tokenize\nminilm_onnx\nminilm\n")
    assert start().returncode == 0
    args = record.read_text().splitlines()
    assert [a for a in args if a.startswith("--load-model=")] == [
        "--load-model=minilm_tokenize", "--load-model=minilm_onnx", "--load-model=minilm"]
    assert {f"--model-repository={repo}", "--model-control-mode=explicit", "--model-config-name=gpu",
            "--metrics-port=8002", "--allow-metrics=true", "--allow-gpu-metrics=true"} <= set(args)
    assert args[-1] == "--log-verbose=1"  # the script's arguments come last
    assert start(TRITON_MODEL_CONFIG="default").returncode == 0
    assert not any(a.startswith("--model-config-name") for a in record.read_text().splitlines())


def test_commands_the_services_run_exist():
    for cmd in (["serve", "--help"], ["ui", "--help"], ["models", "build", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "search", *cmd], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (cmd, proc.stderr)


def test_export_script_fills_the_repository_and_lists_what_to_serve(model_repo, tmp_path):
    """docker/export-models.sh as the `models` service runs it (configs from the image, build, list,
    engine cache), here on a copy of the test repository so the build is only checked, not redone."""
    repo, cache = tmp_path / "models", tmp_path / "engine_cache"
    shutil.copytree(model_repo, repo)
    env = {**os.environ, "APP_DIR": str(PROJECT_ROOT), "SEARCH_TRITON_REPO": str(repo), "TRT_ENGINE_CACHE": str(cache),
           "SEARCH_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}

    def run() -> str:
        proc = subprocess.run(["sh", str(DOCKER / "export-models.sh")], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    first = run()
    served = (repo / "served_models.txt").read_text().split()
    assert served == built_triton_models(repo) and "minilm" in served
    assert (repo / "minilm_onnx" / "configs" / "gpu.pbtxt").exists()
    onnx = sorted(p.parent.parent.name for p in repo.glob("*/1/model.onnx"))
    assert onnx and sorted(p.parent.name for p in cache.glob("*/.model-sha256")) == onnx
    assert "minilm_onnx changed" in first
    (cache / "minilm_onnx" / "engine.trt").write_text("stale")
    assert "changed" not in run()  # unchanged models keep their engines
    assert (cache / "minilm_onnx" / "engine.trt").exists()
    (cache / "minilm_onnx" / ".model-sha256").write_text("an older model\n")
    assert "minilm_onnx changed" in run()
    assert not (cache / "minilm_onnx" / "engine.trt").exists()


def test_local_triton_serves_the_gpu_variants(model_repo, triton, tmp_path):
    """Every configs/gpu.pbtxt loads in the real Triton 2.51 (its validator, the dynamic batcher,
    the accelerator settings, the fallback to config.pbtxt for the ensembles) once KIND_GPU is
    switched to KIND_CPU, the one thing a machine without a GPU refuses; the embeddings match."""
    repo = tmp_path / "repo"
    shutil.copytree(model_repo, repo)
    for path in repo.glob("*/configs/gpu.pbtxt"):
        path.write_text(path.read_text().replace("KIND_GPU", "KIND_CPU"))
    models = built_triton_models(repo)
    server = LocalTriton(repo, tmp_path / "run", models=models, extra_args=["--model-config-name=gpu"])
    with server:
        def config(name: str) -> dict:
            with urllib.request.urlopen(server.url(f"/v2/models/{name}/config"), timeout=5) as r:
                return json.loads(r.read())

        gpu_onnx = config("minilm_onnx")
        assert gpu_onnx["max_batch_size"] == 128 and gpu_onnx["instance_group"][0]["count"] == 2
        assert gpu_onnx["optimization"]["execution_accelerators"]["gpu_execution_accelerator"][0]["name"] == "tensorrt"
        assert config("minilm_tokenize")["instance_group"][0]["count"] == 4
        assert config("minilm")["max_batch_size"] == 64  # no gpu.pbtxt: config.pbtxt
        got = served_outputs(TritonClient(f"127.0.0.1:{server.grpc_port}"))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
    want = served_outputs(TritonClient(f"127.0.0.1:{triton.grpc_port}"))
    assert set(got) == set(want) == {"minilm", "clip_text", "clip_image", "bge_m3_dense"}
    for name in want:
        a, b = got[name], want[name]
        cosine = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cosine.min() >= 0.9999, name
    assert re.search(r'nv_inference_request_success\{model="minilm_onnx",version="1"\} [1-9]', metrics)


def served_outputs(client: TritonClient) -> dict[str, np.ndarray]:
    texts = ["reset my password", "the VPN drops every hour", "printer on floor 3"] * 4
    images = []
    for seed in range(3):
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(buf, "PNG")
        images.append(buf.getvalue())
    return {"minilm": minilm.embed(client, texts)[0], "clip_text": clip.embed_texts(client, texts)[0],
            "clip_image": clip.embed_images(client, images),
            "bge_m3_dense": np.stack([o.dense for o in bge_m3.encode(client, texts, colbert=False)])}


def test_cluster_sharding_reaches_collection_creation(monkeypatch, tmp_path):
    """SEARCH_QDRANT_SHARDS / _REPLICATION_FACTOR go to create_collection (only a Qdrant server
    applies them; local mode accepts and ignores them, which is all that can run here)."""
    from search.config import Settings
    from search.store import DOCUMENTS, open_store

    monkeypatch.setenv("SEARCH_QDRANT_SHARDS", "6")
    monkeypatch.setenv("SEARCH_QDRANT_REPLICATION_FACTOR", "2")
    store = open_store(Settings(qdrant_path=":memory:", data_dir=tmp_path))
    assert store.sharding == {"shard_number": 6, "replication_factor": 2}
    store.ensure(DOCUMENTS)
    assert store.exists(DOCUMENTS.name)
    store.close()
    monkeypatch.delenv("SEARCH_QDRANT_SHARDS")
    monkeypatch.delenv("SEARCH_QDRANT_REPLICATION_FACTOR")
    assert open_store(Settings(qdrant_path=":memory:", data_dir=tmp_path)).sharding == {}
