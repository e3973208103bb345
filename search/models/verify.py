"""`search models verify`, client side (numpy only): send the golden inputs through the live Triton
ensembles and compare the answers with the build's golden outputs (``golden.npz``).

Bounds (docs/verify.md): dense by cosine per item, sparse by token set and absolute difference,
ColBERT by count and per-token cosine, entailment logits by absolute difference and label. fp32
must match PyTorch (cosine >= 0.9999); GPU FP16 and int8 get ``TOLERANCES``."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from search.models import golden
from search.models.base import INT8_MIN_COSINE, Family
from search.triton.client import TritonClient

PASS, FAIL, SKIP = "pass", "FAIL", "skipped"


@dataclass(frozen=True)
class Tolerance:
    cosine: float  # least cosine per dense / ColBERT vector
    sparse: float  # most |Δ| per sparse weight; tokens above it must be in both sets
    logits: float  # most |Δ| per entailment logit, and per value of a family's own outputs (``_values``)
    scale: float  # published checks: how much their own tolerance is widened
    box_px: float = 2.0  # text lines: most |Δ| per box corner coordinate, in pixels
    line_score: float = 1e-3  # text lines: most |Δ| per line's confidence


TOLERANCES = {
    "fp32": Tolerance(cosine=0.9999, sparse=1e-4, logits=1e-3, scale=1.0),
    # TensorRT FP16 with LayerNorm in FP32 (configs/gpu.pbtxt); bench/bench_gpu.py holds it to 0.999 as well
    "fp16": Tolerance(cosine=0.999, sparse=1e-2, logits=5e-2, scale=10.0),
    # int8 CPU graph (`search models build --precision int8`; measured on the earlier dynamic int8): served
    # int8 of the measured family (its int8_quality) against
    # PyTorch fp32 measured min cosine 0.9871 on the golden texts (0.9877 on the build's check inputs) and
    # max |delta| 0.011 on the published similarities; the bound leaves room for other CPUs' int8 kernels.
    # Without VNNI (AMD Zen 3) 8-bit weights saturated: 0.970 for a golden text alone; the build's 7-bit
    # weights give 0.983 there.
    "int8": Tolerance(cosine=INT8_MIN_COSINE, sparse=5e-2, logits=2e-1, scale=30.0),
}


@dataclass(frozen=True)
class Check:
    family: str
    check: str  # what was compared, e.g. "golden: text vectors (13)"
    status: str  # PASS | FAIL | SKIP
    measured: str = ""  # e.g. "min cosine 0.999998 (long-truncated)"
    bound: str = ""  # e.g. ">= 0.9999"
    detail: str = ""  # why it failed or was skipped, in a few words

    def as_dict(self) -> dict:
        return asdict(self)


def golden_path(fam: Family, repo: Path) -> Path:
    return fam.manifest_path(repo).parent / golden.FILE


def precision(fam: Family, manifest: dict | None, client: TritonClient) -> str:
    """fp16 (an ONNX step served by TensorRT in FP16: the GPU configs serve the exported fp32 graph,
    whatever the CPU graph's precision), else the build's own: int8 when the manifest says so, fp32."""
    for step in fam.steps:
        try:
            cfg = client.model_config(step)
        except Exception:  # a step Triton cannot describe: judge by the manifest
            continue
        if found := config_precision(cfg):
            return found
    declared = str((manifest or {}).get("precision", "")).lower()
    return declared if declared in TOLERANCES else "fp32"


def config_precision(cfg: dict) -> str | None:
    """"fp16" / "int8" when a model config (Triton's JSON form) runs it with TensorRT at that precision."""
    accelerators = ((cfg.get("optimization") or {}).get("execution_accelerators") or {}).get(
        "gpu_execution_accelerator") or []
    for acc in accelerators:
        mode = str((acc.get("parameters") or {}).get("precision_mode", "")).upper()
        if acc.get("name") == "tensorrt" and mode in ("FP16", "INT8"):
            return mode.lower()
    return None


# -- the comparison
def verify_golden(fam: Family, repo: Path, client: TritonClient, tol: Tolerance) -> list[Check]:
    """The golden check of one built, served family: one Check per kind of output."""
    path = golden_path(fam, repo)
    name = fam.family
    if not path.exists():
        return [Check(name, "golden outputs", FAIL, detail=f"none recorded for this build ({path} is missing): "
                      f"rebuild with `search models build --force {fam.cli_option} SOURCE`")]
    try:
        expected, meta = golden.load(path)
    except (OSError, ValueError, KeyError) as exc:
        return [Check(name, "golden outputs", FAIL, detail=f"{path} cannot be read ({type(exc).__name__})")]
    gold = golden.inputs()
    if meta.get("inputs_digest") != gold.digest:
        return [Check(name, "golden outputs", FAIL, detail="recorded on another version of the golden inputs: rebuild "
                      f"with `search models build --force {fam.cli_option} SOURCE`")]
    got = fam.served_golden(client, gold)
    if got is None:
        return [Check(name, "golden outputs", SKIP, detail="no verify hook for this family (Family.served_golden)")]
    return compare(name, expected, got, gold, tol)


def compare(family: str, expected: dict[str, np.ndarray], got: dict[str, np.ndarray], gold: golden.Inputs,
            tol: Tolerance) -> list[Check]:
    """Served outputs against golden ones, key by key (a pure function: the tests feed it too)."""
    checks: list[Check] = []
    text_ids = [t.id for t in gold.texts]
    if "text_dense" in expected:
        checks.append(_dense(family, f"text vectors ({len(text_ids)})", expected["text_dense"], got["text_dense"],
                             text_ids, tol))
    if "text_dense" in expected and "query_dense" in got:
        checks.append(_dense(family, f"query vectors, one text per request ({len(text_ids)})", expected["text_dense"],
                             got["query_dense"], text_ids, tol))
    if "image_dense" in expected:
        checks.append(_dense(family, f"image vectors ({len(gold.photos)})", expected["image_dense"], got["image_dense"],
                             [p.id for p in gold.photos], tol))
    if "sparse_ids" in expected:
        checks.append(_sparse(family, expected, got, text_ids, tol))
    if "colbert" in expected:
        checks.append(_colbert(family, expected, got, text_ids, tol))
    if "pair_logits" in expected:
        checks.append(_logits(family, expected["pair_logits"], got["pair_logits"], [p.id for p in gold.pairs], tol))
    if "line_texts" in expected:
        checks.append(_lines(family, expected, got, [s.id for s in gold.scans], tol))
    for key in sorted(set(expected) - KNOWN):  # a family's own outputs (a new capability's): compared as values
        checks.append(_values(family, key, expected[key], got.get(key), tol))
    for key, ids in (("text_truncated", text_ids), ("pair_truncated", [p.id for p in gold.pairs])):
        if key in expected:
            want, have = np.asarray(expected[key], bool), np.asarray(got[key], bool).reshape(-1)
            wrong = [ids[i] for i in np.flatnonzero(want != have)] if want.shape == have.shape else ids
            checks.append(Check(family, f"golden: truncation flags ({len(ids)})", FAIL if wrong else PASS,
                                f"{len(ids) - len(wrong)}/{len(ids)} equal", "all equal",
                                f"differ for {', '.join(wrong)}" if wrong else ""))
    return checks


# The golden keys the comparisons above read; any other is a family's own output, held to ``_values``
KNOWN = {"text_dense", "query_dense", "image_dense", "sparse_ids", "sparse_values", "sparse_offsets", "colbert",
         "colbert_offsets", "pair_logits", "pair_truncated", "text_truncated", "line_texts", "line_scores", "line_boxes",
         "line_offsets"}


def _values(family: str, key: str, want: np.ndarray, have: np.ndarray | None, tol: Tolerance) -> Check:
    """Outputs no comparison above knows: numbers within ``tol.logits`` of the reference, anything else equal."""
    what = f"golden: {key} ({want.size})"
    if have is None or np.shape(have) != want.shape:
        return Check(family, what, FAIL, "missing" if have is None else f"shape {np.shape(have)}", f"shape {want.shape}",
                     "the served model is not the one built")
    if not np.issubdtype(want.dtype, np.number):
        wrong = int((np.asarray(have) != want).sum())
        return Check(family, what, FAIL if wrong else PASS, f"{want.size - wrong}/{want.size} equal", "all equal")
    diff = float(np.abs(want.astype(np.float64) - np.asarray(have, np.float64)).max(initial=0.0))
    return Check(family, what, PASS if diff <= tol.logits else FAIL, f"max |Δ| {diff:.2e}", f"<= {tol.logits:g}")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    return (a * b).sum(-1) / np.maximum(na * nb, 1e-30)


def _dense(family: str, what: str, want: np.ndarray, have: np.ndarray, ids: list[str], tol: Tolerance) -> Check:
    if want.shape != have.shape:
        return Check(family, f"golden: {what}", FAIL, f"shape {tuple(have.shape)}", f"shape {tuple(want.shape)}",
                     "the served model is not the one built")
    cos = cosines(want, have)
    worst = int(cos.argmin())
    ok = bool(cos.min() >= tol.cosine)
    return Check(family, f"golden: {what}", PASS if ok else FAIL, f"min cosine {cos.min():.6f} ({ids[worst]})",
                 f">= {tol.cosine}", "" if ok else f"{int((cos < tol.cosine).sum())} of {len(ids)} below the bound")


def _sparse(family: str, expected: dict, got: dict, ids: list[str], tol: Tolerance) -> Check:
    want = [dict(zip(i.tolist(), v.tolist())) for i, v in zip(golden.split(expected["sparse_ids"], expected["sparse_offsets"]),
                                                              golden.split(expected["sparse_values"], expected["sparse_offsets"]))]
    have = [dict(zip(i.tolist(), v.tolist())) for i, v in zip(golden.split(got["sparse_ids"], got["sparse_offsets"]),
                                                              golden.split(got["sparse_values"], got["sparse_offsets"]))]
    worst, where, problems = 0.0, ids[0], []
    for k, (w, h) in enumerate(zip(want, have)):
        # A token whose weight is within the tolerance of zero may be kept on one side and dropped (relu) on the other.
        missing = {t for t in set(w) ^ set(h) if max(w.get(t, 0.0), h.get(t, 0.0)) > tol.sparse}
        if missing:
            problems.append(f"{ids[k]}: token sets differ ({len(missing)} ids)")
        diff = max((abs(w.get(t, 0.0) - h.get(t, 0.0)) for t in set(w) | set(h)), default=0.0)
        if diff > worst:
            worst, where = diff, ids[k]
    if worst > tol.sparse:
        problems.append(f"weights differ by up to {worst:.2e} ({where})")
    return Check(family, f"golden: sparse weights ({len(ids)})", FAIL if problems else PASS,
                 f"same token sets; max |Δ| {worst:.2e} ({where})" if not problems else f"max |Δ| {worst:.2e}",
                 f"same sets, |Δ| <= {tol.sparse:g}", "; ".join(problems[:3]))


def _colbert(family: str, expected: dict, got: dict, ids: list[str], tol: Tolerance) -> Check:
    want = golden.split(expected["colbert"], expected["colbert_offsets"])
    have = golden.split(got["colbert"], got["colbert_offsets"])
    counts = [ids[k] for k, (w, h) in enumerate(zip(want, have)) if len(w) != len(h)]
    if counts:
        return Check(family, f"golden: ColBERT vectors ({len(ids)})", FAIL, "token counts differ", "same counts",
                     f"for {', '.join(counts[:3])}")
    mins = [float(cosines(w, h).min()) if len(w) else 1.0 for w, h in zip(want, have)]
    worst = int(np.argmin(mins))
    ok = mins[worst] >= tol.cosine
    return Check(family, f"golden: ColBERT vectors ({len(ids)})", PASS if ok else FAIL,
                 f"min cosine {mins[worst]:.6f} ({ids[worst]})", f">= {tol.cosine}",
                 "" if ok else f"{sum(m < tol.cosine for m in mins)} of {len(ids)} texts below the bound")


def _logits(family: str, want: np.ndarray, have: np.ndarray, ids: list[str], tol: Tolerance) -> Check:
    if want.shape != have.shape:
        return Check(family, f"golden: entailment logits ({len(ids)})", FAIL, f"shape {tuple(have.shape)}",
                     f"shape {tuple(want.shape)}")
    diff = np.abs(want.astype(np.float64) - have).max(axis=1)
    worst = int(diff.argmax())
    labels = [ids[k] for k in np.flatnonzero(want.argmax(1) != have.argmax(1))]
    ok = bool(diff.max() <= tol.logits) and not labels
    detail = "" if ok else (f"labels differ for {', '.join(labels)}; " if labels else "") + \
        f"{int((diff > tol.logits).sum())} of {len(ids)} beyond the bound"
    return Check(family, f"golden: entailment logits ({len(ids)})", PASS if ok else FAIL,
                 f"max |Δ| {diff.max():.2e} ({ids[worst]})", f"<= {tol.logits:g}, same labels", detail)


def changed_files(fam: Family, repo: Path, manifest: dict | None) -> list[str]:
    """The generated files whose checksum differs from the build manifest's (a diagnosis after a
    failed check: a file swapped or edited since the build)."""
    out = []
    for rel, digest in ((manifest or {}).get("files") or {}).items():
        path = repo / rel
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            out.append(rel)
            continue
        if h.hexdigest() != digest:
            out.append(rel)
    return out


def _lines(family: str, expected: dict, got: dict, ids: list[str], tol: Tolerance) -> Check:
    """Text lines read in images: the same lines in the same order with identical text, boxes and
    confidences within the bounds."""
    what, problems = f"golden: text lines ({len(ids)} images)", []
    worst_box, worst_score = 0.0, 0.0
    for k, image in enumerate(ids):
        w = range(expected["line_offsets"][k], expected["line_offsets"][k + 1])
        h = range(got["line_offsets"][k], got["line_offsets"][k + 1])
        want_texts = [str(expected["line_texts"][i]) for i in w]
        have_texts = [str(got["line_texts"][i]) for i in h]
        if want_texts != have_texts:
            problems.append(f"{image}: {len(have_texts)} lines {have_texts[:2]}..., expected {len(want_texts)} {want_texts[:2]}...")
            continue
        if len(w):
            boxes = np.abs(expected["line_boxes"][w.start:w.stop] - got["line_boxes"][h.start:h.stop])
            scores = np.abs(expected["line_scores"][w.start:w.stop] - got["line_scores"][h.start:h.stop])
            worst_box, worst_score = max(worst_box, float(boxes.max())), max(worst_score, float(scores.max()))
    if worst_box > tol.box_px:
        problems.append(f"boxes differ by up to {worst_box:.2f} px")
    if worst_score > tol.line_score:
        problems.append(f"confidences differ by up to {worst_score:.2e}")
    n = int(expected["line_offsets"][-1])
    return Check(family, what, FAIL if problems else PASS,
                 f"{n} lines, identical text; max |Δ| box {worst_box:.2f} px, confidence {worst_score:.1e}",
                 f"same text, box <= {tol.box_px:g} px, confidence <= {tol.line_score:g}", "; ".join(problems[:3]))
