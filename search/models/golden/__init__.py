"""The golden set of `search models verify`: fixed inputs shipped with the package (``inputs.json``
and a few small public-domain / CC0 photos beside it, see README.md), and the golden-output file
each build writes beside its model (``golden.npz``: what the PyTorch reference gave on those inputs).

numpy only: the build (``search.models.export.golden``) writes the file, ``search.models.verify``
reads it and compares the served outputs with it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

DIR = Path(__file__).resolve().parent
FILE = "golden.npz"  # beside the family's build manifest (build.json)


@dataclass(frozen=True)
class Text:
    id: str
    text: str
    max_length: int | None = None  # a lower token limit asked for explicitly (for models that take one)


@dataclass(frozen=True)
class Photo:
    id: str
    file: str
    data: bytes


@dataclass(frozen=True)
class Pair:
    """An image / hypothesis (/ premise) pair for visual entailment."""

    id: str
    photo: str
    hypothesis: str
    premise: str | None = None


@dataclass(frozen=True)
class Inputs:
    texts: tuple[Text, ...]
    photos: tuple[Photo, ...]
    pairs: tuple[Pair, ...]
    scans: tuple[Photo, ...]  # images with text in them (rendered, scanned, a sign in a photo, upside down)
    digest: str  # sha256 over inputs.json and the photos: a golden file records the set it was made from

    def photo(self, photo_id: str) -> Photo:
        return next(p for p in self.photos if p.id == photo_id)


@cache
def inputs() -> Inputs:
    raw = (DIR / "inputs.json").read_bytes()
    spec = json.loads(raw)
    h = hashlib.sha256(raw)
    files = {}
    for key in ("photos", "scans"):
        files[key] = []
        for p in spec.get(key, []):
            data = (DIR / p["file"]).read_bytes()
            h.update(data)
            files[key].append(Photo(p["id"], p["file"], data))
    texts = tuple(Text(t["id"], t["text"], t.get("max_length")) for t in spec["texts"])
    pairs = tuple(Pair(e["id"], e["photo"], e["hypothesis"], e.get("premise")) for e in spec["entailment"])
    return Inputs(texts, tuple(files["photos"]), pairs, tuple(files["scans"]), h.hexdigest())


def save(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> str:
    """Write ``golden.npz`` (atomically) and return its sha256."""
    buf = io.BytesIO()
    np.savez_compressed(buf, __meta__=np.array(json.dumps(meta, ensure_ascii=False)), **arrays)
    tmp = path.with_suffix(".npz.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def load(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and the metadata of a golden file (no pickles are read)."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
        meta = json.loads(str(npz["__meta__"]))
    return arrays, meta


def ragged(values: list[np.ndarray], dtype=np.float32, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of different lengths as one concatenated array and offsets [n + 1]."""
    offsets = np.cumsum([0, *(len(v) for v in values)]).astype(np.int64)
    shape = (0,) if width is None else (0, width)
    flat = np.concatenate([np.asarray(v, dtype) for v in values]) if values else np.zeros(shape, dtype)
    return flat, offsets


def split(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
