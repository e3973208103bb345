"""Served-model throughput and latency on a Triton server, optionally next to a baseline server in
the same run (on a GPU host: the GPU configs against config.pbtxt, the CPU setup), with ratios and
the baseline's outputs as the reference (min cosine per model: TensorRT FP16 must stay >= 0.999).

    python bench/bench_gpu.py --url HOST:8001 [--baseline-url HOST:9001] [--families minilm,clip_image,ppocr]
                              [--batch 16] [--concurrency 1,8,32] [--seconds 15] [--json FILE] [--quick]
                              [--text-repo triton_repo]

On the GPU host (docs/deploy.md, "Measuring on the GPU"): the compose stack serves the GPU configs
on triton:8001; a second Triton from the same image with TRITON_MODEL_CONFIG=default serves the
CPU configs as the baseline. The requests are the service's own calls (search.models.*), so they
include pre/post-processing in Triton; the inputs are the sample knowledge base's passages, the
sample queries and generated 640x480 photos; OCR (`ppocr`, one request per image, `--batch` images
per call) reads the golden text images and the demo's whiteboard photo, and its fidelity is the
cosine of the character counts of what both servers read (1.0: the same characters). Triton's statistics give the batch sizes the
encoder actually ran and its queue/compute time per request.

CLIP text is sent at its own length (clip_text_tokenize pads a batch to its longest text; the TRT
profile spans 1..77 tokens): `clip_text` (short queries) and `clip_text_long` (~60-word captions,
some cut at 77) show the widths sent. `--text-repo` adds the text graph in-process on this host
(model.onnx, the graph the GPU configs serve; CUDA execution provider where onnxruntime has it,
else CPU) at 77 tokens versus each batch's own length, with the min cosine between the two: the
variable-length gain without Triton, as bench/bench_clip.py measures it on a CPU.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import keyed, load, record  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models import bge_m3, clip, golden, minilm, ppocr  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.steps import tokens  # noqa: E402

QUERIES = [q["query"] for q in json.loads((PROJECT_ROOT / "samples" / "queries.json").read_text())]


def passages() -> list[str]:
    """The sample knowledge base as ~150-word passages (what ingest sends)."""
    words = " ".join(p.read_text(errors="replace") for p in sorted((PROJECT_ROOT / "samples" / "docs").glob("*"))
                     if p.is_file()).split()
    return [" ".join(words[i:i + 150]) for i in range(0, max(1, len(words) - 150), 150)]


def photos(n: int) -> list[bytes]:
    out = []
    for seed in range(n):
        rng = np.random.default_rng(seed)
        small = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)  # smooth-ish content, like a photo's JPEG size
        buf = io.BytesIO()
        Image.fromarray(small).resize((640, 480), Image.BILINEAR).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def text_images() -> list[bytes]:
    """Images with text: the golden ones (rendered, a scanned page, a sign, a rotated page) and the demo's whiteboard."""
    return [s.data for s in golden.inputs().scans] + [(PROJECT_ROOT / "samples/scans/whiteboard-wifi.jpg").read_bytes()]


def read_texts(client: TritonClient, images: list[bytes]) -> np.ndarray:
    """What OCR reads in each image, as its character counts (what fidelity compares)."""
    out = np.zeros((len(images), 256), np.float32)
    for k, data in enumerate(images):
        for ch in "".join(line.text for line in ppocr.read(client, data)):
            out[k, ord(ch) % 256] += 1
    out[:, 0] += 1e-3  # an image without text still has a direction
    return out


# family -> (ensemble, encoder step, make a batch, call, outputs to compare)
def long_captions() -> list[str]:
    """Captions of ~60 words from the sample passages: near CLIP's 77-token context, some cut there."""
    words = " ".join(passages()).split()
    return [" ".join(words[i:i + 60]) for i in range(0, max(1, len(words) - 60), 60)]


def workloads(batch: int) -> dict:
    texts, queries, images, captions, scans = passages(), QUERIES, photos(max(batch, 8)), long_captions(), text_images()

    def cycle(items: list, i: int) -> list:
        return [items[(i * batch + k) % len(items)] for k in range(batch)]

    ensemble = minilm.ensemble_for(batch)  # where minilm.embed sends a request of this size
    step = f"{ensemble}_onnx"
    return {
        "minilm": (ensemble, step, lambda i: cycle(texts, i), lambda c, x: minilm.embed(c, x)[0]),
        "minilm_query": (ensemble, step, lambda i: cycle(queries, i), lambda c, x: minilm.embed(c, x)[0]),
        "clip_text": ("clip_text", "clip_textual", lambda i: cycle(queries, i), lambda c, x: clip.embed_texts(c, x)[0]),
        "clip_text_long": ("clip_text", "clip_textual", lambda i: cycle(captions, i), lambda c, x: clip.embed_texts(c, x)[0]),
        "clip_image": ("clip_image", "clip_visual", lambda i: cycle(images, i), clip.embed_images),
        "bge_m3": ("bge_m3", "bge_m3_onnx", lambda i: cycle(texts, i),
                   lambda c, x: np.stack([o.dense for o in bge_m3.encode(c, x)])),
        "ppocr": ("ppocr", "ppocr_rec_onnx", lambda i: cycle(scans, i), read_texts),
    }


def step_stats(client: TritonClient, model: str) -> dict:
    st = client._client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    inf = st.get("inference_stats", {})
    return {"inferences": int(st.get("inference_count", 0)), "executions": int(st.get("execution_count", 0)),
            "requests": int(inf.get("success", {}).get("count", 0)),
            "queue_ns": int(inf.get("queue", {}).get("ns", 0)), "compute_ns": int(inf.get("compute_infer", {}).get("ns", 0))}


def run(client: TritonClient, name: str, work, clients: int, seconds: float, batch: int) -> dict:
    _, step, make, call = work
    before = step_stats(client, step)
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(w: int) -> None:
        i = w
        while time.perf_counter() < stop:
            x = make(i)
            t = time.perf_counter()
            call(client, x)
            with lock:
                latencies.append(time.perf_counter() - t)
            i += clients

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    elapsed = time.perf_counter() - start
    after = step_stats(client, step)
    d = {k: after[k] - before[k] for k in after}
    ms = np.array(latencies) * 1000
    return {"workload": name, "clients": clients, "batch": batch, "requests": len(ms),
            "items_per_s": round(len(ms) * batch / elapsed, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "encoder_avg_batch": round(d["inferences"] / d["executions"], 1) if d["executions"] else None,
            "encoder_queue_ms": round(d["queue_ns"] / d["requests"] / 1e6, 2) if d["requests"] else None,
            "encoder_compute_ms": round(d["compute_ns"] / d["requests"] / 1e6, 2) if d["requests"] else None}


def token_width(client: TritonClient, texts: list[str]) -> int:
    """How many tokens clip_text_tokenize sends the text tower for one request of ``texts``."""
    from search.triton.client import text_tensor

    return int(client.infer("clip_text_tokenize", {"TEXT": text_tensor(texts)}, ["input_ids"])["input_ids"].shape[1])


def text_tower(repo: Path, batch: int, rounds: int = 3) -> dict:
    """CLIP's text graph in-process: the sample queries and long captions in batches of ``batch``,
    each padded to 77 tokens versus to the batch's longest (what clip_text_tokenize sends)."""
    import onnxruntime as ort  # only --text-repo needs them in the client
    from tokenizers import Tokenizer

    text = json.loads((repo / "clip_text_tokenize/1/text.json").read_text())
    tok = Tokenizer.from_file(str(repo / "clip_text_tokenize/1/tokenizer.json"))
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    providers = [p for p in wanted if p in ort.get_available_providers()]
    sess = ort.InferenceSession(str(repo / "clip_textual/1/model.onnx"), providers=providers)
    out: dict = {"provider": sess.get_providers()[0], "batch": batch}
    for label, items in (("queries", QUERIES), ("captions", long_captions())):
        batches = [items[i:i + batch] for i in range(0, len(items), batch)]
        vecs, ms, widths = {}, {}, {}
        for name, width in (("padded_77", text["context_length"]), ("own_length", None)):
            feeds = [tokens.pad(tokens.encode(tok, b, text["context_length"]), text["pad_id"], width=width) for b in batches]
            feeds = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in feeds]
            vecs[name] = np.concatenate([sess.run(None, f)[0] for f in feeds])  # also the warm-up
            best = float("inf")
            for _ in range(rounds):
                start = time.perf_counter()
                for f in feeds:
                    sess.run(None, f)
                best = min(best, time.perf_counter() - start)
            ms[name] = round(best / len(feeds) * 1000, 3)
            widths[name] = round(float(np.mean([f["input_ids"].shape[1] for f in feeds])), 1)
        out[label] = {"ms_per_batch": ms, "tokens": widths, "speedup": round(ms["padded_77"] / ms["own_length"], 2),
                      "min_cosine": round(min_cosine(vecs["padded_77"], vecs["own_length"]), 7)}
    return out


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return float(np.min(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def machine(extra: str | None) -> str:
    gpu = "no nvidia-smi here"
    if shutil.which("nvidia-smi"):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().replace("\n", "; ")
    return f"{platform.machine()}, {os.cpu_count()} client cores, GPU: {gpu}" + (f"; {extra}" if extra else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="gRPC address of the server to measure, e.g. triton:8001")
    ap.add_argument("--baseline-url", help="gRPC address of the baseline server (e.g. the CPU configs)")
    ap.add_argument("--families", default="minilm,minilm_query,clip_text,clip_text_long,clip_image,bge_m3,ppocr",
                    help="workloads to run (those whose ensemble is not ready are skipped)")
    ap.add_argument("--batch", type=int, default=16, help="items per request (the ingest batch is 16)")
    ap.add_argument("--concurrency", default="1,8,32", help="concurrent clients, comma-separated")
    ap.add_argument("--seconds", type=float, default=15.0, help="per workload and concurrency")
    ap.add_argument("--machine", help="what to record about the host (GPU model, load)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--quick", action="store_true", help="2 s per point, concurrency 1 and 8: a smoke run")
    ap.add_argument("--text-repo", type=Path, help="a model repository with CLIP built: also time its text graph "
                    "in-process at 77 tokens vs its own length")
    ap.add_argument("--text-only", action="store_true", help="only the in-process text graph (no server needed)")
    args = ap.parse_args()
    load_before = load()
    if args.quick:
        args.seconds, args.concurrency = 2.0, "1,8"
    concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.text_only:
        if not args.text_repo:
            ap.error("--text-only needs --text-repo")
        tower = text_tower(args.text_repo, args.batch)
        report_text_tower(tower)
        record("bench_gpu", {"machine": machine(args.machine), "text_tower": tower}, load_before=load_before)
        return
    if not args.url:
        ap.error("--url is required (or --text-only with --text-repo)")
    servers = {"measured": TritonClient(args.url, 120.0)}
    if args.baseline_url:
        servers["baseline"] = TritonClient(args.baseline_url, 120.0)
    all_work = workloads(args.batch)
    chosen = {}
    for name in args.families.split(","):
        ensemble = all_work[name][0]
        if all(c.model_ready(ensemble) for c in servers.values()):
            chosen[name] = all_work[name]
        else:
            print(f"skipping {name}: '{ensemble}' is not ready on every server")
    results = {"machine": machine(args.machine), "load_start": os.getloadavg(), "servers": {k: c.url for k, c in servers.items()},
               "rows": [], "fidelity": {}, "tokens": {}}
    print(f"machine: {results['machine']}; load average {results['load_start']}")
    for name, work in chosen.items():
        sample = work[2](0)
        outputs = {}
        for label, client in servers.items():
            outputs[label] = work[3](client, sample)  # also warms up (TensorRT builds or loads its engine)
        if "baseline" in outputs:
            results["fidelity"][name] = round(min_cosine(outputs["measured"], outputs["baseline"]), 6)
        if work[0] == "clip_text":
            results["tokens"][name] = {label: token_width(client, sample) for label, client in servers.items()}
        for clients in concurrency:
            for label, client in servers.items():
                row = {"server": label, **run(client, name, work, clients, args.seconds, args.batch)}
                results["rows"].append(row)
    if args.text_repo:
        results["text_tower"] = text_tower(args.text_repo, args.batch)
    results["load_end"] = os.getloadavg()
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    record("bench_gpu", {**results, "rows": keyed(results["rows"], "server", "workload", "clients")},
           load_before=load_before, quick=args.quick)


def report(results: dict) -> None:
    rows = results["rows"]
    head = f"{'workload':13} {'server':9} {'clients':>7} {'items/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'enc batch':>9} {'enc queue':>9} {'enc compute':>11} {'x baseline':>10}"
    print(head)
    base = {(r["workload"], r["clients"]): r for r in rows if r["server"] == "baseline"}
    for r in rows:
        b = base.get((r["workload"], r["clients"]))
        ratio = f"{r['items_per_s'] / b['items_per_s']:.2f}" if b and r["server"] == "measured" and b["items_per_s"] else ""
        print(f"{r['workload']:13} {r['server']:9} {r['clients']:>7} {r['items_per_s']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['encoder_avg_batch'] or '-':>9} {r['encoder_queue_ms'] or '-':>9} {r['encoder_compute_ms'] or '-':>11} {ratio:>10}")
    for name, cos in results["fidelity"].items():
        print(f"fidelity {name}: min cosine measured vs baseline {cos}")
    for name, widths in results["tokens"].items():
        print(f"tokens per text sent to the text tower, {name}: " + ", ".join(f"{k} {v}" for k, v in widths.items())
              + " (context 77)")
    if "text_tower" in results:
        report_text_tower(results["text_tower"])
    print(f"load average at end {results['load_end']}")


def report_text_tower(t: dict) -> None:
    for label in ("queries", "captions"):
        r = t[label]
        print(f"text graph in-process ({t['provider']}, {label}, {t['batch']} per batch): "
              f"{r['ms_per_batch']['padded_77']} ms at 77 tokens, {r['ms_per_batch']['own_length']} ms at the batch's "
              f"longest ({r['tokens']['own_length']} tokens on average): {r['speedup']}x; min cosine {r['min_cosine']}")


if __name__ == "__main__":
    main()
