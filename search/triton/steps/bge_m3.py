"""BGE-M3's steps (FlagEmbedding's BGEM3FlagModel semantics): the tokenizer (``<s> text </s>``,
a limit per text, padded to the longest) and the post-processing of the encoder's outputs into
dense, sparse and ColBERT vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from search.triton.steps import tokens
from search.triton.steps.requests import MIXED_UP, MixedUp


def limit(asked: int, server: int) -> int:
    """A text's token limit: the server's, lowered by a request's positive MAX_LENGTH (at least 2:
    ``<s>`` and ``</s>``)."""
    return max(2, min(int(asked), server)) if int(asked) > 0 else server


def tokenize(tok, texts: Sequence[str], limits: Sequence[int], pad_id: int) -> dict[str, np.ndarray]:
    """input_ids, attention_mask [n, longest], TRUNCATED and NUM_TOKENS [n, 1]."""
    return tokenize_requests(tok, texts, limits, pad_id, [len(texts)])[0]


def tokenize_requests(tok, texts: Sequence[str], limits: Sequence[int], pad_id: int,
                      counts: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """``tokenize`` for the texts of several requests at once (``counts`` per request, in order),
    each request padded to the width ``tokens.widths`` gives it."""
    out = tokens.pad_requests(tokens.encode_each(tok, texts, limits), counts, pad_id)
    for part in out:
        del part["token_type_ids"]  # XLM-R takes none
    return out


def sparse(ids: np.ndarray, weights: np.ndarray, special: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token id -> max weight over its occurrences, without special tokens or zero weights."""
    keep = (weights > 0) & ~np.isin(ids, special)
    ids, weights = ids[keep], weights[keep]
    if not len(ids):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    order = np.lexsort((-weights, ids))  # by id, the largest weight first
    ids, weights = ids[order], weights[order]
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    return ids[first].astype(np.int64), weights[first].astype(np.float32)


def post(ids: np.ndarray, mask: np.ndarray, weights: np.ndarray, colbert: np.ndarray, dense: np.ndarray,
         special: np.ndarray, dim: int, with_colbert: bool) -> dict[str, np.ndarray]:
    """One request's encoder outputs -> DENSE; SPARSE_INDICES / SPARSE_VALUES (by id, padded with
    -1 / 0 to the request's longest); COLBERT (NUM_TOKENS - 1 vectors per text, the graph masked and
    normalised them, padded with zero rows to the request's longest text; none without colbert)."""
    check_one_request(ids, mask, weights, colbert, dense, dim)
    pairs = [sparse(ids[r], weights[r], special) for r in range(len(ids))]
    width = max((len(p[0]) for p in pairs), default=0)
    indices = np.full((len(ids), width), -1, np.int64)
    values = np.zeros((len(ids), width), np.float32)
    for r, (idx, val) in enumerate(pairs):
        indices[r, :len(idx)], values[r, :len(val)] = idx, val
    rows = int(mask.sum(axis=1).max(initial=1)) - 1 if with_colbert else 0
    vectors = np.ascontiguousarray(colbert[:, :rows], dtype=np.float32)
    return {"DENSE": np.asarray(dense, np.float32), "SPARSE_INDICES": indices, "SPARSE_VALUES": values,
            "COLBERT": vectors.reshape(len(ids), rows, dim)}


def check_one_request(ids: np.ndarray, mask: np.ndarray, weights: np.ndarray, colbert: np.ndarray,
                      dense: np.ndarray, dim: int) -> None:
    """Raise MixedUp unless the encoder's outputs can be this request's: its shapes, and its masking
    (the graph zeroes token weights and ColBERT rows exactly where the tokens are padding). Checks
    the pad area of token weights and, per text, ColBERT's last real and first pad row: no copy of
    the vectors."""
    n, width = ids.shape
    shapes = {"input_ids": ids.shape, "attention_mask": mask.shape, "token_weights": weights.shape,
              "colbert": colbert.shape, "dense": dense.shape}
    if (mask.shape != ids.shape or weights.shape != ids.shape or dense.shape != (n, dim)
            or colbert.shape != (n, max(width - 1, 0), dim)):
        raise MixedUp(f"the encoder's {MIXED_UP}: shapes " + ", ".join(f"{k} {list(v)}" for k, v in shapes.items()))
    real = mask.sum(axis=1)
    if weights[mask == 0].any() or any(
            (1 < k <= width and not colbert[r, k - 2].any()) or (1 <= k < width and colbert[r, k - 1].any())
            for r, k in enumerate(real.tolist())):
        raise MixedUp(f"the encoder's {MIXED_UP}: its padding does not match this request's tokens")
