"""Which crops to turn by 180°, decided as a person reading the page would (the ``as_read`` mode of the
OCR step; RapidOCR's own mode decides per crop, ``ppocr.crop_turns``).

RapidOCR squeezes every crop into the direction classifier's 48×192 input: a long text line (40 times
wider than high on a scanned page) becomes a smear, the classifier is often sure it is upside down, and
the recogniser then reads the turned line as noise (a score under text_score: the line is lost). Here
each crop is cut into pieces of the classifier's own shape, each piece votes (when the classifier is
sure of it), and the page is turned as a whole when most of its votes agree, except a crop of
several pieces that all vote the other way (a line pasted upside down); on a page whose votes are
split, each crop follows its own pieces' votes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

AGREE = 2 / 3  # the share of votes that decides for the whole page
OWN_VOTES = 2  # a crop with at least this many votes, all against the page's, keeps its own way


def pieces(crop: np.ndarray, ratio: float) -> list[np.ndarray]:
    """The crop cut across into pieces of about ``ratio`` (width/height), at least one."""
    h, w = crop.shape[:2]
    n = max(1, round(w / (h * ratio)))
    edges = np.linspace(0, w, n + 1).astype(int)
    return [crop[:, a:b] for a, b in zip(edges, edges[1:]) if b > a]


def page_turns(crops: list[np.ndarray], classify: Callable[[list[list[np.ndarray]]], list[np.ndarray]],
               cfg) -> list[bool]:
    """For each crop, whether to turn it by 180°. ``classify(batches)`` -> for each batch of images its
    [n, labels] probabilities (the classifier); ``cfg`` is the step's ``ppocr.OcrConfig``."""
    _, h, w = cfg.cls_image_shape
    cut = [pieces(c, w / h) for c in crops]
    flat = [p for ps in cut for p in ps]
    probs = np.concatenate(classify([flat[i:i + cfg.cls_batch_num] for i in range(0, len(flat), cfg.cls_batch_num)])) \
        if flat else np.zeros((0, len(cfg.label_list)))
    turned_label = np.array(["180" in label for label in cfg.label_list])
    best = probs.argmax(axis=1) if len(probs) else np.zeros(0, int)
    sure = probs.max(axis=1) > cfg.cls_thresh if len(probs) else np.zeros(0, bool)
    votes = np.where(sure, np.where(turned_label[best], 1, -1), 0)  # +1 turned, -1 upright, 0 unsure
    ends = np.cumsum([len(ps) for ps in cut])
    per_crop = np.split(votes, ends[:-1]) if len(crops) else []
    up, down = int((votes < 0).sum()), int((votes > 0).sum())
    if (down and down >= AGREE * (up + down)) or up >= AGREE * (up + down):
        page = down > up
        against = -1 if page else 1
        return [not page if (v == against).sum() >= OWN_VOTES and (v == -against).sum() == 0 else page
                for v in per_crop]
    return [int(v.sum()) > 0 for v in per_crop]
