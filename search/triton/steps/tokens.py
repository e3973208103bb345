"""Tokenizing for the text steps (and the exports, which must tokenize as the server does):
truncate with the model's own fast tokenizer, then pad in numpy.

Every text of one request gets one width (one array), and requests of similar lengths share a
width so the dynamic batcher runs them together. Very different lengths do not (``widths``):
padding a short query to a long passage costs more on a CPU than running them apart."""

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


GROUP_RATIO, GROUP_SLACK = 1.25, 4  # a request joins a width up to 25 % (or 4 tokens) over its own longest


def widths(longest: Sequence[int]) -> list[int]:
    """Per request (given its longest text), the width to pad it to: requests sorted by length are
    grouped while the group's longest is within GROUP_RATIO (or GROUP_SLACK tokens) of its first,
    and each group is padded to its longest. Exact either way: the encoders mask the padding."""
    out = [0] * len(longest)  # a request without texts stays 0 wide and groups with nothing
    order = sorted((r for r in range(len(longest)) if longest[r] > 0), key=lambda r: longest[r])
    group: list[int] = []
    for r in order:
        if group and longest[r] > max(int(longest[group[0]] * GROUP_RATIO), longest[group[0]] + GROUP_SLACK):
            group = []
        group.append(r)
        for g in group:
            out[g] = longest[r]
    return out


def pad_requests(encodings: list, counts: Sequence[int], pad_id: int = 0) -> list[dict[str, np.ndarray]]:
    """``pad`` per request (``counts``: its number of texts, in order) at the widths of ``widths``."""
    ends = np.cumsum(counts, dtype=np.int64)
    parts = [encodings[end - n:end] for n, end in zip(counts, ends)]
    longest = [max((len(e.ids) for e in part), default=0) for part in parts]
    return [pad(part, pad_id, width=w) for part, w in zip(parts, widths(longest))]


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
