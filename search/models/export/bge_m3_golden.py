"""BGE-M3's golden outputs: its PyTorch reference run on the golden inputs, recorded at build time for
`search models verify` (the shared part is ``search.models.export.golden``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from search.models import golden
from search.models.base import Family
from search.models.export.golden import torch_module, write


# -- BGE-M3: the exported module, FlagEmbedding's tokenizer call and post-processing
def record(fam: Family, repo: Path, module, weights: Path, source: str, limit: int, special_ids: list[int]) -> dict:
    """Per text: the transformers tokenizer cut at the text's limit (``max_length`` of the golden
    text, else the model's), the encoder with its heads, then FlagEmbedding's BGEM3FlagModel rules:
    dense = normalised CLS; sparse = max relu weight per token id, special tokens and zeros dropped;
    ColBERT = the normalised vectors of tokens 1..n-1."""
    torch = torch_module()
    from transformers import AutoTokenizer  # noqa: PLC0415  (export extra)

    tok = AutoTokenizer.from_pretrained(str(weights))
    special = set(special_ids)
    dense, sparse_ids, sparse_values, colbert, truncated = [], [], [], [], []
    for t in golden.inputs().texts:
        cap = min(t.max_length or limit, limit)
        enc = tok([t.text], truncation=True, max_length=cap, return_tensors="pt")
        truncated.append(len(tok(t.text, verbose=False)["input_ids"]) > cap)
        with torch.no_grad():
            d, weights_, cb = module(enc["input_ids"], enc["attention_mask"])
        ids = enc["input_ids"][0].tolist()
        best: dict[int, float] = {}
        for w, i in zip(weights_[0].tolist(), ids):
            if i not in special and w > 0 and w > best.get(i, 0.0):
                best[i] = w
        dense.append(d[0].numpy())
        sparse_ids.append(np.array(sorted(best), np.int64))
        sparse_values.append(np.array([best[i] for i in sorted(best)], np.float32))
        colbert.append(cb[0, :len(ids) - 1].numpy())
    flat_ids, offsets = golden.ragged(sparse_ids, np.int64)
    flat_values, _ = golden.ragged(sparse_values)
    flat_colbert, colbert_offsets = golden.ragged(colbert, width=int(dense[0].shape[0]))
    arrays = {"text_dense": np.stack(dense).astype(np.float32), "text_truncated": np.array(truncated),
              "sparse_ids": flat_ids, "sparse_values": flat_values, "sparse_offsets": offsets,
              "colbert": flat_colbert, "colbert_offsets": colbert_offsets}
    return write(fam, repo, arrays, "the exported PyTorch module; transformers tokenizer; FlagEmbedding's post-processing",
                 source=source, weights=weights)
