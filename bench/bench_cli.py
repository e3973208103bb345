"""How long a user waits for the CLI: wall time of N invocations each of `python -c pass` (the floor),
`search --help`, `indexer --help`, and `search "reset password"` without a server (the CLI opens the embedded store
itself) and with a running `search serve` owning the data dir (the CLI goes through its REST API).

    python bench/bench_cli.py [-n 20] [--repo TRITON_REPO] [--json FILE]

Needs MiniLM built (`search models build`). Starts its own Triton on free ports, indexes
samples/docs into a temporary data dir, then times each command in turn, interleaved, so load on
the machine hits every command alike. Prints median and p90 per command and the ratio to the floor.
Also writes `python -X importtime` for the query path through the server to importtime.txt next
to --json (or in the current folder), for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import keyed, load, machine_line, record  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models import MiniLM, built_triton_models  # noqa: E402
from search.owner import find  # noqa: E402
from search.services.remote import RemoteService  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

QUERY = "reset password"


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return took


def start_server(env: dict, port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                if (Path(env["SEARCH_DATA_DIR"]) / "server.json").exists():
                    return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"search serve exited: {log.read_text()[-400:]}")
        time.sleep(0.2)
    raise SystemExit("search serve did not start in 120 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="invocations per command")
    ap.add_argument("--repo", type=Path, default=PROJECT_ROOT / "triton_repo")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    load_before = load()
    if not MiniLM().is_built(args.repo):
        raise SystemExit("build MiniLM first: search models build")

    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    triton = LocalTriton(args.repo, tmp / "triton-run", models=built_triton_models(args.repo))
    triton.start(timeout=180)
    server = None
    try:
        env = {**os.environ, "SEARCH_DATA_DIR": str(tmp / "data"), "SEARCH_TRITON_URL": f"127.0.0.1:{triton.grpc_port}",
               "SEARCH_TRITON_REPO": str(args.repo), "SEARCH_SEARCH_MODE": "semantic", "HF_HUB_OFFLINE": "1"}
        for var in ("QDRANT_URL", "SEARCH_QDRANT_URL"):
            env.pop(var, None)
        subprocess.run([sys.executable, "-m", "indexer", "ingest", str(PROJECT_ROOT / "samples" / "docs")], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        py = sys.executable
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "search --help": [py, "-m", "search", "--help"],
            "indexer --help": [py, "-m", "indexer", "--help"],
            f'search "{QUERY}" (no server)': [py, "-m", "search", QUERY],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.n):  # interleaved: load on the machine hits every command alike
            for name, cmd in commands.items():
                times[name].append(timed(cmd, env))

        port = free_port()
        server = start_server(env, port, tmp / "serve.log")
        with_server = {"python -c pass": [py, "-c", "pass"], "search --help": [py, "-m", "search", "--help"],
                       f'search "{QUERY}" (server running)': [py, "-m", "search", QUERY]}
        served: dict[str, list[float]] = {name: [] for name in with_server}
        for _ in range(args.n):
            for name, cmd in with_server.items():
                served[name].append(timed(cmd, env))
        # The same query as one REST call from a warm process: the server's side plus the HTTP round trip.
        remote = RemoteService(find(Path(env["SEARCH_DATA_DIR"])))
        request_s = []
        for _ in range(args.n):
            start = time.perf_counter()
            remote.search_documents(QUERY)
            request_s.append(time.perf_counter() - start)
        importtime = subprocess.run([py, "-X", "importtime", "-m", "search", QUERY], env=env, capture_output=True,
                                    text=True).stderr
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        triton.stop()

    floor = float(np.median(times["python -c pass"] + served["python -c pass"]))
    rows = []
    served["the same query, one REST call from a warm process"] = request_s
    for table in (times, served):
        for name, ts in table.items():
            if name == "python -c pass" and rows:
                continue
            ms = np.array(ts) * 1000
            rows.append({"command": name, "n": len(ts), "median_ms": round(float(np.median(ms)), 1),
                         "p90_ms": round(float(np.percentile(ms, 90)), 1), "x_floor": round(float(np.median(ts)) / floor, 2)})
    results = {"machine": machine_line(), "load": os.getloadavg(), "rows": rows}
    print(f"machine: {results['machine']}; load average {', '.join(f'{x:.2f}' for x in results['load'])}")
    print(f"{'command':48} {'median ms':>10} {'p90 ms':>8} {'x python -c pass':>17}")
    for r in rows:
        print(f"{r['command'][:48]:48} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f} {r['x_floor']:>17.2f}")
    trace = (args.json.parent if args.json else Path.cwd()) / "importtime.txt"
    trace.write_text(importtime)
    print(f"importtime of the query through the server: {trace}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)
    record("bench_cli", {**results, "invocations": args.n, "rows": keyed(rows, "command")}, load_before=load_before)


if __name__ == "__main__":
    main()
