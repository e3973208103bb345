"""CLIP's text tower at 77 tokens (what the text step sent before issue 18) against each batch's
own length (what clip_text_tokenize sends now), in PyTorch, on the GPU where there is one, else
the CPU.

    python bench/bench_clip_text_length.py

A ViT-B/32-sized text tower (transformers' CLIPTextModel: 12 layers, 512 wide, 8 heads) with
random weights: the costs are real, the vectors meaningless. Batches: one query, 8 and 32 queries
of 4-12 tokens, 32 captions of 40-77 tokens; fp32 and, on a GPU, fp16. Prints each length's
milliseconds per batch, their ratio, and the largest difference between the pooled outputs (the
tower is causal and pools at the end token, so what follows it cannot change them). The served
graph is an ONNX export of such a tower (bench/bench_clip.py measures it on the CPU,
bench/bench_gpu.py behind Triton); this script needs only torch and transformers, which the GPU
image has, so it answers whether the shorter batches matter on a GPU at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import CLIPTextConfig, CLIPTextModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import load, record  # noqa: E402  (the standard library only: the GPU image has it)

CONTEXT = 77
BOS, EOS = 49406, 49407
SHAPES = ((1, 7, 7), (8, 4, 12), (32, 4, 12), (32, 40, 77))  # batch, shortest, longest (with BOS and EOS)


def batch(n: int, low: int, high: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """``n`` texts at 77 tokens (zeros after the end token, as the tokenizer pads) and their longest length."""
    lengths = torch.randint(low, high + 1, (n,), generator=gen)
    ids = torch.zeros(n, CONTEXT, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        ids[i, 0], ids[i, length - 1] = BOS, EOS
        ids[i, 1:length - 1] = torch.randint(1, BOS, (length - 2,), generator=gen)
    return ids, int(lengths.max())


def timed(model, ids: torch.Tensor, reps: int) -> tuple[float, torch.Tensor]:
    with torch.inference_mode():
        for _ in range(3):
            out = model(input_ids=ids).pooler_output
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            out = model(input_ids=ids).pooler_output
        if ids.is_cuda:
            torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1000, out.float()


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    load_before = load()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reps = 50 if device == "cuda" else 3
    torch.manual_seed(0)
    config = CLIPTextConfig(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
                            max_position_embeddings=CONTEXT, bos_token_id=BOS, eos_token_id=EOS,
                            attn_implementation="eager")
    base = CLIPTextModel(config).eval()
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; {reps} timed passes after 3 warm-ups")
    print("| dtype | batch | tokens (own) | 77 tokens ms | own length ms | 77 / own | max abs diff, pooled |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    gen = torch.Generator().manual_seed(1)
    figures: dict = {"device": name, "torch": torch.__version__, "reps": reps, "rows": {}}
    for dtype in (torch.float32, torch.float16) if device == "cuda" else (torch.float32,):
        model = CLIPTextModel(config).eval()
        model.load_state_dict(base.state_dict())
        model = model.to(device=device, dtype=dtype)
        for n, low, high in SHAPES:
            ids, own = batch(n, low, high, gen)
            ids = ids.to(device)
            full_ms, full = timed(model, ids, reps)
            short_ms, short = timed(model, ids[:, :own].contiguous(), reps)
            diff = (full - short).abs().max().item()
            print(f"| {str(dtype).removeprefix('torch.')} | {n} | {own} | {full_ms:.2f} | {short_ms:.2f} | "
                  f"{full_ms / short_ms:.2f}x | {diff:.1e} |")
            figures["rows"][f"{str(dtype).removeprefix('torch.')}_batch{n}_{low}_{high}_tokens"] = {
                "own_tokens": own, "padded_77_ms": round(full_ms, 3), "own_length_ms": round(short_ms, 3),
                "ratio": round(full_ms / short_ms, 3), "max_abs_diff": diff}
    record("bench_clip_text_length", figures, load_before=load_before)


if __name__ == "__main__":
    main()
