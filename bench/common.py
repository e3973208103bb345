"""What every benchmark shares: the machine, the load, the commit, and its run appended as one JSON
line to bench/results/<bench>.jsonl (the results are data; docs/benchmarks.md explains the method)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "gpu": bool(shutil.which("nvidia-smi"))}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent.parent)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def append(bench: str, figures: dict, *, load_before: list[float], command: str) -> Path:
    """One run as one JSON line: when, where, on which commit, under which load, and its figures."""
    RESULTS.mkdir(exist_ok=True)
    record = {"bench": bench, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit(),
              "machine": machine(), "load_before": load_before, "load_after": load(), "command": command, **figures}
    path = RESULTS / f"{bench}.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@contextmanager
def served_family(fam, source: str, timeout: float = 300) -> Iterator:
    """``fam`` built from ``source`` into a temporary copy of its triton_repo folders and served by
    a local Triton on free loopback ports: yields a TritonClient of it."""
    from search.config import PROJECT_ROOT  # noqa: PLC0415  (numpy and the client load only here)
    from search.triton.client import TritonClient  # noqa: PLC0415
    from search.triton.local import LocalTriton  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix=f"bench-{fam.family}-"))
    try:
        repo = work / "repo"
        for name in fam.triton_models:
            shutil.copytree(PROJECT_ROOT / "triton_repo" / name, repo / name)
        report = fam.build(repo, source)
        print(f"build: {report.status} — {report.detail}", flush=True)
        with LocalTriton(repo, work / "triton", models=list(fam.triton_models)).start(timeout=timeout) as server:
            yield TritonClient(f"127.0.0.1:{server.grpc_port}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
