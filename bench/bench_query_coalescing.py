"""Concurrent one-text MiniLM queries: each its own request (what document search sends today)
against the queries that wait on one in flight coalesced into one request (search/triton/coalesce.py,
what photo search's text queries do), to see what the same for document queries would give.

    python bench/bench_query_coalescing.py [--rounds N] [--queries N] [--json FILE]

Needs MiniLM built (`search models build`). Starts its own Triton on the project's triton_repo.
Clients are threads of this process, each sending MS MARCO dev queries (../shared/data) one at a time
(encoding only: no store). Three ways, taking turns, per client count:
- `each`: one `minilm_query` request per query (its two single-threaded instances);
- `coalesced → minilm_query`: the waiting queries as one `minilm_query` request (one instance busy);
- `coalesced → minilm_query ×2`: the same with two requests in flight (both instances busy);
- `coalesced → minilm`: the same to the batch ensemble (one two-threaded instance, the CPU graph).
Per row: queries/s, p50/p99, CPU ms per query of Triton's process tree and of this process, and the
mean queries per request. Ratios compare only within a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import numpy as np  # noqa: E402

from bench.common import keyed, load, machine_line, record, serve, slug  # noqa: E402
from bench.timing import process_tree_cpu  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models import MiniLM  # noqa: E402
from search.triton.client import TritonClient, text_tensor  # noqa: E402
from search.triton.coalesce import Coalescer  # noqa: E402

QUERIES = PROJECT_ROOT.parent / "shared" / "data" / "beir-msmarco-mini" / "queries.jsonl"


def measure(encode, texts: list[str], clients: int, server_pid: int) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()

    def one(text: str) -> None:
        start = time.perf_counter()
        encode(text)
        with lock:
            latencies.append(time.perf_counter() - start)

    for text in texts[:5]:
        encode(text)  # warm-up
    triton, mine, start = process_tree_cpu(server_pid), time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, texts))
    wall, n = time.perf_counter() - start, len(texts)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    return {"qps": round(n / wall, 1), "p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1),
            "triton_cpu_ms": round((process_tree_cpu(server_pid) - triton) / n * 1000, 2),
            "client_cpu_ms": round((time.process_time() - mine) / n * 1000, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=400, help="queries per row")
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    load_before = load()
    texts = [json.loads(line)["text"] for line in QUERIES.read_text().splitlines() if line.strip()][:args.queries]
    results: dict = {"machine": machine_line(), "load_start": os.getloadavg(), "rows": []}
    print(f"machine: {results['machine']}; load average {results['load_start']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-coalesce-") as tmp:
        server = serve(PROJECT_ROOT / "triton_repo", Path(tmp) / "run", MiniLM())
        try:
            client = TritonClient(f"127.0.0.1:{server.grpc_port}")

            def send(model: str):
                return lambda batch: list(client.infer(model, {"TEXT": text_tensor(batch)}, ["EMBEDDING"])["EMBEDDING"])

            for clients in args.clients:
                for r in range(args.rounds):
                    coalescers = {"coalesced → minilm_query": Coalescer(send("minilm_query"), 64),
                                  "coalesced → minilm_query ×2": Coalescer(send("minilm_query"), 64, in_flight=2),
                                  "coalesced → minilm": Coalescer(send("minilm"), 64)}
                    ways = {"each": lambda text: send("minilm_query")([text])[0], **coalescers}
                    for way, encode in ways.items():
                        row = {"clients": clients, "round": r, "way": way,
                               **measure(encode, texts, clients, server.state.pid)}
                        if way in coalescers:
                            row["per_request"] = round(coalescers[way].items / coalescers[way].requests, 2)
                        results["rows"].append(row)
                        print(f"  {clients:>2} clients, round {r}, {way:<28} {row['qps']:>6} q/s, p50 {row['p50_ms']:>6} ms, "
                              f"p99 {row['p99_ms']:>6} ms, Triton {row['triton_cpu_ms']} ms/q, client {row['client_cpu_ms']} ms/q"
                              + (f", {row['per_request']} per request" if "per_request" in row else ""), flush=True)
        finally:
            server.stop()
    for clients in args.clients:
        qps = {way: statistics.median(r["qps"] for r in results["rows"] if r["clients"] == clients and r["way"] == way)
               for way in ("each", *coalescers)}
        print(f"{clients} clients, median q/s: " + ", ".join(f"{w} {q:.1f} ({q / qps['each']:.2f}x)" for w, q in qps.items()))
        results.setdefault("median_qps", {})[f"{clients}_clients"] = {slug(w): round(q, 1) for w, q in qps.items()}
    results["load_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("bench_query_coalescing", {**results, "rows": keyed(results["rows"], "clients", "way", "round")},
           load_before=load_before)


if __name__ == "__main__":
    main()
