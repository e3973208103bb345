"""Local ingest vs `indexer ingest --ray` on the same folder: what the Ray pipeline costs on one
machine, and the per-stage costs that size a real cluster (docs/scale.md).

    python bench/bench_scale.py [--files 300] [--repo TRITON_REPO] [--json FILE]

Needs MiniLM built (`search models build`). Starts its own Triton (MiniLM only) on free ports,
writes FILES generated Markdown notes, then ingests them into fresh data dirs: locally, then on a
Ray cluster started here (`ray.cluster_utils.Cluster`: a head with no CPUs for tasks plus 1, then
2 worker nodes of one CPU each). On a 2-core machine two workers cannot beat one process by much:
the point is the overhead (Ray with one worker vs local), and the per-stage busy seconds, from which
the projection for N nodes is computed: wall time per file ≈ max(read+split / CPUs, embed /
Triton replicas, write on the driver).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import load, machine_line, record  # noqa: E402
from indexer.distributed import LOOPBACK, loopback  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import Settings  # noqa: E402
from search.models import MiniLM, built_triton_models  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

MB = 2**20


def notes(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        words = " ".join(f"word{(i * 13 + k) % 211}" for k in range(400))
        (folder / f"note{i:05}.md").write_text(f"# Note {i}\n\n{words}\n")


def ingest(settings: Settings, folder: Path, ray: str | None) -> dict:
    svc = IngestService(settings)
    try:
        t0 = time.perf_counter()
        report = svc.ingest([folder], ray=ray)
        wall = time.perf_counter() - t0
    finally:
        svc.close()
    d = report.as_dict()
    return {"wall_s": round(wall, 2), "indexed": d["indexed"], "chunks": d["embedded_chunks"],
            "files_per_s": round(d["indexed"] / wall, 1), "stages": d.get("stages", {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--repo", type=Path, help="Triton model repository [default: the setting triton_repo]")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    load_before = load()
    repo = args.repo or Settings().triton_repo
    if not MiniLM().is_built(repo):
        sys.exit(f"build the model first: search models build (no MiniLM in {repo})")
    import ray
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    folder = tmp / "notes"
    notes(folder, args.files)
    server = LocalTriton(repo, tmp / "triton", models=[m for m in built_triton_models(repo) if m.startswith("minilm")]).start()
    results: dict = {"machine": machine_line(), "files": args.files, "runs": {}}
    try:
        def settings(name: str) -> Settings:
            return Settings(data_dir=tmp / name, triton_repo=repo, triton_url=f"127.0.0.1:{server.grpc_port}",
                            qdrant_url=None, triton_timeout_s=300)

        os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")  # the cluster below inherits it
        results["runs"]["local"] = ingest(settings("local"), folder, None)
        print("local", results["runs"]["local"], flush=True)
        with loopback():  # on 127.0.0.1, not the machine's network address
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 200 * MB,
                                                                    "include_dashboard": False,
                                                                    "node_ip_address": LOOPBACK})
        try:
            for workers in (1, 2):
                with loopback():
                    cluster.add_node(num_cpus=1, object_store_memory=200 * MB, node_ip_address=LOOPBACK)
                    cluster.wait_for_nodes()
                    ray.init(address=cluster.address, log_to_driver=False)
                try:
                    row = ingest(settings(f"ray{workers}"), folder, cluster.address)
                finally:
                    ray.shutdown()
                results["runs"][f"ray_{workers}_workers"] = row
                print(f"ray, {workers} worker node(s)", row, flush=True)
        finally:
            cluster.shutdown()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    local, one = results["runs"]["local"], results["runs"]["ray_1_workers"]
    results["ray1_vs_local"] = round(local["wall_s"] / one["wall_s"], 2)
    stages = results["runs"]["ray_2_workers"]["stages"]
    per_file = {k: v["seconds"] / args.files for k, v in stages.items()}
    results["per_file_s"] = {k: round(v, 5) for k, v in per_file.items()}
    # Projection: N CPU workers read+split in parallel, R Triton replicas embed in parallel, one driver writes.
    proj = {}
    for nodes, cpus, replicas in ((4, 16, 1), (4, 16, 4), (16, 16, 8)):
        per = max((per_file.get("read", 0) + per_file.get("split", 0)) / (nodes * cpus),
                  per_file.get("embed", 0) / replicas, per_file.get("write", 0))
        proj[f"{nodes} nodes x {cpus} CPUs, {replicas} Triton replicas"] = round(1 / per) if per else None
    results["projected_files_per_s"] = proj
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    record("bench_scale", results, load_before=load_before)


if __name__ == "__main__":
    main()
