"""CLIP photo search: ingest rate versus the raw visual encoder, and text-to-image query latency.

    python bench/bench_clip.py [--quick] [--json FILE] [--no-ingest] [--no-latency] [--no-padded]
                               [--ingest-rounds N] [--model-dir DIR]

Real CLIP weights cannot be had offline, so this builds a randomly initialised CLIP of
ViT-B/32's size (transformers' default CLIPConfig: ViT-B/32 vision tower, 12-layer text tower,
512-d projection) and exports it with the project's own `CLIP().build`: the costs are real,
the vectors meaningless. In one run:
- images/s of `indexer ingest` end to end (read, EXIF, thumbnail, Triton decode + preprocess +
  ViT, upsert) versus the served visual graph (model.cpu.onnx) alone in-process on the same,
  already preprocessed images (the two taking turns, 3 rounds by default: the ratio of the
  medians), with the CPU per photo of each ingest (the indexer's process, Triton's) and of the
  raw encoder, and the two pre-processing halves timed in-process (the indexer's decode and
  thumbnail, the server's decode and resize);
- text-to-image latency p50/p99 through the service layer (`SearchService.search_images`) on the
  default store (the embedded Qdrant engine) with its HNSW index built (`store.optimize`, what
  `search store optimize` and ingest run), at 10k and 100k photos, 1 and 8 clients, and its two
  parts alone (the clip_text ensemble; the store's search); stored vectors are realistic synthetic
  ones (bench/bench_store.py's clustered cone) inserted directly; with 8 clients, the queries
  coalesced as served against one clip_text request per query (before), taking turns, 3 rounds;
- the same queries with the text tokenizer padding to 77 tokens (the behaviour before issue 18:
  text.json variable_length false), unless --no-padded, and the text tower in-process at 77
  tokens versus the query's own length (min cosine between the two), and the 8 queries as one
  batch: the tower's floor for a round of 8 clients.
Photos: the 40 COCO photographs in ../shared/data/photos, each cropped a few ways so every file
is distinct content. The load average is printed at the start and end: compare ratios within a run.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
from qdrant_client import models  # noqa: E402

from bench.common import fmt_load, keyed, machine_line, payload, pid, record, sample, save_vit_b32, serve  # noqa: E402
from bench.common import load as load_average  # noqa: E402  (load() here is the line printed)
from bench.timing import busy_cores, machine_ticks, process_tree_cpu, take_turns, timed  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import clip  # noqa: E402
from search.models.clip import CLIP  # noqa: E402
from search.models.export.clip import TIMING_QUERIES  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.store import IMAGES, image_vector, images_schema  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402

PHOTOS = PROJECT_ROOT.parent / "shared" / "data" / "photos"
QUERIES = TIMING_QUERIES  # the build times the text graphs on these too
GOALS = {"ingest_ratio": 0.9, (10_000, 1): (20.0, 40.0), (100_000, 8): (60.0, None)}  # issue 18: p50, p99 ms


def make_photos(dest: Path, n: int) -> list[Path]:
    """n distinct JPEGs from the COCO photos (different crops of each)."""
    sources = sorted(PHOTOS.glob("*.jpg"))
    if not sources:
        sys.exit(f"no photos in {PHOTOS}")
    dest.mkdir(parents=True)
    out = []
    for i in range(n):
        src = Image.open(sources[i % len(sources)])
        k = i // len(sources)
        w, h = src.size
        box = (k * 7, k * 5, w - k * 3, h - k * 4)
        path = dest / f"{i:05d}.jpg"
        src.crop(box).save(path, "JPEG", quality=90)
        out.append(path)
    return out


def load() -> str:
    return f"load average {fmt_load()}"


# -- ingest
def raw_encoder_rate(repo: Path, photos: list[Path], batch: int) -> tuple[float, float]:
    """Images/s of the served visual graph alone, in-process, on the images already preprocessed, and
    its CPU milliseconds per photo (all its threads, spinning included)."""
    import onnxruntime as ort

    from search.triton.steps import clip_image as pre
    cfg = json.loads((repo / "clip_image_preprocess/1/preprocess.json").read_text())
    tensors = np.stack([pre.preprocess(p.read_bytes(), cfg, 100_000_000) for p in photos]).astype(np.float32)
    sess = ort.InferenceSession(str(repo / "clip_visual/1/model.cpu.onnx"), providers=["CPUExecutionProvider"])
    sess.run(None, {"pixel_values": tensors[:batch]})
    cpu, start = time.process_time(), time.perf_counter()
    for i in range(0, len(tensors), batch):
        sess.run(None, {"pixel_values": tensors[i:i + batch]})
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return len(tensors) / seconds, cpu * 1000 / len(tensors)


def per_photo_costs(repo: Path, photos: list[Path], tmp: Path) -> dict:
    """Milliseconds per photo of the two pre-processing halves, in-process (one core)."""
    from indexer.kinds import THUMBNAIL_DRAFT, THUMBNAIL_SIZE
    from search.media.photos import decode_photo, save_thumbnail
    from search.triton.steps import clip_image as pre

    cfg = json.loads((repo / "clip_image_preprocess/1/preprocess.json").read_text())
    data = [p.read_bytes() for p in photos]

    def client(d: bytes, i: int) -> None:  # what Photos.units does per photo (hashing is the pipeline's)
        photo, image = decode_photo(d, draft=THUMBNAIL_DRAFT)
        save_thumbnail(image, tmp / f"{i}.jpg", THUMBNAIL_SIZE)

    out = {}
    for name, fn in (("client_ms", client), ("server_pre_ms", lambda d, i: pre.preprocess(d, cfg, 100_000_000))):
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            for i, d in enumerate(data):
                fn(d, i)
            best = min(best, (time.perf_counter() - start) / len(data) * 1000)
        out[name] = round(best, 2)
    return out


def measure_ingest(settings: Settings, repo: Path, photos: list[Path], tmp: Path, server_pid: int, rounds: int = 3) -> dict:
    """Ingest end to end against the raw visual encoder, taking turns (the raw encoder, then an ingest
    into a fresh data dir, ``rounds`` times): the ratio of the medians, since the machine's speed
    drifts between a run's halves. Each ingest's CPU per photo is read too: this process's (the
    indexer) and Triton's (the server and its Python-backend stubs), with the machine's busy cores."""
    raws, raw_cpus, rates, seconds, client_cpus, triton_cpus, busy = [], [], [], [], [], [], []
    for r in range(rounds):
        rate, cpu = raw_encoder_rate(repo, photos, settings.embed_batch_size)
        raws.append(rate)
        raw_cpus.append(cpu)
        svc = SearchService(settings.model_copy(update={"data_dir": settings.data_dir / f"round{r}"}))
        try:
            mine, triton, ticks = time.process_time(), process_tree_cpu(server_pid), machine_ticks()
            start = time.perf_counter()
            rep = IngestService(svc.settings, svc.resources).ingest([tmp / "photos"])
            seconds.append(time.perf_counter() - start)
            client_cpus.append((time.process_time() - mine) * 1000 / len(photos))
            triton_cpus.append((process_tree_cpu(server_pid) - triton) * 1000 / len(photos))
            busy.append(busy_cores(ticks))
            assert rep.counts["indexed"] == len(photos), rep.as_dict()
        finally:
            svc.close()
        rates.append(len(photos) / seconds[-1])
    raw, rate = float(np.median(raws)), float(np.median(rates))
    costs = per_photo_costs(repo, photos[::max(1, len(photos) // 40)], tmp / "thumbs")  # every size the photos come in
    med = lambda xs: round(float(np.median(xs)), 2)  # noqa: E731
    out = {"images": len(photos), "rounds": rounds, "seconds": round(float(np.median(seconds)), 2),
           "images_per_s": round(rate, 2), "rounds_images_per_s": [round(x, 2) for x in rates],
           "raw_encoder_images_per_s": round(raw, 2), "rounds_raw": [round(x, 2) for x in raws],
           "ratio": round(rate / raw, 3), "batch": settings.embed_batch_size,
           "in_flight": settings.embed_concurrency, "encoder_ms_per_photo_2_cores": round(1000 / raw, 2),
           "raw_encoder_cpu_ms_per_photo": med(raw_cpus), "ingest_client_cpu_ms_per_photo": med(client_cpus),
           "ingest_triton_cpu_ms_per_photo": med(triton_cpus), "ingest_cores_busy": med(busy), **costs}
    print(f"ingest: {len(photos)} photos, {rounds} rounds taking turns with the raw visual encoder in-process: "
          f"{out['images_per_s']} vs {out['raw_encoder_images_per_s']} images/s (medians; rounds {out['rounds_images_per_s']} "
          f"vs {out['rounds_raw']}); ratio {out['ratio']:.2f}x (goal >= {GOALS['ingest_ratio']}x)", flush=True)
    # With the cores as busy as in the raw run, the ratio is the raw encoder's CPU per photo over the
    # ingest's: the served encoder (one thread per instance, not spinning between runs) can cost less
    # than the raw one, and everything else the ingest does comes on top.
    print(f"  CPU per photo: ingest {out['ingest_client_cpu_ms_per_photo']} ms in the indexer + "
          f"{out['ingest_triton_cpu_ms_per_photo']} ms in Triton, {out['ingest_cores_busy']} cores busy; "
          f"the raw encoder {out['raw_encoder_cpu_ms_per_photo']} ms", flush=True)
    print(f"  in-process, one core: the indexer's decode and thumbnail {costs['client_ms']} ms, the server's "
          f"pre-processing {costs['server_pre_ms']} ms per photo", flush=True)
    return out


# -- query latency
def fill(svc: SearchService, have: int, size: int) -> None:
    """Stored photos have..size: realistic synthetic vectors with photo payloads, then HNSW built."""
    store = svc.store
    store.ensure(images_schema({image_vector(): 512}))
    if store.count(IMAGES) >= size:
        return  # filled by an earlier pass over the same store
    vectors = np.concatenate([sample(10_000, 20261123 + 1 + k) for k in range(have // 10_000, size // 10_000)])
    name = image_vector()
    for s in range(0, len(vectors), 1000):
        store.upsert(IMAGES, [models.PointStruct(id=pid(have + s + j), vector={name: v.tolist()}, payload=payload(have + s + j))
                              for j, v in enumerate(vectors[s:s + 1000])])
    start = time.perf_counter()
    store.optimize(IMAGES)  # what `search store optimize` and every ingest run: HNSW built
    print(f"  {size} stored; optimize (HNSW) {time.perf_counter() - start:.1f} s; {store.stats(IMAGES).status}", flush=True)


def percentiles(fn, clients: int, per_client: int) -> dict:
    latencies: list[float] = []
    cpu: list[float] = []  # the calling thread's CPU per query: the service's work and gRPC's wait in that thread
    lock = threading.Lock()

    def one(i: int) -> None:
        t, c = time.perf_counter(), time.thread_time()
        fn(i)
        with lock:
            latencies.append(time.perf_counter() - t)
            cpu.append(time.thread_time() - c)

    for i in range(3):
        fn(i)  # warm-up
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(clients * per_client)))
    q = np.percentile(latencies, [50, 99]) * 1000
    return {"queries": len(latencies), "p50_ms": round(float(q[0]), 1), "p99_ms": round(float(q[1]), 1),
            "mean_ms": round(statistics.mean(latencies) * 1000, 1), "caller_cpu_ms": round(statistics.mean(cpu) * 1000, 2)}


def coalesced_or_not(svc: SearchService, clients: int, per_client: int, rounds: int = 3) -> dict:
    """Concurrent queries as served (those that wait on one in flight share a clip_text request)
    against one clip_text request per query (before), taking turns: the medians of the rounds."""
    runs, mean_batch = take_turns(svc, "clip_text", lambda text: clip.embed_queries(svc.triton, [text])[0], rounds,
                                  lambda r, way: percentiles(lambda i: svc.search_images(QUERIES[i % len(QUERIES)], top_k=12),
                                                             clients, per_client))

    def summary(rows: list[dict]) -> dict:
        return {"p50_ms": statistics.median(r["p50_ms"] for r in rows), "p99_ms": statistics.median(r["p99_ms"] for r in rows),
                "p50_by_round": [r["p50_ms"] for r in rows], "p99_by_round": [r["p99_ms"] for r in rows]}

    return {**summary(runs["coalesced"]), "queries": sum(r["queries"] for r in runs["coalesced"]),
            "mean_batch": mean_batch, "one_request_per_query": summary(runs["one request per query"])}


def query_latency(settings: Settings, sizes: list[int], clients: list[int], per_client: int, label: str) -> list[dict]:
    rows, have = [], 0
    svc = SearchService(settings)
    try:
        triton = TritonClient(settings.triton_url)
        for size in sizes:
            if size > have:
                fill(svc, have, size)
                have = size
            vector = clip.embed_texts(triton, [QUERIES[0]])[0][0].tolist()
            parts = {"text_encode": percentiles(lambda i: clip.embed_texts(triton, [QUERIES[i % len(QUERIES)]]), 1, per_client),
                     "store_search": percentiles(lambda i, v=vector: svc.store.search(IMAGES, image_vector(), v, limit=12),
                                                 1, per_client)}
            for c in clients:
                row = {"text_path": label, "stored": size, "clients": c,
                       **(percentiles(lambda i: svc.search_images(QUERIES[i % len(QUERIES)], top_k=12), c, per_client)
                          if c == 1 else coalesced_or_not(svc, c, per_client))}
                if c == 1:
                    row["parts_p50_ms"] = {k: v["p50_ms"] for k, v in parts.items()}
                rows.append(row)
                goal = GOALS.get((size, c))
                met = ""
                if goal is not None:
                    ok = row["p50_ms"] <= goal[0] and (goal[1] is None or row["p99_ms"] <= goal[1])
                    p99 = f", p99 <= {goal[1]:g} ms" if goal[1] else ""
                    met = f"  goal p50 <= {goal[0]:g} ms{p99}: {'met' if ok else 'NOT met'}"
                extra = f" (text encode {parts['text_encode']['p50_ms']} ms, store search " \
                        f"{parts['store_search']['p50_ms']} ms; the calling thread's CPU, gRPC's wait included, " \
                        f"{row['caller_cpu_ms']} ms)" if c == 1 else ""
                print(f"  [{label}] {size:>7} stored, {c} clients: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms"
                      f"{extra}{met}", flush=True)
                if c > 1:
                    each = row["one_request_per_query"]
                    print(f"    coalesced (mean {row['mean_batch']} queries per clip_text request) vs one request per "
                          f"query, p50 by round: {row['p50_by_round']} vs {each['p50_by_round']} ms: "
                          f"{each['p50_ms'] / row['p50_ms']:.2f}x faster", flush=True)
    finally:
        svc.close()
    return rows


def text_tower(repo: Path) -> dict:
    """The text graph in-process: each query at 77 tokens versus at its own length on the graph as
    exported (model.onnx, which computes every position: what the padding costs), and the served
    graph (model.cpu.onnx; a packed one skips the padding itself) on the 8 queries as one batch."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from search.triton.steps import tokens

    text = json.loads((repo / "clip_text_tokenize/1/text.json").read_text())
    tok = Tokenizer.from_file(str(repo / "clip_text_tokenize/1/tokenizer.json"))
    sess = ort.InferenceSession(str(repo / "clip_textual/1/model.onnx"), providers=["CPUExecutionProvider"])
    out: dict = {}
    vecs, runs = {}, {}
    for name, width in (("padded_77", text["context_length"]), ("own_length", None)):
        feeds = [tokens.pad(tokens.encode(tok, [q], text["context_length"]), text["pad_id"], width=width) for q in QUERIES]
        run = runs[name] = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in feeds]
        vecs[name] = np.concatenate([sess.run(None, r)[0] for r in run])
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for r in run:
                sess.run(None, r)
            best = min(best, (time.perf_counter() - start) / len(run) * 1000)
        out[f"{name}_ms"] = round(best, 2)
        out[f"{name}_tokens"] = round(float(np.mean([r["input_ids"].shape[1] for r in run])), 1)
    a, b = vecs["padded_77"], vecs["own_length"]
    out["min_cosine"] = round(float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min()), 7)
    print(f"text tower in-process (model.onnx, as exported), one query: {out['padded_77_ms']} ms at 77 tokens, {out['own_length_ms']} ms at its own "
          f"length ({out['own_length_tokens']} tokens on average): {out['padded_77_ms'] / out['own_length_ms']:.1f}x; "
          f"min cosine {out['min_cosine']}", flush=True)
    # What 8 clients' queries cost the served tower at best: all 8 in one batch, padded to the longest.
    sess = ort.InferenceSession(str(repo / "clip_textual/1/model.cpu.onnx"), providers=["CPUExecutionProvider"])
    alone = runs["own_length"]
    for r in alone:
        sess.run(None, r)  # warm-up
    out["served_own_length_ms"] = round(min(timed(lambda: [sess.run(None, r) for r in alone]) for _ in range(3)) / len(alone), 2)
    batch = tokens.pad(tokens.encode(tok, QUERIES, text["context_length"]), text["pad_id"], width=None)
    feeds = {k: batch[k] for k in ("input_ids", "attention_mask")}
    sess.run(None, feeds)
    out["eight_one_batch_ms"] = round(min(timed(lambda: sess.run(None, feeds)) for _ in range(5)), 1)
    out["eight_one_batch_tokens"] = int(feeds["input_ids"].shape[1])
    print(f"  the {len(QUERIES)} queries as one batch ({out['eight_one_batch_tokens']} tokens wide): "
          f"{out['eight_one_batch_ms']} ms of all cores on the served graph, against "
          f"{out['served_own_length_ms'] * len(QUERIES):.1f} ms one at a time: the tower's floor for a round of {len(QUERIES)} clients' queries", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer images and queries, a 10k store only")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest measurement")
    ap.add_argument("--no-latency", action="store_true", help="skip the query latency")
    ap.add_argument("--no-padded", action="store_true", help="skip the 77-token comparison")
    ap.add_argument("--ingest-rounds", type=int, default=3, help="ingest rounds, taking turns with the raw encoder (medians)")
    ap.add_argument("--model-dir", type=Path, help="keep the random ViT-B/32 CLIP here and reuse it (saves ~1 min)")
    args = ap.parse_args()
    load_before = load_average()
    n_images = 80 if args.quick else 200
    sizes = [10_000] if args.quick else [10_000, 100_000]
    per_client = 8 if args.quick else 25
    tmp = Path(tempfile.mkdtemp(prefix="bench-clip-"))
    results: dict = {"machine": machine_line(), "load_start": os.getloadavg(),
                     "model": "random CLIP, ViT-B/32 architecture (transformers CLIPConfig defaults)"}
    print(f"machine: {results['machine']}; {load()}", flush=True)
    try:
        repo = tmp / "triton_repo"
        shutil.copytree(PROJECT_ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data", "*.json"))
        print("exporting a ViT-B/32-sized random CLIP…", flush=True)
        folder = args.model_dir or tmp / "vit-b-32"
        if not (folder / "config.json").exists():
            save_vit_b32(folder)
        report = CLIP().build(repo, str(folder), force=True)
        print(f"  {report.status}: {report.detail}", flush=True)
        results["build"] = json.loads(CLIP().manifest_path(repo).read_text()).get("cpu_graph")
        settings = Settings(data_dir=tmp / "data", triton_repo=repo, qdrant_url=None)
        results["text_tower"] = text_tower(repo)
        with serve(repo, tmp / "run", CLIP()) as server:
            settings = settings.model_copy(update={"triton_url": f"127.0.0.1:{server.grpc_port}"})
            if not args.no_ingest:
                photos = make_photos(tmp / "photos", n_images)
                results["ingest"] = measure_ingest(settings, repo, photos, tmp, server.state.pid, args.ingest_rounds)
            if not args.no_latency:
                print(f"text-to-image latency through the service layer ({load()}):", flush=True)
                latency = settings.model_copy(update={"data_dir": tmp / "latency"})
                results["latency"] = query_latency(latency, sizes, [1, 8], per_client, "variable length")
        if not args.no_latency and not args.no_padded:
            text_json = repo / "clip_text_tokenize/1/text.json"
            text_json.write_text(json.dumps({**json.loads(text_json.read_text()), "variable_length": False}))
            with serve(repo, tmp / "run77", CLIP()) as server:
                padded = latency.model_copy(update={"triton_url": f"127.0.0.1:{server.grpc_port}"})
                results["latency"] += query_latency(padded, sizes[:1], [1, 8], per_client, "padded to 77")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_end"] = os.getloadavg()
    print(f"machine: {results['machine']}; {load()} at the end")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    record("bench_clip", {**results, "latency": keyed(results.get("latency", []), "text_path", "stored", "clients")},
           load_before=load_before, quick=args.quick)


if __name__ == "__main__":
    main()
