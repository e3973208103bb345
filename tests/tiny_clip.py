"""A tiny, randomly initialised CLIP in Hugging Face format, for tests only (real weights cannot be
had offline): transformers' CLIPModel from a small config, a small CLIP-style BPE vocabulary
trained here with `tokenizers`, and CLIPImageProcessor's settings. The project's own export code
(`CLIP().build(repo, folder)`) turns the folder into the served models."""

from __future__ import annotations

import json
from pathlib import Path

from search.config import PROJECT_ROOT
from search.models.base import BuildReport
from search.models.clip import CLIP

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
CAPTIONS = [
    "a photo of a cat sleeping on a sofa", "a tabby cat looking at the camera", "a cup of coffee on a saucer",
    "an astronaut in a white space suit", "a rocket on the launch pad", "two dogs playing in the snow",
    "a red car parked in the street", "people walking on the beach at sunset", "a bowl of fruit on a table",
    "mountains covered with snow under a blue sky", "a plate of pasta with tomato sauce", "a child riding a bicycle",
]


def corpus() -> list[str]:
    docs = [p.read_text(encoding="utf-8") for p in sorted((PROJECT_ROOT / "samples" / "docs").rglob("*.md"))]
    return CAPTIONS * 5 + docs


def save_tokenizer(folder: Path, vocab_size: int = 1200) -> None:
    """vocab.json + merges.txt laid out as OpenAI's: the 256 byte symbols, the same with ``</w>``,
    one token per merge, then the start and end tokens (so the end token has the highest id)."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE(continuing_subword_prefix="", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  end_of_word_suffix="</w>", show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab: dict[str, int] = {}
    for token in [*symbols, *(s + "</w>" for s in symbols), *(m.replace(" ", "") for m in merges), BOS, EOS]:
        vocab.setdefault(token, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def save_tiny_clip(folder: Path) -> Path:
    """Hidden 32, 2 layers, ViT patch 32 on 224 px; random weights (seed 0). The projection is
    512-d like ViT-B/32's, the width the committed configs declare (it costs 32K parameters)."""
    import torch
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizerFast
    from transformers.utils import logging as hf_logging

    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(folder)
    tokenizer = CLIPTokenizerFast.from_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    # transformers' text pooling looks for eos_token_id: it must be the tokenizer's end token.
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "projection_dim": 512}
    config = CLIPConfig(text_config={**tower, **ids, "vocab_size": len(tokenizer), "max_position_embeddings": 77},
                        vision_config={**tower, "image_size": 224, "patch_size": 32}, projection_dim=512)
    torch.manual_seed(0)
    hf_logging.disable_progress_bar()
    CLIPModel(config).eval().save_pretrained(str(folder))
    image_processor().save_pretrained(str(folder))
    return folder


def image_processor(folder: Path | None = None):
    """transformers' CLIPImageProcessor (its PIL backend here: no torchvision), the reference."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "falling back to CLIPImageProcessorPil" (no torchvision here)
    try:
        from transformers import CLIPImageProcessor

        return CLIPImageProcessor.from_pretrained(str(folder)) if folder else CLIPImageProcessor()
    finally:
        hf_logging.set_verbosity(level)


def build_into(repo: Path, folder: Path) -> BuildReport:
    """Save the tiny CLIP into ``folder`` and export it into the model repository ``repo``."""
    report = CLIP().build(repo, str(save_tiny_clip(folder)))
    assert report.status == "built", report.detail
    return report
