"""`indexer ingest --ray`: the ingest as a Ray Data pipeline on a real multi-node Ray cluster started
on this machine (a head and two worker nodes, one CPU each), embedding through the session's real
Triton. What it stores must equal what a local ingest of the same folder stores."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from search.config import PROJECT_ROOT, Settings
from search.store import DOCUMENTS, open_store

ray = pytest.importorskip("ray")
from document_helpers import long_doc  # noqa: E402
from processes import env_for, run_cli  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from stored_points import assert_same_points, mixed_folder, run, stored  # noqa: E402

from indexer.distributed import UNITS_PER_EMBED_SLICE  # noqa: E402
from indexer.ray_cluster import LOOPBACK, loopback  # noqa: E402

MB = 2**20
# Each node's object store. An embed batch of 32 BGE-M3 notes is one ~40 MB object (its ColBERT rows);
# the store holds a few without spilling to disk, which Ray refuses on a disk over 95 % full.
STORE = 256 * MB
N_NOTES = 64
SERVER = os.environ.get("QDRANT_URL")  # read before the settings fixture clears it


@pytest.fixture(scope="module")
def cluster():
    """Head + two worker nodes, one CPU and a small object store each; this process is the driver."""
    # Ray's own OOM killer acts at 95 % of the machine's memory, which the other test sessions on a
    # shared machine reach by themselves: it would kill these workers for memory they do not use.
    os.environ["RAY_memory_monitor_refresh_ms"] = "0"
    with loopback():  # every node on 127.0.0.1, as a local `indexer ingest --ray` starts its cluster
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE,
                                                            "include_dashboard": False, "node_ip_address": LOOPBACK})
        nodes = [c.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address=LOOPBACK) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, _node_ip_address=LOOPBACK, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {LOOPBACK}
    yield c, nodes
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def mixed(docs) -> Path:
    return mixed_folder(docs)


def outcomes(report) -> dict:
    return {(Path(o.path).name, o.status, o.reason, o.chunks) for o in report.outcomes}


def ids_and_paths(settings: Settings) -> set:
    return {(k, tuple(payload["paths"])) for k, (_, payload) in stored(settings, vectors=False).items()}


def twin(settings: Settings, name: str) -> Settings:
    return settings.model_copy(update={"data_dir": settings.data_dir.parent / name})


def test_ray_ingest_equals_local_ingest(cluster, settings, mixed):
    """The same stored points as a local ingest (a file longer than an embed slice included: it
    reaches the driver in parts); then, in a second run, a move and a deletion follow the local rules
    (the moved photo keeps its vectors, the deleted one is pruned) and nothing else changes."""
    # Short chunks: the long file passes an embed slice (128 units) in 4,700 tokens rather than 26,000
    # (its ColBERT rows are what the two stores hold and compare most of).
    settings = settings.model_copy(update={"chunk_tokens": 32, "chunk_overlap": 8})
    long_doc(mixed, parts=10)
    local = run(settings, [mixed])
    assert next(o.chunks for o in local.outcomes if o.path.endswith("long.md")) > UNITS_PER_EMBED_SLICE
    on_ray = twin(settings, "ray-data")
    report = run(on_ray, [mixed], ray="")
    assert outcomes(report) == outcomes(local)
    assert {f.reason for f in report.failures} and len(report.failures) == 4
    assert {o.kind for o in report.outcomes if o.status == "indexed"} == {"documents", "images"}
    assert report.embedded_chunks == local.embedded_chunks  # copies are stored once, not embedded twice
    assert set(report.stages) >= {"read", "split", "embed", "write"}
    a = stored(settings)
    assert any(c == DOCUMENTS.name for c, _ in a)
    assert_same_points(a, stored(on_ray))
    del a
    (mixed / "photo1.jpg").rename(mixed / "photo1-moved.jpg")
    (mixed / "photo2.jpg").unlink()
    local = run(settings, [mixed], prune=True)
    report = run(on_ray, [mixed], ray="", prune=True)
    assert outcomes(report) == outcomes(local) and report.embedded_chunks == 0
    by = {(Path(o.path).name, o.status) for o in report.outcomes}
    assert ("photo1-moved.jpg", "indexed") in by and ("photo2.jpg", "pruned") in by
    assert {status for name, status in by if not name.startswith(("photo1", "photo2"))} == {"unchanged", "failed"}
    paths = {Path(p).name for _, payload in stored(on_ray, vectors=False).values() for p in payload["paths"]}
    assert "photo1-moved.jpg" in paths and "photo1.jpg" not in paths and "photo2.jpg" not in paths
    assert_same_points(stored(settings), stored(on_ray))


@pytest.mark.skipif(not SERVER, reason="QDRANT_URL is not set: no Qdrant server for the Ray workers to write to")
def test_ray_workers_write_to_a_qdrant_server(cluster, settings, mixed):
    """With a Qdrant server the embed actors write new content themselves (the driver applies the
    rules): the server ends with what a local ingest stores in the embedded store."""
    local = run(settings, [mixed])
    on_ray = twin(settings, "ray-server").model_copy(update={
        "qdrant_url": SERVER, "qdrant_api_key": os.environ.get("QDRANT_API_KEY"),
        "collection_prefix": f"t{uuid.uuid4().hex[:8]}_"})
    try:
        report = run(on_ray, [mixed], ray="")
        assert outcomes(report) == outcomes(local)
        assert report.embedded_chunks == local.embedded_chunks
        assert report.stages["write"]["items"] > 0 and "apply" in report.stages  # written by the workers
        assert_same_points(stored(settings), stored(on_ray))
        again = run(on_ray, [mixed], ray="")
        assert again.counts["indexed"] == again.counts["updated"] == 0 and again.embedded_chunks == 0
        (mixed / "photo1.jpg").rename(mixed / "photo1-moved.jpg")
        (mixed / "photo2.jpg").unlink()
        local = run(settings, [mixed], prune=True)
        report = run(on_ray, [mixed], ray="", prune=True)
        assert outcomes(report) == outcomes(local) and report.embedded_chunks == 0
        assert_same_points(stored(settings), stored(on_ray))
    finally:
        store = open_store(on_ray)
        for c in store.collections():
            store.drop(c)
        store.close()


def test_worker_node_lost_mid_run(cluster, settings, tmp_path):
    c, nodes = cluster
    settings = settings.model_copy(update={"triton_timeout_s": 300})  # a loaded machine, three Ray nodes
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(N_NOTES):
        (folder / f"note{i:03}.md").write_text(f"# Note {i}\n\n" + " ".join(f"word{(i * 7 + k) % 97}" for k in range(60)))
    reference = run(settings, [folder])
    assert reference.counts["indexed"] == N_NOTES
    on_ray = twin(settings, "ray-kill")
    victim = nodes[-1]
    killed = threading.Event()

    def kill_when_started(outcome) -> None:
        if not killed.is_set():
            killed.set()
            threading.Thread(target=lambda: c.remove_node(victim, allow_graceful=False), daemon=True).start()

    report = run(on_ray, [folder], ray="", on_file=kill_when_started)
    assert killed.is_set()
    assert report.counts["indexed"] == N_NOTES and not report.failures
    assert ids_and_paths(on_ray) == ids_and_paths(settings)
    again = run(on_ray, [folder], ray="")
    assert again.counts["unchanged"] == N_NOTES and again.embedded_chunks == 0
    with loopback():  # the cluster as the next test expects it, on 127.0.0.1 like the others
        nodes[-1] = c.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address=LOOPBACK)
    c.wait_for_nodes()
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {LOOPBACK}


def test_cli_ingest_with_ray_address(cluster, settings, mixed):
    c, _ = cluster
    # the timeout only guards against a hang: with 8 busy processes on 2 cores this run took over 10 min
    proc = run_cli("indexer", "ingest", str(mixed), f"--ray={c.address}", settings=settings, timeout=1800)
    assert proc.returncode == 7, proc.stderr  # bad files among good ones
    assert "indexed" in proc.stdout and "stages, per worker:" in proc.stdout and "embed" in proc.stdout
    assert "failed" in proc.stdout and "binary.txt" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert "Progress bars disabled" not in proc.stderr and "concurrent actors" not in proc.stderr  # Ray's notices of our choices


def test_cli_ray_bad_address_is_one_line(settings, tmp_path):
    (tmp_path / "a.md").write_text("# A\n\nhello")
    proc = run_cli("indexer", "ingest", str(tmp_path), "--ray=127.0.0.1:1", settings=settings, timeout=300)
    assert proc.returncode == 1
    assert "Ray cluster at 127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("args", [["--ray"], ["--ray", "--json"]], ids=["last", "before-an-option"])
def test_cli_ray_alone_uses_the_configured_address(settings, tmp_path, args):
    """``--ray`` without a value (as the help and docs/scale.md give it) takes SEARCH_RAY_ADDRESS."""
    (tmp_path / "a.md").write_text("# A\n\nhello")
    proc = subprocess.run([sys.executable, "-m", "indexer", "ingest", str(tmp_path), *args], cwd=PROJECT_ROOT,
                          env=env_for(settings, SEARCH_RAY_ADDRESS="127.0.0.1:1"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Ray cluster at 127.0.0.1:1" in proc.stderr, proc.stderr


def test_triton_replica_stopped_mid_run(cluster, settings, model_repo, tmp_path):
    """Two Triton processes as replicas (SEARCH_TRITON_URLS); one is stopped while the run goes: the
    embed actors on it retry on the other and the run completes with what an uninterrupted run stores."""
    from search.models import built_triton_models
    from search.triton.local import LocalTriton

    settings = settings.model_copy(update={"triton_timeout_s": 300})
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(N_NOTES):
        (folder / f"note{i:03}.md").write_text(f"# Replica {i}\n\n" + " ".join(f"term{(i * 5 + k) % 89}" for k in range(60)))
    run(settings, [folder])
    second = LocalTriton(model_repo, tmp_path / "triton-2", models=[m for m in built_triton_models(model_repo) if "ofa" not in m])
    second.start(timeout=180)
    try:
        on_ray = twin(settings, "ray-replicas").model_copy(
            update={"triton_urls": f"127.0.0.1:{second.grpc_port},{settings.triton_url}"})
        stopped = threading.Event()

        def stop_second(total: int) -> None:  # the listing is done; the pipeline starts while it drains
            stopped.set()
            threading.Thread(target=second.stop, daemon=True).start()

        report = run(on_ray, [folder], ray="", on_start=stop_second)
    finally:
        second.stop()
    assert stopped.is_set()
    assert report.counts["indexed"] == N_NOTES and not report.failures and not report.stopped
    assert ids_and_paths(on_ray) == ids_and_paths(settings)


def test_ocr_fails_over_to_another_triton_replica(cluster, settings, tmp_path):
    """The text in scans is read in the model actors, on a replica that answers, as embedding is: with
    the first replica listed gone, the scans are read on the other one and the run stores what a local
    run stores (before, OCR ran in the read task, on the first replica only, and the run failed)."""
    settings = settings.model_copy(update={"triton_timeout_s": 600, "ocr_photos": True})  # OCR waits its turn on a busy machine
    folder = tmp_path / "scans"
    folder.mkdir()
    for name in ("printer-queue-scan.pdf", "whiteboard-wifi.jpg"):
        shutil.copy(PROJECT_ROOT / "samples" / "scans" / name, folder)
    (folder / "note.md").write_text("# Printers\n\nThe print spooler is restarted every night at two.\n")
    local = run(settings, [folder])
    assert not local.failures and local.counts["indexed"] >= 3
    on_ray = twin(settings, "ray-ocr").model_copy(update={"triton_urls": f"{LOOPBACK}:{unused_port()},{settings.triton_url}"})
    report = run(on_ray, [folder], ray="")
    assert not report.failures and not report.stopped and report.counts == local.counts
    assert report.stages["ocr"]["items"] == 2  # the two scans, read in the model stage
    read = texts(on_ray)
    assert read == texts(settings) and "spooler" in " ".join(t for t in read.values() if t).lower()
    assert ids_and_paths(on_ray) == ids_and_paths(settings)


def texts(settings: Settings) -> dict:
    return {k: payload.get("text") for k, (_, payload) in stored(settings, vectors=False).items()}


def unused_port() -> int:
    """A port nothing listens on: a Triton replica that is gone."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]
