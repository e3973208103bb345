"""BGE-M3's published answers: the publisher's example, checked against the served model when the build came from
that checkpoint (``search.models.published``, docs/verify.md). ``served`` asks the live ensembles,
``judge`` compares with the published numbers (a pure function the tests feed)."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from search.models.bge_m3 import colbert_score, encode, sparse_score
from search.models.published import Context, close
from search.models.verify import FAIL, Check, Tolerance

# -- BAAI/bge-m3: FlagEmbedding's README (BGE_M3/README.md, also the Hugging Face model card)
BGE_QUERIES = ["What is BGE M3?", "Defination of BM25"]  # sic: the README's spelling
BGE_PASSAGES = ["BGE M3 is an embedding model supporting dense retrieval, lexical matching and multi-vector interaction.",
                "BM25 is a bag-of-words retrieval function that ranks a set of documents based on the query terms "
                "appearing in each document"]
BGE_DENSE = [[0.6265, 0.3477], [0.3499, 0.678]]
BGE_LEXICAL_WEIGHTS = [{"What": 0.08356, "is": 0.0814, "B": 0.1296, "GE": 0.252, "M": 0.1702, "3": 0.2695, "?": 0.04092},
                       {"De": 0.05005, "fin": 0.1368, "ation": 0.04498, "of": 0.0633, "BM": 0.2515, "25": 0.3335}]
BGE_LEXICAL = {"query 1 · passage 1": 0.19554901123046875, "query 1 · query 2": 0.0}
BGE_COLBERT = {"query 1 · passage 1": 0.7797, "query 1 · passage 2": 0.4620}
BGE_ATOL = 0.005  # their numbers were computed in FP16 (use_fp16=True)


def served(ctx: Context) -> dict:
    """The README's outputs from the served model: dense vectors, lexical weights keyed by token text
    (the model's own tokenizer from the repository, as FlagEmbedding's convert_id_to_token), ColBERT."""
    q = encode(ctx.client, BGE_QUERIES, colbert=True)
    p = encode(ctx.client, BGE_PASSAGES, colbert=True)
    tok = Tokenizer.from_file(str(ctx.repo / "bge_m3_tokenize/1/tokenizer.json"))
    words = [{tok.decode([i]).strip(): w for i, w in o.sparse.items()} for o in q]
    return {"queries": q, "passages": p, "query_words": words}


def judge(out: dict, tol: Tolerance) -> list[Check]:
    q, p = out["queries"], out["passages"]
    atol = BGE_ATOL * tol.scale
    dense = np.stack([o.dense for o in q]).astype(np.float64) @ np.stack([o.dense for o in p]).astype(np.float64).T
    lexical = [sparse_score(q[0].sparse, p[0].sparse), sparse_score(q[0].sparse, q[1].sparse)]
    colbert = [colbert_score(q[0].colbert, p[0].colbert), colbert_score(q[0].colbert, p[1].colbert)]
    checks = [close("bge_m3", "published: FlagEmbedding README dense similarity (2×2)", dense, BGE_DENSE, atol),
              close("bge_m3", "published: FlagEmbedding README lexical scores", lexical, list(BGE_LEXICAL.values()), atol),
              close("bge_m3", "published: FlagEmbedding README ColBERT scores", colbert, list(BGE_COLBERT.values()), atol)]
    words = out["query_words"]
    same = all(set(w) == set(e) for w, e in zip(words, BGE_LEXICAL_WEIGHTS))
    if not same:
        got = "; ".join(",".join(sorted(w)) for w in words)
        checks.append(Check("bge_m3", "published: FlagEmbedding README lexical weights per token", FAIL,
                            f"tokens {got}", "the README's tokens", "the tokenizer or the sparse head differs"))
    else:
        got = np.array([w[t] for w, e in zip(words, BGE_LEXICAL_WEIGHTS) for t in e])
        want = np.array([v for e in BGE_LEXICAL_WEIGHTS for v in e.values()])
        checks.append(close("bge_m3", "published: FlagEmbedding README lexical weights per token (13)", got, want, atol))
    return checks


def run(ctx: Context) -> list[Check]:
    return judge(served(ctx), ctx.tol)
