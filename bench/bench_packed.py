"""The packed encoder (search/models/export/packed.py: token-wise steps on the real tokens only)
against the padded one, in PyTorch, on the GPU where there is one, else the CPU.

    python bench/bench_packed.py

A MiniLM-sized BERT (6 layers, 384 wide) with random weights: the costs are real, the vectors
meaningless. Batches padded as the server pads them (32 and 64 sentences of 8-40 tokens, 16
passages of 120-160, one query), fp32 and, on a GPU, fp16; prints each path's milliseconds per
batch, their ratio and the largest difference at the real tokens. The served CPU graph is an ONNX
export of the same module (bench/bench_minilm.py measures that); this script asks whether the GPU
configs, which serve the padded graph, would gain from it. It needs only torch and transformers
(the GPU image has no tritonclient), so packed.py is loaded from its file.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import load, record  # noqa: E402  (the standard library only: the GPU image has it)

SHAPES = ((32, 8, 40), (64, 8, 40), (16, 120, 160), (1, 12, 12))  # batch, shortest, longest


def packed_encoder():
    spec = importlib.util.spec_from_file_location("packed", ROOT / "search/models/export/packed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PackedEncoder


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    load_before = load()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reps, per_shape = (5, 20) if device == "cuda" else (1, 3)
    torch.manual_seed(0)
    config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                        attn_implementation="eager")
    model = BertModel(config, add_pooling_layer=False).eval().to(device)
    packed = packed_encoder()(model).eval()
    gen = torch.Generator().manual_seed(1)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def batch(n: int, shortest: int, longest: int) -> tuple:
        lengths = torch.randint(shortest, longest + 1, (n,), generator=gen)
        mask = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()
        ids = torch.randint(1000, 29000, mask.shape, generator=gen) * mask
        return ids.to(device), mask.to(device), torch.zeros_like(ids).to(device)

    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"{name}; torch {torch.__version__}")
    figures: dict = {"device": name, "torch": torch.__version__, "reps": reps, "batches_per_shape": per_shape, "rows": {}}
    for n, shortest, longest in SHAPES:
        feeds = [batch(n, shortest, longest) for _ in range(per_shape)]
        for dtype in (torch.float32, torch.float16) if device == "cuda" else (torch.float32,):
            model.to(dtype)
            paths = {"padded": lambda f: model(input_ids=f[0], attention_mask=f[1], token_type_ids=f[2]).last_hidden_state,
                     "packed": lambda f: packed(*f)}
            ms = {}
            with torch.no_grad():
                a, b = (paths[k](feeds[0]) for k in ("padded", "packed"))
                diff = float((a * feeds[0][1].unsqueeze(-1).to(a.dtype) - b).abs().max())
                for name, run in paths.items():
                    for f in feeds[:3]:
                        run(f)  # warm-up
                    sync()
                    start = time.perf_counter()
                    for _ in range(reps):
                        for f in feeds:
                            run(f)
                    sync()
                    ms[name] = (time.perf_counter() - start) / (reps * len(feeds)) * 1000
            print(f"batch {n} x {shortest}-{longest} tokens, {str(dtype).removeprefix('torch.')}: padded {ms['padded']:.3f} ms, "
                  f"packed {ms['packed']:.3f} ms: packed {ms['padded'] / ms['packed']:.2f}x as fast; max |diff| {diff:.1e}")
            figures["rows"][f"{str(dtype).removeprefix('torch.')}_batch{n}_{shortest}_{longest}_tokens"] = {
                "padded_ms": round(ms["padded"], 4), "packed_ms": round(ms["packed"], 4),
                "speedup": round(ms["padded"] / ms["packed"], 3), "max_abs_diff": diff}
    record("bench_packed", figures, load_before=load_before)


if __name__ == "__main__":
    main()
