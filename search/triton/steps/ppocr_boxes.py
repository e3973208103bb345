"""PP-OCR's detector post-processing (DB), as RapidOCR 1.4.4 computes it: the probability map ->
text boxes (threshold, dilation, contours, box scores, unclip, min-area rectangles) in reading order.
``cfg`` is the pipeline's ``ppocr.OcrConfig``."""

from __future__ import annotations

import cv2
import numpy as np
import pyclipper
from shapely.geometry import Polygon


def det_boxes(prob: np.ndarray, shape: tuple[int, int], cfg) -> list[np.ndarray]:
    """DB post-processing of the detector's [1, 1, h, w] map for an image of ``shape`` (H, W): float32
    [4, 2] boxes (tl, tr, br, bl) in that image's pixels, in reading order."""
    pred = prob[:, 0, :, :]
    mask = pred[0] > cfg.thresh
    if cfg.use_dilation:
        mask = cv2.dilate(np.array(mask).astype(np.uint8), np.array([[1, 1], [1, 1]]))
    boxes = _boxes_from_bitmap(pred[0], mask, shape, cfg)
    height, width = shape
    kept = []
    for box in boxes:
        box = _order_clockwise(box)
        box[:, 0] = np.clip(box[:, 0], 0, width - 1).astype(np.int64)  # as RapidOCR clamps a box: int(min(max(..)))
        box[:, 1] = np.clip(box[:, 1], 0, height - 1).astype(np.int64)
        if int(np.linalg.norm(box[0] - box[1])) <= 3 or int(np.linalg.norm(box[0] - box[3])) <= 3:
            continue
        kept.append(box)
    return sort_boxes(kept)


def _boxes_from_bitmap(pred: np.ndarray, bitmap: np.ndarray, shape: tuple[int, int], cfg) -> list[np.ndarray]:
    height, width = bitmap.shape
    dest_h, dest_w = shape
    contours = cv2.findContours((bitmap * 255).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[-2]
    boxes = []
    for contour in contours[:cfg.max_candidates]:
        points, sside = _mini_box(contour)
        if sside < 3:
            continue
        score = _score_fast(pred, points.reshape(-1, 2)) if cfg.score_mode == "fast" else _score_slow(pred, contour)
        if cfg.box_thresh > score:
            continue
        box, sside = _mini_box(_unclip(points, cfg.unclip_ratio))
        if sside < 5:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / width * dest_w), 0, dest_w)
        box[:, 1] = np.clip(np.round(box[:, 1] / height * dest_h), 0, dest_h)
        boxes.append(box.astype(np.int32))
    return boxes


def _mini_box(contour: np.ndarray) -> tuple[np.ndarray, float]:
    rect = cv2.minAreaRect(contour)
    p = sorted(list(cv2.boxPoints(rect)), key=lambda x: x[0])
    i1, i4 = (0, 1) if p[1][1] > p[0][1] else (1, 0)
    i2, i3 = (2, 3) if p[3][1] > p[2][1] else (3, 2)
    return np.array([p[i1], p[i2], p[i3], p[i4]]), min(rect[1])


def _score_fast(bitmap: np.ndarray, box: np.ndarray) -> float:
    h, w = bitmap.shape[:2]
    box = box.copy()
    xmin = np.clip(np.floor(box[:, 0].min()).astype(np.int32), 0, w - 1)
    xmax = np.clip(np.ceil(box[:, 0].max()).astype(np.int32), 0, w - 1)
    ymin = np.clip(np.floor(box[:, 1].min()).astype(np.int32), 0, h - 1)
    ymax = np.clip(np.ceil(box[:, 1].max()).astype(np.int32), 0, h - 1)
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    box[:, 0] -= xmin
    box[:, 1] -= ymin
    cv2.fillPoly(mask, box.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(bitmap[ymin:ymax + 1, xmin:xmax + 1], mask)[0]


def _score_slow(bitmap: np.ndarray, contour: np.ndarray) -> float:
    h, w = bitmap.shape[:2]
    contour = np.reshape(contour.copy(), (-1, 2))
    xmin, xmax = np.clip(contour[:, 0].min(), 0, w - 1), np.clip(contour[:, 0].max(), 0, w - 1)
    ymin, ymax = np.clip(contour[:, 1].min(), 0, h - 1), np.clip(contour[:, 1].max(), 0, h - 1)
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    contour[:, 0] -= xmin
    contour[:, 1] -= ymin
    cv2.fillPoly(mask, contour.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(bitmap[ymin:ymax + 1, xmin:xmax + 1], mask)[0]


def _unclip(box: np.ndarray, unclip_ratio: float) -> np.ndarray:
    poly = Polygon(box)
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.array(offset.Execute(poly.area * unclip_ratio / poly.length)).reshape((-1, 1, 2))


def _order_clockwise(pts: np.ndarray) -> np.ndarray:
    xs = pts[np.argsort(pts[:, 0]), :]
    left, right = xs[:2, :], xs[2:, :]
    tl, bl = left[np.argsort(left[:, 1]), :]
    tr, br = right[np.argsort(right[:, 1]), :]
    return np.array([tl, tr, br, bl], dtype="float32")


def sort_boxes(boxes: list[np.ndarray]) -> list[np.ndarray]:
    """RapidOCR's sorted_boxes: by top-left (y, x), then boxes whose tops are within 10 px left to right
    (one insertion pass that stops at the first pair in order, exactly as RapidOCR)."""
    out = sorted(boxes, key=lambda x: (x[0][1], x[0][0]))
    for i in range(len(out) - 1):
        for j in range(i, -1, -1):
            if abs(out[j + 1][0][1] - out[j][0][1]) < 10 and out[j + 1][0][0] < out[j][0][0]:
                out[j], out[j + 1] = out[j + 1], out[j]
            else:
                break
    return out
