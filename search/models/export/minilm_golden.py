"""MiniLM's golden outputs: its PyTorch reference run on the golden inputs, recorded at build time for
`search models verify` (the shared part is ``search.models.export.golden``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from search.models import golden
from search.models.base import Family
from search.models.export.golden import file_sha256, torch_module, write


# -- MiniLM: transformers' BertModel, mean pooling over the attention mask, L2 norm
def record(fam: Family, repo: Path, weights: Path, source: str, max_tokens: int) -> dict:
    """The reference is sentence-transformers' pipeline for all-MiniLM-L6-v2, written with
    transformers (the export's own dependencies): its tokenizer cut at ``max_tokens`` (the served
    limit), mean pooling over real tokens, L2 normalisation."""
    torch = torch_module()
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415  (export extra)

    gold = golden.inputs()
    texts = [t.text for t in gold.texts]
    tok = AutoTokenizer.from_pretrained(str(weights))
    model = AutoModel.from_pretrained(str(weights), attn_implementation="eager").eval()
    enc = tok(texts, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    dense = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), p=2, dim=1)
    truncated = np.array([len(tok(t, verbose=False)["input_ids"]) > max_tokens for t in texts])
    return write(fam, repo, {"text_dense": dense.numpy().astype(np.float32), "text_truncated": truncated},
                 "transformers AutoModel + mean pooling + L2 norm (sentence-transformers' pipeline)",
                 source=source, weights=weights, weights_sha256=file_sha256(weights / "model.safetensors"))
