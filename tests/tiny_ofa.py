"""A tiny, randomly initialised OFA saved as a ModelScope visual-entailment checkpoint folder, for
tests only (real weights cannot be had offline): the vendored modelscope OFAModel from a small
config (d_model 64, 2+2 layers, the smallest ResNet), a small BART-style byte-level BPE trained
here with `tokenizers`, and a configuration.json like ModelScope's. The project's own export code
(`OFA().build(repo, folder)`) turns the folder into the served models."""

from __future__ import annotations

import json
from pathlib import Path

from search.models.base import BuildReport
from search.models.ofa import OFA

CORPUS = [
    'does the image describe " a dog on the beach "?', 'can image and text1 " two birds " imply text2 " animals "?',
    "yes no maybe", "there are two dogs playing in the snow", "a man is riding a horse in a field",
    "the cat sleeps on a red sofa", "people are playing football on grass", "a woman holds an umbrella in the rain",
    "a cup of coffee on a saucer", "an astronaut in a white space suit", "a rocket on the launch pad",
    "yes", "no", "maybe", "answer yes or no or maybe", "it is yes", "say no", "well maybe",
]
IMAGE_SIZE = 480  # as the committed configs (and OFA's SNLI-VE checkpoints)
MAX_SRC_LENGTH = 24  # small, so the tests reach the truncation


def save_tokenizer(folder: Path, vocab_size: int = 600) -> int:
    """vocab.json + merges.txt as BART's: <s> <pad> </s> <unk> first, <mask> last."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train_from_iterator(CORPUS * 20, vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False)
    tok.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["<mask>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return len(vocab)


TINY = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "resnet_type": "resnet18"}
# modelscope's OFA-base (README table; configuration_ofa.py): the benchmark's size
BASE = {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12, "decoder_attention_heads": 12,
        "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072, "resnet_type": "resnet101"}
OFA_VOCAB = 59457  # BART's 50265 + 9192 OFA tokens


def save_tiny_ofa(folder: Path, prompt_type: str = "prev_output", size: dict = TINY, full_vocab: bool = False) -> Path:
    """``size``: TINY (tests) or BASE (bench: OFA-base's shapes, the embedding table padded to the
    real 59457 rows when ``full_vocab``, the tokenizer still the small one)."""
    import torch

    from search.models.ofa_arch.configuration_ofa import OFAConfig
    from search.models.ofa_arch.modeling_ofa import OFAModel

    folder.mkdir(parents=True, exist_ok=True)
    n_vocab = save_tokenizer(folder) + 8192 + 1000  # + <code_i> and <bin_i>, as OFATokenizer adds
    cfg = OFAConfig(vocab_size=OFA_VOCAB if full_vocab else n_vocab, **size, dropout=0.0, max_position_embeddings=1024,
                    token_bucket_size=256, image_bucket_size=42)
    torch.manual_seed(0)
    model = OFAModel(cfg).eval()
    with torch.no_grad():  # less trivial than the default init: varied norms, wide embeddings (peaked answers)
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm) and m.weight is not None:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
        model.encoder.embed_tokens.weight.normal_(0, 1.0)
    # As ModelScope ships it: config.json + pytorch_model.bin (transformers 5's save_pretrained
    # refuses the three tied embedding matrices modelscope's class does not declare as tied).
    cfg.save_pretrained(str(folder))
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    (folder / "configuration.json").write_text(json.dumps({
        "framework": "pytorch", "task": "visual-entailment",
        "model": {"type": "ofa", "patch_image_size": IMAGE_SIZE, "max_image_size": IMAGE_SIZE,
                  "max_src_length": MAX_SRC_LENGTH, "prompt_type": prompt_type, "gen_type": "traverse",
                  "answer2label": "answer2label.json", "imagenet_default_mean_and_std": False, "language": "en"}}, indent=1))
    (folder / "answer2label.json").write_text(json.dumps({"no": 0, "yes": 1, "maybe": 2}))
    return folder


def build_into(repo: Path, folder: Path) -> BuildReport:
    """Save the tiny OFA into ``folder`` and export it into the model repository ``repo``."""
    report = OFA().build(repo, str(save_tiny_ofa(folder)))
    assert report.status == "built", report.detail
    return report
