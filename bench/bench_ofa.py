"""OFA visual entailment: pairs/s served by Triton versus the same model in-process, and the added
latency of `search --images ... --verify` on the top 20 hits.

    python bench/bench_ofa.py [--quick]

Real OFA weights cannot be had offline, so this builds a randomly initialised OFA of OFA-base's
size (d_model 768, 6+6 layers, 12 heads, FFN 3072, ResNet-101, the 59457-row embedding table;
480 px images as the SNLI-VE checkpoints) and exports it with the project's own `OFA().build`:
the costs are real, the verdicts meaningless. In one run:
- pairs/s through the `ofa_ve` ensemble (gRPC, one pair per request as the client sends them:
  decode + resize + tokenize in the Python step, encoder + one decoder step in ONNX, softmax in
  the post step) versus the same model.onnx in-process with onnxruntime and the same pre/post
  functions, one pair at a time, alternating; plus in-process batches of 2 (why one at a time);
- text-to-image search through the service layer (a tiny random CLIP, the in-memory store) with
  and without --verify on the top 20 photos: the median added latency.
Photos: the COCO photographs in shared/data/photos, hypotheses their captions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from search.cpu_kernels import choose_openblas_kernels  # noqa: E402  (loads no numpy)

choose_openblas_kernels()  # before numpy loads, as the command lines do

import numpy as np  # noqa: E402

from bench.common import load, machine_line, record  # noqa: E402
from indexer.service import IngestService  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import CLIP, ofa  # noqa: E402
from search.models.export import ofa as ofa_export  # noqa: E402
from search.models.ofa import OFA  # noqa: E402
from search.services import SearchService  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton  # noqa: E402

PHOTOS = next((p for p in (PROJECT_ROOT.parent / "shared" / "data" / "photos", Path("/work/shared/data/photos"))
               if p.is_dir()), None)
BATCH = 1  # pairs per run: what the client sends per request (ofa.PAIRS_PER_REQUEST); see the docstring


def photos_and_captions() -> tuple[list[bytes], list[str]]:
    if PHOTOS is None:
        sys.exit("no photos: expected shared/data/photos next to the project")
    captions = {}
    for line in (PHOTOS / "captions.jsonl").read_text().splitlines():
        row = json.loads(line)
        captions[row["image"]] = row["captions"][0]
    files = sorted(PHOTOS.glob("*.jpg"))
    texts = [captions.get(f.name, "two dogs playing in the snow") for f in files]
    return [f.read_bytes() for f in files], texts


def in_process(repo: Path):
    """The same model.onnx and the same pre/post functions, no Triton."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from search.triton.steps import ofa_ve as step
    ve = json.loads((repo / "ofa_ve_preprocess/1/ve.json").read_text())
    post_cfg = json.loads((repo / "ofa_ve_post/1/post.json").read_text())
    tok = Tokenizer.from_file(str(repo / "ofa_ve_preprocess/1/tokenizer.json"))
    sess = ort.InferenceSession(str(repo / "ofa_ve_onnx/1/model.onnx"), providers=["CPUExecutionProvider"])

    def run(images: list[bytes], texts: list[str]) -> np.ndarray:
        srcs = [step.encode_text(tok, ve, t)[0] for t in texts]
        ids, dec, last = step.pad_batch(srcs, ve)
        pixels = np.stack([step.image_pixels(d, ve, 100_000_000) for d in images])
        (logits,) = sess.run(None, {"input_ids": ids, "patch_images": pixels, "decoder_input_ids": dec, "last_index": last})
        return step.verdict(logits, post_cfg)[1]

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = ap.parse_args()
    load_before = load()
    rounds, queries = (2, 1) if args.quick else (6, 3)
    import tiny_clip
    import tiny_ofa

    res: dict = {"machine": machine_line(), "loadavg_start": os.getloadavg()}
    print(f"machine: {res['machine']}; load average at start {tuple(round(x, 2) for x in res['loadavg_start'])}", flush=True)
    images, texts = photos_and_captions()
    with tempfile.TemporaryDirectory(prefix="bench-ofa-") as tmpdir:
        tmp = Path(tmpdir)
        repo = tmp / "triton_repo"
        shutil.copytree(PROJECT_ROOT / "triton_repo", repo)
        t = time.perf_counter()
        folder = tiny_ofa.save_tiny_ofa(tmp / "ofa-base", size=tiny_ofa.BASE, full_vocab=True)
        res["save_checkpoint_s"] = time.perf_counter() - t
        t = time.perf_counter()
        report = OFA().build(repo, str(folder))
        res["export_s"] = time.perf_counter() - t
        assert report.status == "built", report.detail
        res["model"] = report.detail.split("; ", 1)[1]
        res["onnx_mb"] = (repo / "ofa_ve_onnx/1/model.onnx").stat().st_size / 1e6
        import torch

        res["params_m"] = sum(p.numel() for p in ofa_export.load_model(folder).parameters()) / 1e6
        del torch  # the model itself is not kept: the served and in-process copies need the memory
        print(f"OFA-base-size random model: {res['params_m']:.0f} M parameters, {res['model']}; checkpoint "
              f"{res['save_checkpoint_s']:.0f} s, export {res['export_s']:.0f} s, model.onnx {res['onnx_mb']:.0f} MB", flush=True)
        tiny_clip.build_into(repo, tmp / "tiny-clip")
        server = LocalTriton(repo, tmp / "run", models=[*CLIP().triton_models, *OFA().triton_models])
        server.start(timeout=300)
        try:
            client = TritonClient(f"127.0.0.1:{server.grpc_port}", 600)
            local = in_process(repo)
            batch_imgs, batch_txt = images[:BATCH], texts[:BATCH]
            served_probs = np.array([[e["probs"][k] for k in ofa.LABELS] for e in ofa.entail(client, batch_imgs, batch_txt)])
            local_probs = local(batch_imgs, batch_txt)
            res["served_vs_in_process_max_abs_diff"] = float(np.abs(served_probs - local_probs).max())
            served_t, local_t = [], []
            for r in range(rounds):  # alternate, so drifts in load hit both alike
                sl = slice((r * BATCH) % (len(images) - BATCH), (r * BATCH) % (len(images) - BATCH) + BATCH)
                t = time.perf_counter()
                ofa.entail(client, images[sl], texts[sl])
                served_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                local(images[sl], texts[sl])
                local_t.append(time.perf_counter() - t)
                print(f"  round {r + 1}: served {served_t[-1]:.2f} s, in-process {local_t[-1]:.2f} s per {BATCH} pairs", flush=True)
            res["served_pairs_s"] = BATCH * rounds / sum(served_t)
            res["in_process_pairs_s"] = BATCH * rounds / sum(local_t)
            t = time.perf_counter()
            for r in range(max(1, rounds // 2)):
                local(images[2 * r:2 * r + 2], texts[2 * r:2 * r + 2])
            res["in_process_batch2_pairs_s"] = 2 * max(1, rounds // 2) / (time.perf_counter() - t)

            res |= verify_top20(tmp, repo, server, images, texts[:queries])
        finally:
            server.stop()
    res["loadavg_end"] = os.getloadavg()
    summary(res, rounds, queries)
    record("bench_ofa", {**res, "rounds": rounds, "queries": queries}, load_before=load_before, quick=args.quick)


def verify_top20(tmp: Path, repo: Path, server: LocalTriton, images: list[bytes], queries: list[str]) -> dict:
    """--verify on the top 20 through the service layer: the photos ingested, each query searched
    without and with verification."""
    album = tmp / "album"
    album.mkdir()
    for i, data in enumerate(images):
        (album / f"{i:03d}.jpg").write_bytes(data)
    settings = Settings(data_dir=tmp / "data", triton_repo=repo, triton_url=f"127.0.0.1:{server.grpc_port}",
                        qdrant_path=":memory:", triton_timeout_s=600)
    svc = SearchService(settings)
    IngestService(svc.settings, svc.resources).ingest([album])
    plain, verified = [], []
    for q in queries:
        t = time.perf_counter()
        svc.search_images(q, top_k=20)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        hits = svc.search_images(q, top_k=20, verify=True)
        verified.append(time.perf_counter() - t)
        assert len(hits) == 20 and all(h.entailment is not None for h in hits)
    svc.close()
    return {"search_top20_median_s": statistics.median(plain), "search_top20_verify_median_s": statistics.median(verified)}


def summary(res: dict, rounds: int, queries: int) -> None:
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, indent=1))
    print(f"\nentailment pairs/s: served (Triton ensemble) {res['served_pairs_s']:.2f}, in-process onnxruntime "
          f"{res['in_process_pairs_s']:.2f} -> served/in-process {res['served_pairs_s'] / res['in_process_pairs_s']:.2f} "
          f"({BATCH} pair per run, {rounds} runs each; max |Δ prob| {res['served_vs_in_process_max_abs_diff']:.1e}); "
          f"in-process batches of 2: {res['in_process_batch2_pairs_s']:.2f} pairs/s")
    added = res["search_top20_verify_median_s"] - res["search_top20_median_s"]
    print(f"--images top 20: {res['search_top20_median_s'] * 1000:.0f} ms; with --verify "
          f"{res['search_top20_verify_median_s']:.2f} s -> added {added:.2f} s ({added / 20 * 1000:.0f} ms per hit), "
          f"median of {queries} queries")
    print(f"load average at end {tuple(round(x, 2) for x in res['loadavg_end'])}")


if __name__ == "__main__":
    main()
