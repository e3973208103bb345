"""Tokenizing for the text steps (and the exports, which must tokenize as the server does):
truncate with the model's own fast tokenizer, then pad in numpy to one width for the batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def encode(tok, texts: Sequence[str], limit: int) -> list:
    """Encodings cut at ``limit`` tokens (specials included), unpadded; the tokenizer is left
    without truncation or padding (as tokenizer.json is saved)."""
    tok.no_padding()
    tok.enable_truncation(limit)
    try:
        return tok.encode_batch(list(texts)) if len(texts) else []
    finally:
        tok.no_truncation()


def encode_each(tok, texts: Sequence[str], limits: Sequence[int]) -> list:
    """``encode`` with a limit per text: one tokenizer call per distinct limit."""
    out = [None] * len(texts)
    for limit in set(limits):
        rows = [r for r, lim in enumerate(limits) if lim == limit]
        for r, enc in zip(rows, encode(tok, [texts[r] for r in rows], limit)):
            out[r] = enc
    return out


def pad(encodings: list, pad_id: int = 0, width: int | None = None) -> dict[str, np.ndarray]:
    """input_ids (padded with ``pad_id``), attention_mask and token_type_ids (with 0) [n, width]
    (``width`` defaults to the longest), TRUNCATED [n, 1] bool, NUM_TOKENS [n, 1] int32."""
    lengths = [len(e.ids) for e in encodings]
    width = max(lengths, default=0) if width is None else width
    ids = np.full((len(encodings), width), pad_id, np.int64)
    mask, types = np.zeros_like(ids), np.zeros_like(ids)
    for row, (enc, n) in enumerate(zip(encodings, lengths)):
        ids[row, :n], mask[row, :n], types[row, :n] = enc.ids, enc.attention_mask, enc.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
            "TRUNCATED": np.array([bool(e.overflowing) for e in encodings], bool).reshape(-1, 1),
            "NUM_TOKENS": np.array(lengths, np.int32).reshape(-1, 1)}
