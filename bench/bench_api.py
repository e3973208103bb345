"""REST API overhead: document search, the same grouped per document (group_by=document) and
/v1/embeddings over HTTP (`search serve`, a real uvicorn in a subprocess) with 1, 8 and 32
concurrent clients, next to the same queries through the service layer in-process (the app's own
SearchService, store lock included). The ratio is what HTTP + FastAPI cost: of the medians, and
round by round. This machine's speed drifts by up to a third over minutes, so `--pairs` runs each
HTTP row right after its in-process twin rather than all HTTP rows after all in-process ones.

    python bench/bench_api.py [--quick] [--client wrk|httpx] [--repo TRITON_REPO] [--json FILE]
                              [--server-cpus 0,2 --load-cpus 4] [--pairs]

Needs MiniLM built (`search models build`). Starts its own Triton on free ports and indexes
samples/docs into a temporary data dir; queries are samples/queries.json, semantic mode.

The HTTP load comes from `wrk` (Debian's package: a C load generator in its own process) when it
is installed, else from httpx in this process. On a 2-core machine the client shares the cores with
the server and Triton: httpx, in Python, costs about as much CPU per request as the API itself, a
cost a deployed server never pays (its clients are elsewhere), so wrk measures the server more
fairly; `--client httpx` keeps the old way. Every row also gives the CPU milliseconds per request
of the serving process (the API process, or this one in-process), which the machine's other load
distorts far less than requests per second, and of Triton (the server and its Python-backend stubs):
the same queries cost Triton less when more of them arrive together and are batched. The batch
column is the MiniLM encoder's mean dynamic batch over the row (texts per run, Triton's statistics).

On a host with more cores, `--server-cpus` pins this process (the in-process clients), Triton and
the API to those CPUs, a stand-in for a small server, and `--load-cpus` gives wrk CPUs of its own:
each HTTP row is then measured twice, with wrk on the server's CPUs (as on a 2-core box) and with
wrk apart (as when the clients are other machines), so the load generator's share is a figure of
the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import fmt_load, keyed, load, machine_line, record, slug, start_api  # noqa: E402
from bench.timing import cpu_list, cpu_seconds, machine_ticks, session_cpu, steal_pct  # noqa: E402
from search.api import create_app  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM, built_triton_models  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

CLIENTS = (1, 8, 32)
QUERIES = [q["query"] for q in json.loads((PROJECT_ROOT / "samples" / "queries.json").read_text())]


def summary(path: str, clients: int, latencies: list[float], seconds: float, cpu_s: float, triton_s: float,
            batch: float, steal: float) -> dict:
    ms = np.array(latencies) * 1000
    return {"path": path, "clients": clients, "requests": len(ms), "rps": round(len(ms) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "cpu_ms_per_request": round(cpu_s * 1000 / len(ms), 2), "triton_cpu_ms_per_request": round(triton_s * 1000 / len(ms), 2),
            "encoder_batch": batch, "steal_pct": steal}


def median_row(runs: list[dict]) -> dict:
    """One row from its rounds: the median of each figure, and every round's requests/s."""
    figures = ("rps", "p50_ms", "p99_ms", "cpu_ms_per_request", "triton_cpu_ms_per_request", "encoder_batch")
    return {**runs[0], **{k: round(float(np.median([r[k] for r in runs])), 2) for k in figures},
            "rounds_rps": [r["rps"] for r in runs], "rounds_p99_ms": [r["p99_ms"] for r in runs],
            "rounds_steal_pct": [r["steal_pct"] for r in runs]}


TRITON_SESSION: int | None = None  # the local Triton's session id: the server and its Python-backend stubs
TRITON_URL = ""  # the local Triton's gRPC address


def encoder_runs() -> tuple[int, int]:
    """(texts, runs) the MiniLM encoders (minilm_onnx for batches, minilm_query_onnx for one text) have
    served so far, from Triton's statistics: their ratio over a row is the mean dynamic batch, which
    sets Triton's CPU per request."""
    client = grpcclient.InferenceServerClient(TRITON_URL)
    stats = [client.get_inference_statistics(m, as_json=True)["model_stats"][0] for m in ("minilm_onnx", "minilm_query_onnx")]
    return sum(int(s.get("inference_count", 0)) for s in stats), sum(int(s.get("execution_count", 0)) for s in stats)


def mean_batch(before: tuple[int, int]) -> float:
    texts, runs = (a - b for a, b in zip(encoder_runs(), before))
    return round(texts / max(runs, 1), 2)


def triton_seconds() -> float:
    """CPU seconds of the local Triton and every process of its session (the Python-backend stubs)."""
    return session_cpu(TRITON_SESSION)


# What each row asks: the service call in-process, and the same over HTTP (route, JSON body).
WORKLOADS = {
    "search": (lambda svc, q: svc.search_documents(q, top_k=5, mode="semantic"),
               "/search/documents", lambda q: {"query": q, "top_k": 5, "mode": "semantic"}),
    "grouped": (lambda svc, q: svc.search_document_groups(q, top_k=5, group_size=2, mode="semantic"),
                "/search/documents", lambda q: {"query": q, "top_k": 5, "group_by": "document", "group_size": 2,
                                                "mode": "semantic"}),
    "embeddings": (lambda svc, q: svc.embed("minilm", [q]).run(),
                   "/v1/embeddings", lambda q: {"model": "minilm", "input": [q]}),
}


IN_PROCESS_PATH = "{what}: service in-process"
HTTP_PATH = "{what}: HTTP (uvicorn, FastAPI)"


def in_process(svc, n: int, clients: int, what: str = "search") -> dict:
    call = WORKLOADS[what][0]

    def one(i: int) -> float:
        start = time.perf_counter()
        call(svc, QUERIES[i % len(QUERIES)])
        return time.perf_counter() - start

    for i in range(clients):
        one(i)  # warm-up: one gRPC channel per thread
    start, cpu, triton, runs, ticks = time.perf_counter(), cpu_seconds(), triton_seconds(), encoder_runs(), machine_ticks()
    with ThreadPoolExecutor(clients) as pool:
        latencies = list(pool.map(one, range(n)))
    return summary(IN_PROCESS_PATH.format(what=what), clients, latencies, time.perf_counter() - start, cpu_seconds() - cpu,
                   triton_seconds() - triton, mean_batch(runs), steal_pct(ticks))


APART = ", load apart"  # wrk on CPUs of its own (--load-cpus)


async def over_http(base: str, n: int, clients: int, what: str = "search", pid: int | None = None) -> dict:
    _, route, body = WORKLOADS[what]
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        async def one(i: int) -> float:
            start = time.perf_counter()
            r = await client.post(route, json=body(QUERIES[i % len(QUERIES)]))
            r.raise_for_status()
            return time.perf_counter() - start

        await asyncio.gather(*(one(i) for i in range(clients)))  # warm-up: open the connections

        async def worker(ids: range) -> None:
            for i in ids:
                latencies.append(await one(i))

        start, cpu, triton, runs, ticks = time.perf_counter(), cpu_seconds(pid), triton_seconds(), encoder_runs(), machine_ticks()
        await asyncio.gather(*(worker(range(w, n, clients)) for w in range(clients)))
        seconds, cpu, triton = time.perf_counter() - start, cpu_seconds(pid) - cpu, triton_seconds() - triton
    return {**summary(HTTP_PATH.format(what=what), clients, latencies, seconds, cpu, triton, mean_batch(runs), steal_pct(ticks)),
            "client": "httpx"}


_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def over_wrk(base: str, seconds: float, clients: int, what: str, pid: int, script_dir: Path,
             cpus: set[int] | None = None) -> dict:
    """The same requests from wrk (one thread, ``clients`` connections) for ``seconds``: requests/s,
    p50/p99 (wrk's latency distribution) and the API process's CPU per request. ``cpus``: wrk's CPUs
    (else this process's)."""
    _, route, body = WORKLOADS[what]
    bodies = [json.dumps(body(q)) for q in QUERIES]
    script = script_dir / f"{what}.lua"
    script.write_text("local bodies = {" + ",".join(json.dumps(b) for b in bodies) + "}\nlocal i = 0\n"
                      "request = function()\n  i = i + 1\n"
                      f"  return wrk.format('POST', '{route}', {{['Content-Type'] = 'application/json'}}, bodies[(i % #bodies) + 1])\n"
                      "end\n")
    run = ["wrk", "-t1", f"-c{clients}", "--latency", "--timeout", "60s", "-s", str(script), base]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    subprocess.run([*run[:3], "-d2s", *run[3:]], check=True, capture_output=True, preexec_fn=pin)  # warm-up: open the connections
    cpu, triton, runs, ticks = cpu_seconds(pid), triton_seconds(), encoder_runs(), machine_ticks()
    out = subprocess.run([*run[:3], f"-d{seconds:g}s", *run[3:]], check=True, capture_output=True, text=True,
                         preexec_fn=pin).stdout
    cpu, triton, batch, steal = cpu_seconds(pid) - cpu, triton_seconds() - triton, mean_batch(runs), steal_pct(ticks)
    if re.search(r"Non-2xx or 3xx responses", out):
        sys.exit(f"wrk got error responses:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))

    def pct(p: str) -> float:
        value, unit = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
        return round(float(value) * _WRK_UNITS[unit], 2)

    return {"path": HTTP_PATH.format(what=what) + (APART if cpus else ""), "clients": clients, "requests": requests,
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50_ms": pct("50"), "p99_ms": pct("99"),
            "cpu_ms_per_request": round(cpu * 1000 / requests, 2),
            "triton_cpu_ms_per_request": round(triton * 1000 / requests, 2), "encoder_batch": batch, "steal_pct": steal,
            "client": "wrk"}


def in_process_rows(settings: Settings, n: int, clients: list[int], whats: list[str]) -> list[dict]:
    """The in-process rows, with the store open in this process (the embedded store admits one)."""
    backend = create_app(settings).state.backend
    try:
        return [in_process(backend.service(), n, c, what) for what in whats for c in clients]
    finally:
        backend.close()


def http_rows(settings: Settings, args: argparse.Namespace, n: int, clients: list[int], whats: list[str],
              done: list[dict], tmp: Path) -> list[dict]:
    """The HTTP rows, with `search serve` owning the store; wrk runs about as long as the matching
    in-process row in ``done`` took (at least 5 s)."""
    port = free_port()
    api = start_api(settings, port, tmp / "api.log")
    rows: list[dict] = []
    try:
        base = f"http://127.0.0.1:{port}"
        for what in whats:
            for c in clients:
                if args.client == "wrk":
                    local = row(reversed(done), IN_PROCESS_PATH.format(what=what), c)
                    seconds = max(5.0, round(local["requests"] / local["rps"]))
                    rows.append(over_wrk(base, seconds, c, what, api.pid, tmp))
                    if args.load_cpus:
                        rows.append(over_wrk(base, seconds, c, what, api.pid, tmp, args.load_cpus))
                else:
                    rows.append(asyncio.run(over_http(base, n, c, what, api.pid)))
    finally:
        api.terminate()
        try:
            api.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a loaded machine: do not leave the server behind
            api.kill()
            api.wait()
    return rows


def row(rows, path: str, clients: int) -> dict:
    """The first of ``rows`` for ``path`` at ``clients``."""
    return next(r for r in rows if r["clients"] == clients and r["path"] == path)


def paired_ratios(rounds: list[list[dict]], what: str, clients: int, http_path: str) -> list[float]:
    """HTTP ÷ in-process requests/s of one cell, round by round."""
    out = []
    for rnd in rounds:
        local, http = row(rnd, IN_PROCESS_PATH.format(what=what), clients), row(rnd, http_path, clients)
        out.append(round(http["rps"] / local["rps"], 3))
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few requests (a smoke run)")
    ap.add_argument("--repo", type=Path, help="Triton model repository [default: the setting triton_repo]")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--requests", type=int, help="requests per row [default: 1000, --quick: 64]")
    ap.add_argument("--client", choices=("wrk", "httpx"), default="wrk" if shutil.which("wrk") else "httpx",
                    help="what sends the HTTP load [default: wrk when installed (apt-get install wrk), else httpx]")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every row, the paths taking turns (median reported)")
    ap.add_argument("--pairs", action="store_true",
                    help="run each HTTP row right after its in-process twin (the API started for each) and also "
                         "report the HTTP / in-process ratio round by round; default: all in-process rows, then all HTTP rows")
    ap.add_argument("--clients", type=int, nargs="+", default=list(CLIENTS), help="concurrent clients per row [default: 1 8 32]")
    ap.add_argument("--server-cpus", type=cpu_list, help="pin this process, Triton and the API to these CPUs (e.g. 0,2)")
    ap.add_argument("--load-cpus", type=cpu_list,
                    help="wrk's own CPUs (e.g. 4): each HTTP row is measured with wrk on the server's CPUs and apart")
    ap.add_argument("--what", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS),
                    help="the workloads: document search (MiniLM, top_k 5) and /v1/embeddings (MiniLM, one text)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    load_before = load()
    if args.load_cpus and args.client != "wrk":
        sys.exit("--load-cpus places wrk: it needs --client wrk")
    if args.server_cpus:
        os.sched_setaffinity(0, args.server_cpus)  # inherited by Triton, its stubs and the API
    repo = args.repo or Settings().triton_repo
    if not MiniLM().is_built(repo):
        sys.exit(f"build the model first: search models build (no MiniLM in {repo})")
    n = args.requests or (64 if args.quick else 1000)

    tmp = Path(tempfile.mkdtemp(prefix="bench-api-"))
    server = LocalTriton(repo, tmp / "triton", models=[m for m in built_triton_models(repo) if m.startswith("minilm")]).start()
    global TRITON_SESSION
    TRITON_SESSION = server.state.pid  # started with start_new_session: its pid is the session id
    global TRITON_URL
    TRITON_URL = f"127.0.0.1:{server.grpc_port}"
    start_load = fmt_load()
    try:
        settings = Settings(data_dir=tmp / "data", triton_repo=repo, triton_url=f"127.0.0.1:{server.grpc_port}",
                            qdrant_url=None, search_mode="semantic")
        # The embedded store admits one process at a time, so the two paths take turns: in each round
        # the in-process rows with the store open here, then the HTTP rows with the API owning it
        # (with --pairs, cell by cell); each figure is the median of its rounds.
        backend = create_app(settings).state.backend
        try:
            report = backend.indexer().ingest([PROJECT_ROOT / "samples" / "docs"])
        finally:
            backend.close()
        rounds: list[list[dict]] = []
        for r in range(args.rounds):
            if args.pairs:  # each HTTP row right after its in-process twin: the machine's drift hits both alike
                done = []
                for what in args.what:
                    for c in args.clients:
                        done += in_process_rows(settings, n, [c], [what])
                        done += http_rows(settings, args, n, [c], [what], done, tmp)
            else:
                done = in_process_rows(settings, n, args.clients, args.what)
                done += http_rows(settings, args, n, args.clients, args.what, done, tmp)
            rounds.append(done)
            print(f"  round {r + 1}/{args.rounds} done, load average {fmt_load()}", flush=True)
        rows = [median_row([rnd[i] for rnd in rounds]) for i in range(len(rounds[0]))]
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    results = {"machine": machine_line(), "chunks": report.embedded_chunks, "client": args.client, "rounds": args.rounds,
               "pairs": args.pairs,
               "server_cpus": sorted(args.server_cpus or []), "load_cpus": sorted(args.load_cpus or []),
               "load_average": [start_load, fmt_load()], "rows": rows}
    print(f"machine: {results['machine']}")
    print(f"load average: {start_load} at the start, {fmt_load()} at the end; {args.rounds} rounds, medians")
    if args.server_cpus:
        print(f"CPUs: this process, Triton and the API on {sorted(args.server_cpus)}; wrk apart on "
              f"{sorted(args.load_cpus or [])} (rows '{APART.strip(', ')}') and on the server's CPUs (the others)")
    print(f"index: samples/docs, {results['chunks']} chunks; {n} requests per in-process row, top_k 5, semantic (MiniLM); "
          f"HTTP load from {args.client}")
    print(f"{'path':50} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>10} {'Triton ms/req':>13} "
          f"{'batch':>5}   rounds (req/s; p99 ms; steal %)")
    for r in rows:
        print(f"{r['path']:50} {r['clients']:>7} {r['rps']:>8.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['cpu_ms_per_request']:>10.2f} {r['triton_cpu_ms_per_request']:>13.2f} {r['encoder_batch']:>5.2f}   {r['rounds_rps']}; "
              f"{r['rounds_p99_ms']}; {r['rounds_steal_pct']}")
    for what in args.what:
        for c in args.clients:
            local = row(rows, IN_PROCESS_PATH.format(what=what), c)
            for http in (r for r in rows if r["clients"] == c and r["path"].startswith(HTTP_PATH.format(what=what))):
                label = "HTTP, load apart" if http["path"].endswith(APART) else "HTTP"
                ratios = paired_ratios(rounds, what, c, http["path"])
                print(f"{what:>10}, {c:>2} clients: {label} / in-process throughput = {http['rps'] / local['rps']:.2f}x, "
                      f"p50 overhead = {http['p50_ms'] - local['p50_ms']:+.2f} ms, "
                      f"CPU per request {http['cpu_ms_per_request'] - local['cpu_ms_per_request']:+.2f} ms; "
                      f"round by round {ratios} (median {statistics.median(ratios):.2f}x)")
                results.setdefault("round_ratios", {})[f"{what}, {c}, {label}"] = ratios
                results.setdefault("ratio", {})[slug(f"{what} {c} {label}")] = round(statistics.median(ratios), 3)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("bench_api", {**results, "rows": keyed(rows, "path", "clients")}, load_before=load_before, quick=args.quick)


if __name__ == "__main__":
    main()
