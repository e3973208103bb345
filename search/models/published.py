"""Published known answers: what each publisher's own example prints for its checkpoint, checked
against the served model when the build came from that checkpoint (docs/verify.md quotes each
number's source). Client side, numpy only; ``identify`` is also what the build records in build.json.

The checks themselves are each family's (``Family.published_checks``: ``search/models/<family>_published.py``);
this module holds what they share and ``identify`` (``Family.checkpoints``, ``known_weights``, ``checkpoint_orgs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

from search.models.verify import FAIL, PASS, SKIP, Check, Tolerance
from search.triton.client import TritonClient


def identify(family: str, source: str, weights: str | None = None, weights_sha256: str | None = None) -> str | None:
    """The published checkpoint a build came from, or None when it cannot be told: the source is its
    hub id, the weights are a hub cache snapshot of it, or the weight file's checksum is known."""
    fam = _family(family)
    ids = fam.checkpoints
    if weights_sha256 and fam.known_weights.get(weights_sha256) in ids:
        return fam.known_weights[weights_sha256]
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
        if len(parts) >= 2 and parts[-1].lower() == name.lower() and parts[-2].lower() in fam.checkpoint_orgs:
            return i  # a bare ORG/NAME download folder, where the family says its publisher writes one
    return None


@dataclass(frozen=True)
class Context:
    client: TritonClient
    repo: Path
    tol: Tolerance
    fetch: Callable[[str, str], bytes | None]  # (url, file name) -> bytes, or None when it cannot be had
    cache: str = "the verify cache folder"  # where fetch looks first (a machine without network: save the image there)


def run(family: str, ctx: Context) -> list[Check]:
    """The published checks of ``family`` against the served model."""
    return _family(family).published_checks(ctx)


def _family(name: str):
    from search.models import family  # noqa: PLC0415  (the registry imports the families, which import this module)

    return family(name)


def unavailable(family: str, what: str, url: str, file: str, ctx: Context) -> Check:
    return Check(family, what, SKIP, detail=f"needs the publisher's image {url}, which cannot be fetched from here: "
                 f"save it as {ctx.cache}/{file} (docs/verify.md)")


def close(family: str, what: str, got, want, atol) -> Check:
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

