"""Golden outputs, recorded at build time: each family's PyTorch reference run on the golden inputs
(``search.models.golden``) and stored beside the model as ``golden.npz``, for `search models verify`
to compare the served ensembles with later (on another machine, another Triton, TensorRT FP16 ...).

Each family records its own (``search/models/export/<family>_golden.py``: ``record(...)``, following
the publisher's pipeline where it differs from the served steps) through ``write`` here, which
returns what the build manifest notes about the file (``golden`` in build.json).
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import numpy as np

from search.models import golden
from search.models.base import Family
from search.models.published import identify


def torch_module():
    import torch  # noqa: PLC0415  (the export extra: only a build imports this module)

    return torch


def write(fam: Family, repo: Path, arrays: dict[str, np.ndarray], reference: str, *, source: str, weights: Path | str,
          weights_sha256: str | None = None, versions: dict[str, str] | None = None) -> dict:
    """Save the golden file beside the build manifest; what build.json records about it.
    ``versions``: the reference's libraries (default: torch's version)."""
    gold = golden.inputs()
    meta = {"family": fam.family, "inputs_digest": gold.digest, "reference": reference, "precision": "fp32",
            **(versions or {"torch": torch_module().__version__}), "python": platform.python_version(),
            "texts": [t.id for t in gold.texts], "photos": [p.id for p in gold.photos], "pairs": [p.id for p in gold.pairs],
            "scans": [s.id for s in gold.scans]}
    path = fam.manifest_path(repo).parent / golden.FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = golden.save(path, arrays, meta)
    return {"golden": {"file": str(path.relative_to(repo)), "sha256": digest, "inputs_digest": gold.digest,
                       "reference": reference},
            "checkpoint": identify(fam.family, source, str(weights), weights_sha256)}


def file_sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
