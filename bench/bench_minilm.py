"""MiniLM throughput: Triton `minilm` over gRPC (fp32, and the opt-in int8 build) vs in-process
onnxruntime on the same ONNX files vs in-process sentence-transformers, and the ingest rate of
`indexer ingest`, in one run.

    python bench/bench_minilm.py [--quick] [--json FILE] [--no-int8] [--no-ingest] [--rounds N]

Needs `search models build` first (fp32: the worktree's triton_repo); the int8 model is built by
the script into a temporary copy with the project's own `MiniLM().build(precision="int8")`. Starts
its own Triton servers on free ports. Sentences come from ../shared/data/stsb (real STS-B
sentences) when present, else from samples/docs.

Every path runs the same batches; the paths take turns, round after round (--rounds, default 3),
and each figure is the median of its rounds, so a burst of load from other processes hits every
path alike. The load average is printed at the start and the end: compare ratios within one run.
In-process onnxruntime runs both graphs the build writes: model.onnx (as exported: what was served
before issue 18) and model.cpu.onnx (what config.pbtxt serves: the packed graph, which runs the
encoder on the real tokens only, the fused one, or the exported one, whichever the build timed
fastest; the build manifest's cpu_graph says which). Every path gets the same requests of 32
sentences in the data's order, each padded to its longest as sentence-transformers pads it.

The ratios at 32 sentences per request are also measured in paired passes: sentence-transformers,
in-process onnxruntime on the served file and the served model (1 client) taking turns in blocks of
8 requests, so that all three see the same phases of the machine's speed (whole rounds, ~5 s per
path, can land in different phases of a shared VM). With them it prints where a served request
spends its time: Triton's own statistics per step, against in-process tokenize and run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import numpy as np  # noqa: E402

from bench.common import fmt_load, keyed, load, machine_line, record, serve  # noqa: E402
from bench.timing import measure, paired, stats_delta, triton_stats  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM, minilm  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402

SHARED = PROJECT_ROOT.parent / "shared" / "data"
GOALS = {"served_vs_st": 1.5, "served_vs_ort": 0.95, "int8_vs_st": 2.5}  # issue 18, 32 sentences per request


def load_sentences(n: int) -> list[str]:
    stsb = SHARED / "stsb" / "dev.tsv"
    out: list[str] = []
    if stsb.exists():
        for line in stsb.read_text().splitlines()[1:]:
            cols = line.rstrip("\r").split("\t")  # split genre dataset year sid score sentence1 sentence2
            if len(cols) >= 8:
                out += [cols[6], cols[7]]
    else:
        for f in sorted((PROJECT_ROOT / "samples" / "docs").iterdir()):
            out += [s.strip() for s in f.read_text().replace("\n", " ").split(". ") if s.strip()]
    return (out * (n // max(len(out), 1) + 1))[:n]


def rate(fn, batches: list[list[str]], concurrency: int = 1) -> float:
    """Sentences per second for running fn over every batch with `concurrency` threads."""
    return measure(fn, batches, concurrency)[0]


def chunks(xs: list[str], size: int) -> list[list[str]]:
    return [xs[i:i + size] for i in range(0, len(xs), size)]


def ort_embedder(repo: Path, graph: str):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MiniLM().tokenizer_path(repo)))
    tok.no_padding()
    tok.enable_truncation(minilm.MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    sess = ort.InferenceSession(str(repo / "minilm_onnx/1" / graph), providers=["CPUExecutionProvider"])

    def embed(batch: list[str]) -> np.ndarray:
        start = time.perf_counter()
        enc = tok.encode_batch(batch)
        feed = {"input_ids": np.array([e.ids for e in enc], np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}
        ran = time.perf_counter()
        out = sess.run(None, feed)[0]
        embed.spent["tokenize"] += ran - start
        embed.spent["run"] += time.perf_counter() - ran
        embed.spent["calls"] += 1
        return out

    embed.spent = {"tokenize": 0.0, "run": 0.0, "calls": 0}
    return embed


def served_embedder(url: str):
    clients: dict[int, TritonClient] = {}

    def embed(batch: list[str]) -> np.ndarray:
        c = clients.setdefault(threading.get_ident(), TritonClient(url))
        return minilm.embed(c, batch)[0]

    return embed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sentences (a smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--no-int8", action="store_true", help="skip the int8 build and its rows")
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest measurement")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every path (median reported)")
    args = ap.parse_args()
    load_before = load()
    settings = Settings()
    repo = settings.triton_repo
    if not MiniLM().is_built(repo) or MiniLM().precision(repo) != "fp32":
        sys.exit("build the fp32 model first: search models build")
    n32, n1 = (256, 64) if args.quick else (2048, 256)
    sentences = load_sentences(n32)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm.package_weights()), device="cpu")

    def st_embed(batch: list[str]) -> np.ndarray:
        return st.encode(batch, batch_size=len(batch), normalize_embeddings=True)

    results: dict = {"machine": machine_line(), "load_start": os.getloadavg(), "sentences": n32, "rounds": args.rounds,
                     "rows": []}
    print(f"machine: {results['machine']}; load average {fmt_load(results['load_start'])}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-minilm-"))
    servers = []
    try:
        paths: dict[tuple[str, int, int], tuple] = {}
        served_graph = MiniLM().manifest(repo)["cpu_graph"].get("served", "exported")
        for per_req in (1, 32):
            paths[("in-process sentence-transformers", per_req, 1)] = (st_embed, 1, None)
            paths[("in-process onnxruntime, model.onnx (exported)", per_req, 1)] = (ort_embedder(repo, "model.onnx"), 1, None)
            if served_graph != "exported":
                paths[(f"in-process onnxruntime, model.cpu.onnx ({served_graph})", per_req, 1)] = \
                    (ort_embedder(repo, "model.cpu.onnx"), 1, None)
        servers.append(serve(repo, tmp / "run-fp32", MiniLM()))
        fp32 = served_embedder(f"127.0.0.1:{servers[0].grpc_port}")
        for per_req, clients in ((1, 1), (1, 8), (1, 32), (32, 1), (32, 8)):
            paths[("Triton minilm fp32 (gRPC)", per_req, clients)] = (fp32, clients, servers[0].state.pid)
        if not args.no_int8:
            add_int8_paths(repo, tmp, paths, servers)
        results["served_graph"] = served_graph
        batches = {1: chunks(sentences[:n1], 1), 32: chunks(sentences, 32)}
        for (_, per_req, _), (fn, _, _) in paths.items():
            fn(batches[per_req][0])  # warm-up
        got: dict[tuple, list[tuple[float, float]]] = {k: [] for k in paths}
        same_key = next(k for k in paths if k[0].startswith("in-process onnxruntime, model.") and k[1] == 32
                        and ("model.cpu" in k[0]) == (served_graph != "exported"))
        for r in range(args.rounds):
            for key, (fn, clients, pid) in paths.items():
                got[key].append(measure(fn, batches[key[1]], clients, pid))
            print(f"  round {r + 1}/{args.rounds} done, load average {fmt_load(os.getloadavg())}", flush=True)
        url = f"127.0.0.1:{servers[0].grpc_port}"
        ort = paths[same_key][0]
        before, ort_before = triton_stats(url), dict(ort.spent)
        trio = {"st": st_embed, "ort": ort, "served": fp32}
        results["paired"] = [paired(trio, batches[32]) for _ in range(args.rounds)]
        results["where"] = {"served_s": sum(p["served"] for p in results["paired"]),
                            "stages": stats_delta(before, triton_stats(url)),
                            "ort": {k: ort.spent[k] - ort_before[k] for k in ort.spent}}
        print(f"  paired passes done, load average {fmt_load(os.getloadavg())}", flush=True)
        results["rows"] += [median_row(key, runs) for key, runs in got.items()]
        if not args.no_ingest:
            url = f"127.0.0.1:{servers[0].grpc_port}"
            results["ingest"] = measure_ingest(settings, url, quick=args.quick,
                                               ort_embed=ort_embedder(repo, "model.cpu.onnx"))
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_end"] = os.getloadavg()
    results["paired_ratios"] = {k: round(v, 3) for k, v in paired_ratios(results).items()}
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("bench_minilm", {**results, "rows": keyed(results["rows"], "path", "per_request", "clients")},
           load_before=load_before, quick=args.quick)


def median_row(key: tuple[str, int, int], runs: list[tuple[float, float]]) -> dict:
    """A path's row: its rounds' (sentences/s, CPU ms per sentence), medians and the rounds themselves."""
    name, per_req, clients = key
    return {"path": name, "per_request": per_req, "clients": clients,
            "sentences_per_s": round(statistics.median(x[0] for x in runs), 1),
            "cpu_ms_per_sentence": round(statistics.median(x[1] for x in runs), 3),
            "rounds": [round(x[0], 1) for x in runs]}


def add_int8_paths(repo: Path, tmp: Path, paths: dict, servers: list) -> None:
    """An int8 build of the model in a copy of ``repo``: its graph in-process and served (the server
    joins ``servers``), as more rows of ``paths``."""
    int8_repo = tmp / "int8" / "triton_repo"
    shutil.copytree(repo, int8_repo, ignore=shutil.ignore_patterns("clip*", "bge_m3*", "ofa*"))
    built = MiniLM().build(int8_repo, "package", precision="int8", force=True)
    print(f"int8 build: {built.status}: {built.detail}", flush=True)
    paths[("in-process onnxruntime, int8 model.cpu.onnx", 32, 1)] = (ort_embedder(int8_repo, "model.cpu.onnx"), 1, None)
    servers.append(serve(int8_repo, tmp / "run-int8", MiniLM()))
    int8 = served_embedder(f"127.0.0.1:{servers[-1].grpc_port}")
    for clients in (1, 8):
        paths[("Triton minilm int8 (gRPC)", 32, clients)] = (int8, clients, servers[-1].state.pid)


def measure_ingest(settings: Settings, url: str, quick: bool, ort_embed) -> dict:
    """`indexer ingest` end to end on MS MARCO passages written as .txt files, fresh store."""
    corpus = SHARED / "beir-msmarco-mini" / "corpus.jsonl"
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    docs = tmp / "docs"
    docs.mkdir()
    n_files = 300 if quick else 2000
    if corpus.exists():
        with corpus.open() as f:
            for _, line in zip(range(n_files), f):
                d = json.loads(line)
                (docs / f"{d['_id']}.txt").write_text(f"{d.get('title', '')}\n\n{d['text']}")
    else:
        for i, s in enumerate(load_sentences(n_files)):
            (docs / f"{i}.txt").write_text(s)
    s = settings.model_copy(update={"data_dir": tmp / "data", "triton_url": url, "qdrant_url": None})
    svc = SearchService(s)
    try:
        start = time.perf_counter()
        rep = IngestService(svc.settings, svc.resources).ingest([docs])
        seconds = time.perf_counter() - start
        again = time.perf_counter()
        IngestService(svc.settings, svc.resources).ingest([docs])
        rerun = time.perf_counter() - again
        texts = [p.payload["text"] for p in svc.store.scroll("documents", limit=100_000, with_payload=["text"])[0]]
    finally:
        svc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    # Baseline: the same chunks through in-process onnxruntime, batched and length-sorted like ingest.
    window = s.embed_batch_size * 4
    ordered = [t for i in range(0, len(texts), window) for t in sorted(texts[i:i + window], key=len)]
    ort_embed(ordered[:s.embed_batch_size])  # warm-up
    raw = rate(ort_embed, chunks(ordered, s.embed_batch_size))
    return {"files": n_files, "chunks": rep.embedded_chunks, "seconds": round(seconds, 2),
            "chunks_per_s": round(rep.embedded_chunks / seconds, 1), "files_per_s": round(n_files / seconds, 1),
            "unchanged_rerun_s": round(rerun, 2), "inprocess_ort_chunks_per_s": round(raw, 1),
            "batch_size": s.embed_batch_size, "concurrency": s.embed_concurrency}


def report(results: dict) -> None:
    rows = results["rows"]
    print(f"machine: {results['machine']}")
    print(f"load average: {fmt_load(results['load_start'])} at the start, {fmt_load(results['load_end'])} at the end")
    print(f"served fp32 graph (model.cpu.onnx): the {results['served_graph']} one (see the build manifest's cpu_graph)")
    print(f"{'path':50} {'sent/req':>8} {'clients':>7} {'sent/s':>9} {'CPU ms/sent':>11}   rounds (sent/s)")
    for r in rows:
        print(f"{r['path']:50} {r['per_request']:>8} {r['clients']:>7} {r['sentences_per_s']:>9.1f} "
              f"{r['cpu_ms_per_sentence']:>11.3f}   {r['rounds']}")

    def get(prefix: str, per_req: int, clients: int | None = None, key: str = "sentences_per_s") -> float | None:
        got = [r[key] for r in rows if r["path"].startswith(prefix) and r["per_request"] == per_req
               and (clients is None or r["clients"] == clients)]
        return (max(got) if key == "sentences_per_s" else min(got)) if got else None

    same_file = "in-process onnxruntime, model.cpu" if results["served_graph"] != "exported" else "in-process onnxruntime, model.onnx"
    for per_req in (1, 32):
        st, ort_same = get("in-process sentence", per_req), get(same_file, per_req)
        one, best = get("Triton minilm fp32", per_req, 1), get("Triton minilm fp32", per_req)
        cpu = {k: get(p, per_req, key="cpu_ms_per_sentence") for k, p in
               (("st", "in-process sentence"), ("ort", same_file), ("served", "Triton minilm fp32"))}
        print(f"{per_req} sent/req: served fp32 (1 client) / in-process onnxruntime, same file = {one / ort_same:.2f}x; "
              f"best served fp32 / sentence-transformers = {best / st:.2f}x; CPU per sentence: sentence-transformers "
              f"{cpu['st']:.2f} ms, onnxruntime {cpu['ort']:.2f} ms, served {cpu['served']:.2f} ms (least over client counts)")
    report_where(results)
    st, same, best = get("in-process sentence", 32), get(same_file, 32), get("Triton minilm fp32", 32)
    one = get("Triton minilm fp32", 32, 1)
    checks = [("served fp32 / sentence-transformers", best / st, GOALS["served_vs_st"]),
              ("served fp32 (1 client) / in-process onnxruntime", one / same, GOALS["served_vs_ort"])]
    int8 = get("Triton minilm int8", 32)
    if int8:
        checks.append(("served int8 / sentence-transformers", int8 / st, GOALS["int8_vs_st"]))
        print(f"32 sent/req: served int8 / served fp32 = {int8 / best:.2f}x; int8 in-process / fp32 in-process (same build) = "
              f"{get('in-process onnxruntime, int8', 32) / same:.2f}x")
    ratios = paired_ratios(results)
    if ratios:
        checks += [("served fp32 (1 client) / sentence-transformers, paired passes", ratios["served_vs_st"],
                    GOALS["served_vs_st"]),
                   ("served fp32 (1 client) / in-process onnxruntime, paired passes", ratios["served_vs_ort"],
                    GOALS["served_vs_ort"])]
    for name, ratio, goal in checks:
        print(f"GOAL {name} = {ratio:.2f}x (goal >= {goal}x): {'met' if ratio >= goal else 'NOT met'}")
    ing = results.get("ingest")
    if ing:
        print(f"ingest: {ing['files']} files, {ing['chunks']} chunks in {ing['seconds']} s = {ing['chunks_per_s']} chunks/s "
              f"({ing['files_per_s']} files/s; batch {ing['batch_size']}, {ing['concurrency']} in flight); "
              f"unchanged re-run {ing['unchanged_rerun_s']} s")
        print(f"ingest / in-process onnxruntime on the same chunks ({ing['inprocess_ort_chunks_per_s']} chunks/s) = "
              f"{ing['chunks_per_s'] / ing['inprocess_ort_chunks_per_s']:.2f}x")


def paired_ratios(results: dict) -> dict[str, float]:
    """Over all paired passes: served ÷ sentence-transformers, served ÷ onnxruntime, onnxruntime ÷
    sentence-transformers (each the ratio of the time the two took for the same requests)."""
    passes = results.get("paired") or []
    if not passes:
        return {}
    total = {k: sum(p[k] for p in passes) for k in passes[0]}
    return {"served_vs_st": total["st"] / total["served"], "served_vs_ort": total["ort"] / total["served"],
            "ort_vs_st": total["st"] / total["ort"]}


def report_where(results: dict) -> None:
    """The paired passes' ratios, and where their served requests spent the time (Triton's own
    statistics per step) next to in-process onnxruntime's tokenize and run in the same passes."""
    ratios, passes = paired_ratios(results), results.get("paired") or []
    if not ratios:
        return
    print(f"paired passes ({len(passes)}; blocks of 8 requests of 32 sentences, the three paths taking turns): "
          f"served fp32 (1 client) / in-process onnxruntime, same file = {ratios['served_vs_ort']:.2f}x "
          f"(per pass {[round(p['ort'] / p['served'], 3) for p in passes]}); served fp32 (1 client) / "
          f"sentence-transformers = {ratios['served_vs_st']:.2f}x (per pass "
          f"{[round(p['st'] / p['served'], 3) for p in passes]}); onnxruntime / sentence-transformers = "
          f"{ratios['ort_vs_st']:.2f}x")
    w = results["where"]
    stages = w["stages"]

    def ms(model: str, stage: str) -> float:
        got = stages.get(model, {})
        return got.get(stage, 0.0) / max(got.get("requests", 0), 1)

    wall = 1000 * w["served_s"] / max(stages.get("minilm", {}).get("requests", 0), 1)
    tok, enc, ens = ms("minilm_tokenize", "success"), ms("minilm_onnx", "success"), ms("minilm", "success")
    calls = max(w["ort"]["calls"], 1)
    o_tok, o_run = 1000 * w["ort"]["tokenize"] / calls, 1000 * w["ort"]["run"] / calls
    print(f"  served, per request: {wall:.1f} ms = tokenizer step {tok:.2f} (queue {ms('minilm_tokenize', 'queue'):.2f}, "
          f"execute {ms('minilm_tokenize', 'compute_infer'):.2f}) + encoder step {enc:.2f} (queue "
          f"{ms('minilm_onnx', 'queue'):.2f}, execute {ms('minilm_onnx', 'compute_infer'):.2f}, outputs "
          f"{ms('minilm_onnx', 'compute_output'):.2f}) + the ensemble's own {ens - tok - enc:.2f} + gRPC and the client "
          f"{wall - ens:.2f}")
    print(f"  in-process onnxruntime, per request: {o_tok + o_run:.1f} ms = tokenize {o_tok:.2f} + run {o_run:.2f}; "
          f"served minus in-process {wall - o_tok - o_run:+.2f} ms, of which the encoder step's execute minus the "
          f"in-process run {ms('minilm_onnx', 'compute_infer') - o_run:+.2f} (the same graph, in Triton's stub process)")


if __name__ == "__main__":
    main()
