"""CLIP photo search: ingest rate versus the raw visual encoder, and text-to-image query latency.

    python bench/bench_clip.py [--quick]

Real CLIP weights cannot be had offline, so this builds a randomly initialised CLIP of
ViT-B/32's size (transformers' default CLIPConfig: ViT-B/32 vision tower, 12-layer text tower,
512-d projection) and exports it with the project's own `CLIP().build`: the costs are real,
the vectors meaningless. In one run:
- images/s of `indexer ingest` end to end (read, EXIF, thumbnail, Triton decode + preprocess +
  ViT, upsert) versus the visual ONNX alone in-process on the same, already preprocessed images;
- text-to-image latency p50/p99 through the service layer with 10k and 100k stored photos
  (clustered 512-d vectors inserted directly; the in-memory qdrant-client store) for 1 and 8 clients.
Photos: the 40 COCO photographs in ../shared/data/photos, each cropped a few ways so every file
is distinct content.
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

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
from qdrant_client import models  # noqa: E402

from bench.bench_minilm import machine  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models.clip import CLIP  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.store import images_schema, point_id  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

PHOTOS = PROJECT_ROOT.parent / "shared" / "data" / "photos"
QUERIES = ["a dog on the beach", "two people riding bicycles", "a plate of food", "a city street at night",
           "a cat sleeping on a sofa", "a train at the station", "children playing football", "a bowl of fruit"]


def save_vit_b32(folder: Path) -> Path:
    """A random CLIP with ViT-B/32's architecture, in Hugging Face format (tokenizer: a small
    CLIP-style BPE vocabulary; the text tower is full size, only its embedding table is smaller)."""
    import torch
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizerFast

    from tests.tiny_clip import image_processor, save_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(folder)
    tok = CLIPTokenizerFast.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    base = CLIPConfig()
    text = {**base.text_config.to_dict(), "vocab_size": len(tok), "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    config = CLIPConfig(text_config=text, vision_config=base.vision_config.to_dict(), projection_dim=512)
    torch.manual_seed(0)
    CLIPModel(config).eval().save_pretrained(str(folder))
    image_processor().save_pretrained(str(folder))
    return folder


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


def raw_encoder_rate(repo: Path, photos: list[Path], batch: int) -> float:
    """Images/s of the visual ONNX alone, in-process, on the images already preprocessed."""
    import onnxruntime as ort

    from search.triton.steps import clip_image as pre
    cfg = json.loads((repo / "clip_image_preprocess/1/preprocess.json").read_text())
    tensors = np.stack([pre.preprocess(p.read_bytes(), cfg, 100_000_000) for p in photos]).astype(np.float32)
    sess = ort.InferenceSession(str(repo / "clip_visual/1/model.onnx"), providers=["CPUExecutionProvider"])
    sess.run(None, {"pixel_values": tensors[:batch]})
    start = time.perf_counter()
    for i in range(0, len(tensors), batch):
        sess.run(None, {"pixel_values": tensors[i:i + batch]})
    return len(tensors) / (time.perf_counter() - start)


def clustered(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    centers = rng.normal(size=(max(n // 500, 8), dim))
    v = centers[rng.integers(0, len(centers), n)] + 0.35 * rng.normal(size=(n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def query_latency(svc: SearchService, sizes: list[int], clients: list[int], per_client: int) -> list[dict]:
    rng = np.random.default_rng(0)
    store, dim = svc.store, 512
    store.ensure(images_schema(dim))
    rows, have = [], 0
    for size in sizes:
        vectors = clustered(size - have, dim, rng)
        for s in range(0, len(vectors), 2000):
            store.upsert("images", [
                models.PointStruct(id=point_id(f"synthetic{have + s + j}", "bench", 0), vector={"clip": v.tolist()},
                                   payload={"path": f"/photos/{have + s + j}.jpg", "paths": [f"/photos/{have + s + j}.jpg"],
                                            "sha256": f"synthetic{have + s + j}", "chunk": 0,
                                            "taken_at": float(1.6e9 + rng.integers(0, 10**8))})
                for j, v in enumerate(vectors[s:s + 2000])])
        have = size
        for c in clients:
            latencies: list[float] = []
            lock = threading.Lock()

            def one(i: int, lock=lock, latencies=latencies) -> None:
                t = time.perf_counter()
                svc.search_images(QUERIES[i % len(QUERIES)], top_k=12)
                with lock:
                    latencies.append(time.perf_counter() - t)

            one(0)
            latencies.clear()
            with ThreadPoolExecutor(c) as pool:
                list(pool.map(one, range(c * per_client)))
            q = np.percentile(latencies, [50, 99]) * 1000
            rows.append({"stored": size, "clients": c, "queries": len(latencies), "p50_ms": round(float(q[0]), 1),
                         "p99_ms": round(float(q[1]), 1), "mean_ms": round(statistics.mean(latencies) * 1000, 1)})
            print(f"  {size:>7} stored, {c} clients: p50 {q[0]:.1f} ms, p99 {q[1]:.1f} ms", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer images and a 10k store only")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--no-latency", action="store_true", help="measure ingest only")
    args = ap.parse_args()
    n_images = 80 if args.quick else 200
    sizes = [10_000] if args.quick else [10_000, 100_000]
    tmp = Path(tempfile.mkdtemp(prefix="bench-clip-"))
    results: dict = {"machine": machine(), "model": "random CLIP, ViT-B/32 architecture (transformers CLIPConfig defaults)"}
    try:
        repo = tmp / "triton_repo"
        shutil.copytree(PROJECT_ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("minilm*"))
        print("exporting a ViT-B/32-sized random CLIP…", flush=True)
        report = CLIP().build(repo, str(save_vit_b32(tmp / "vit-b-32")), force=True)
        print(f"  {report.status}: {report.detail}", flush=True)
        photos = make_photos(tmp / "photos", n_images)
        settings = Settings(data_dir=tmp / "data", triton_repo=repo, qdrant_url=None)
        raw = raw_encoder_rate(repo, photos, settings.embed_batch_size)
        server = LocalTriton(repo, tmp / "run", http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                             models=list(CLIP().triton_models)).start()
        try:
            settings = settings.model_copy(update={"triton_url": f"127.0.0.1:{server.grpc_port}"})
            svc = SearchService(settings)
            try:
                start = time.perf_counter()
                rep = IngestService(svc.settings, svc.resources).ingest([tmp / "photos"])
                seconds = time.perf_counter() - start
                assert rep.counts["indexed"] == n_images, rep.as_dict()
            finally:
                svc.close()
            results["ingest"] = {"images": n_images, "seconds": round(seconds, 2), "images_per_s": round(n_images / seconds, 2),
                                 "raw_encoder_images_per_s": round(raw, 2), "ratio": round(n_images / seconds / raw, 3),
                                 "batch": settings.embed_batch_size, "in_flight": settings.embed_concurrency}
            ing = results["ingest"]
            print(f"ingest: {n_images} photos in {ing['seconds']} s = {ing['images_per_s']} images/s; raw visual encoder "
                  f"in-process {ing['raw_encoder_images_per_s']} images/s; ratio {ing['ratio']:.2f}x", flush=True)
            svc = SearchService(settings.model_copy(update={"qdrant_path": ":memory:"}))
            try:
                if args.no_latency:
                    return
                print("text-to-image latency through the service layer:", flush=True)
                results["latency"] = query_latency(svc, sizes, [1, 8], per_client=8 if args.quick else 20)
            finally:
                svc.close()
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"machine: {results['machine']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
