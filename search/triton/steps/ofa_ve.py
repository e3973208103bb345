"""OFA visual entailment's steps, as modelscope 1.40.2's OfaVisualEntailmentPreprocessor and
OFA's SNLI-VE scoring (``preprocessors/ofa/visual_entailment.py``, ``base.py``): image bytes +
hypothesis (+ premise) -> the encoder's inputs and the decoder prompt (``ofa_ve_preprocess``), and
the answer logits -> the verdict (``ofa_ve_post``). The export and the tests use these functions too.

Decoding, EXIF orientation and the resize / normalise arithmetic are the shared image steps'
(``images``), so the image steps cannot drift apart; OFA's ``convert("RGB")`` is its ``alpha="drop"``.
"""

from __future__ import annotations

import re

import numpy as np

from search.triton.steps import images as picture
from search.triton.steps.images import BadImage
from search.triton.steps.requests import BadInput, one_each, texts, where

MAX_CHARS_PER_WORD = 64  # text beyond max_src_length * this is cut before tokenizing (it would be cut anyway)


class BadText(BadInput):
    """The hypothesis or premise cannot be used; the message says why."""


def pre_caption(caption: str, max_words: int) -> tuple[str, bool]:
    """modelscope's OfaBasePreprocessor.pre_caption; also whether words were cut."""
    caption = caption.lower().lstrip(",.!?*#:;~").replace("-", " ").replace("/", " ").replace("<person>", "person")
    caption = re.sub(r"\s{2,}", " ", caption)
    caption = caption.rstrip("\n").strip(" ")
    words = caption.split(" ")
    if len(words) > max_words:
        return " ".join(words[:max_words]), True
    return caption, False


def prompt_text(ve: dict, hypothesis: str, premise: str | None) -> tuple[str, bool]:
    """The encoder's text: the configured prompt around the cleaned hypothesis (and premise)."""
    n = ve["max_src_length"]
    limit = n * MAX_CHARS_PER_WORD
    cut = len(hypothesis) > limit or len(premise or "") > limit
    hyp, cut_h = pre_caption(hypothesis[:limit], n)
    if not hyp.strip():
        raise BadText("HYPOTHESIS: is empty" + (" after normalisation (lower case, leading punctuation "
                                                "stripped)" if hypothesis.strip() else ""))
    if not premise or not premise.strip():
        return ve["prompt"].format(hyp), cut or cut_h
    prem, cut_p = pre_caption(premise[:limit], n)
    return ve["prompt_premise"].format(prem, hyp), cut or cut_h or cut_p


def encode_text(tok, ve: dict, hypothesis: str, premise: str | None = None) -> tuple[list[int], bool]:
    """``<s>`` + BPE ids (at most max_src_length) + ``</s>``, and whether anything was cut."""
    text, cut = prompt_text(ve, hypothesis, premise)
    ids = tok.encode(text).ids
    n = ve["max_src_length"]
    return [ve["bos_id"], *ids[:n], ve["eos_id"]], cut or len(ids) > n


def pad_batch(sources: list[list[int]], ve: dict, prompt_type: str | None = None):
    """input_ids [B, L] and decoder_input_ids [B, T] right-padded (as modelscope's collate), and
    last_index [B, 1]: where each decoder prompt ends, the step whose logits score the answers."""
    prompt_type = prompt_type or ve["prompt_type"]
    pad = ve["pad_id"]
    ids = np.full((len(sources), max(map(len, sources))), pad, np.int64)
    for i, s in enumerate(sources):
        ids[i, :len(s)] = s
    if prompt_type == "prev_output":  # the decoder prompt is the source without </s>
        prompts = [s[:-1] for s in sources]
    else:  # "none": just <s>
        prompts = [[ve["bos_id"]] for _ in sources]
    dec = np.full((len(sources), max(map(len, prompts))), pad, np.int64)
    for i, p in enumerate(prompts):
        dec[i, :len(p)] = p
    last = np.array([[len(p) - 1] for p in prompts], np.int64)
    return ids, dec, last


def image_pixels(data: bytes, ve: dict, max_pixels: int) -> np.ndarray:
    """Encoded image -> [3, S, S] float32: transforms.Resize((S, S), BICUBIC), ToTensor, Normalize."""
    size = ve["patch_image_size"]
    cfg = {"resize": {"height": size, "width": size}, "crop": None, "crop_rounding": "floor", "resample": 3,
           "rescale_factor": 1 / 255, "mean": ve["mean"], "std": ve["std"]}
    return picture.pixels(picture.to_rgb(picture.load_image(data, max_pixels), "drop"), cfg)


def preprocess(tok, ve: dict, images, hypotheses, premises, max_pixels: int) -> dict[str, np.ndarray]:
    """One request's IMAGE, HYPOTHESIS and PREMISE values -> the ``ofa_ve_onnx`` inputs and
    TRUNCATED; a bad item refuses the request, naming it."""
    n = len(images)
    hyps = texts(one_each(hypotheses, n, "HYPOTHESIS", "IMAGE"), "HYPOTHESIS")
    prems = texts(one_each(premises, n, "PREMISE", "IMAGE"), "PREMISE")
    sources, truncated, pixels = [], [], []
    for k in range(n):
        try:
            ids, cut = encode_text(tok, ve, hyps[k], prems[k])
        except BadText as exc:
            raise BadText(where(k, n) + str(exc)) from None
        try:
            pixels.append(image_pixels(bytes(images[k]), ve, max_pixels))
        except BadImage as exc:
            raise BadImage(f"{where(k, n)}IMAGE: {exc}") from None
        sources.append(ids)
        truncated.append([cut])
    ids, dec, last = pad_batch(sources, ve)
    return {"input_ids": ids, "patch_images": np.stack(pixels), "decoder_input_ids": dec, "last_index": last,
            "TRUNCATED": np.array(truncated, dtype=bool)}


def verdict(answer_logits: np.ndarray, post: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, 3] answer logits -> (logits, probs) in label order [B, 3] and labels [B, 1] (bytes)."""
    order = [post["answers"].index(a) for label in post["labels"]
             for a, r in post["relation"].items() if r == label]
    logits = np.asarray(answer_logits, np.float32)[:, order]
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = (z / z.sum(axis=1, keepdims=True)).astype(np.float32)
    labels = np.array([[post["labels"][i].encode()] for i in probs.argmax(axis=1)], dtype=np.object_)
    return logits, probs, labels
