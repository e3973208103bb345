"""A tiny, randomly initialised BGE-M3 in FlagEmbedding's layout, for tests only (real weights cannot
be had offline): transformers' XLMRobertaModel from a small config, its sparse and ColBERT heads
saved as sparse_linear.pt / colbert_linear.pt, and a small SentencePiece-style Unigram vocabulary
trained here with `tokenizers` (XLM-R's special tokens). The project's own export code
(`BGEM3().build(repo, folder)`) turns the folder into the served models."""

from __future__ import annotations

from pathlib import Path

from search.config import PROJECT_ROOT
from search.models.base import BuildReport
from search.models.bge_m3 import BGEM3

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, as in XLM-R
MULTILINGUAL = [
    "Wie setze ich mein Passwort zurück?", "Comment réinitialiser mon mot de passe ?", "¿Cómo restablezco mi contraseña?",
    "如何重置我的密码？", "パスワードをリセットするには", "Как сбросить пароль?", "كيف أعيد تعيين كلمة المرور",
    "पासवर्ड कैसे रीसेट करें", "VPN von zu Hause 🏠 verbinden 🔒", "café, naïve, Ångström, façade 😀👍",
]
# The tiny model's context (max_position_embeddings 514): like BGE-M3's 8192, longer than a chunk.
MAX_TOKENS = 512


def corpus() -> list[str]:
    docs = [p.read_text(encoding="utf-8") for p in sorted((PROJECT_ROOT / "samples" / "docs").rglob("*.md"))]
    return MULTILINGUAL * 5 + docs


def save_tokenizer(folder: Path, vocab_size: int = 1500):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import Unigram
    from transformers import XLMRobertaTokenizerFast

    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = XLMRobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<unk>",
                                   model_max_length=MAX_TOKENS)
    fast.save_pretrained(str(folder))
    return fast


def save_tiny_bge_m3(folder: Path) -> Path:
    """One layer, 1024-d like BGE-M3 (the width the committed configs declare; ~7M parameters),
    a 512-token context; random weights (seed 0), random heads."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel
    from transformers.utils import logging as hf_logging

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = save_tokenizer(folder)
    config = XLMRobertaConfig(vocab_size=len(tokenizer), hidden_size=1024, num_hidden_layers=1, num_attention_heads=8,
                              intermediate_size=128, max_position_embeddings=MAX_TOKENS + 2, pad_token_id=1,
                              bos_token_id=0, eos_token_id=2, type_vocab_size=1)
    torch.manual_seed(0)
    hf_logging.disable_progress_bar()
    XLMRobertaModel(config, add_pooling_layer=False).eval().save_pretrained(str(folder))
    sparse = torch.nn.Linear(1024, 1)
    torch.nn.init.constant_(sparse.bias, 0.2)  # most token weights positive, some zero: both paths exercised
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    torch.save(torch.nn.Linear(1024, 1024).state_dict(), folder / "colbert_linear.pt")
    return folder


def build_into(repo: Path, folder: Path) -> BuildReport:
    """Save the tiny BGE-M3 into ``folder`` and export it into the model repository ``repo``."""
    report = BGEM3().build(repo, str(save_tiny_bge_m3(folder)))
    assert report.status == "built", report.detail
    return report
