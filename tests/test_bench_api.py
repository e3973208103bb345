"""bench/bench_api.py's server outlives its log: `search serve` writes a line per request to stderr,
and a pipe nobody reads fills after a few hundred requests and blocks the server."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from processes import stop

from search.config import PROJECT_ROOT
from search.triton.local import free_port

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
import bench_api  # noqa: E402


def test_the_benchmarked_server_answers_past_a_pipe_full_of_log_lines(settings, tmp_path):
    port, log = free_port(), tmp_path / "api.log"
    api = bench_api.start_api(settings, port, log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            for _ in range(2000):  # ~100 bytes of log each: three times a 64 KiB pipe
                assert client.get("/healthz").status_code == 200
    finally:
        stop(api)
    assert log.read_text().count("GET /healthz 200") >= 2000


@pytest.mark.parametrize("options", [[], ["--hits", "5", "--concurrency", "4", "--reps", "2"]],
                         ids=["one at a time", "hits, concurrent"])
def test_the_stack_benchmark_runs_every_probe(options):
    """bench/bench_api_stack.py mounts probe routes on the real app: a changed app must not leave it broken."""
    out = subprocess.run([sys.executable, str(PROJECT_ROOT / "bench" / "bench_api_stack.py"), "-n", "20", "--no-record",
                          *options],
                         capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("/")]
    assert len(rows) == 8 and any(r.startswith("/search/documents") for r in rows), out.stdout
