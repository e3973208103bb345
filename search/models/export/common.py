"""What every family's export shares: the checked ONNX export, the config-dims check, weight
sources, and the build manifest."""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

from search.models.base import Family, WeightsUnavailable


def export_checked(module, feeds: dict, outputs: list[str], dynamic_axes: dict, dest: Path, family: str,
                   fix=None) -> float:
    """Export ``module`` to ONNX at ``dest`` and return the max |ONNX - PyTorch| over ``outputs``
    on the check batch ``feeds`` (name -> tensor). The file only replaces ``dest`` when the graph
    takes every input the config names and agrees with PyTorch within 1e-4. ``fix(tmp, dest)``, if
    given, may rewrite the exported file before the check (graph-level workarounds)."""
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415
    import torch  # noqa: PLC0415

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".onnx.tmp")
    names = list(feeds)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    # nn.MultiheadAttention (open_clip) would trace to its fused inference kernel, which ONNX lacks.
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shapes the dynamic axes already cover
            torch.onnx.export(module, tuple(feeds.values()), str(tmp), input_names=names, output_names=outputs,
                              dynamic_axes=dynamic_axes, opset_version=17, dynamo=False)
            out = module(*feeds.values())
            expected = [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    if fix is not None:
        fix(tmp, dest)
    sess = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    graph_inputs = [i.name for i in sess.get_inputs()]
    if graph_inputs != names:  # the exporter drops inputs the graph does not use; the config names them all
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{family}: exported graph inputs {graph_inputs}, expected {names}")
    got = sess.run(outputs, {k: v.numpy() for k, v in feeds.items()})
    diff = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
    if diff > 1e-4:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{family}: exported {dest.parent.parent.name} differs from PyTorch (max |Δ| {diff:.2e})")
    os.replace(tmp, dest)
    return diff


def check_config_dims(repo: Path, family: str, wanted: dict[tuple[str, str], list[int]], model: str) -> None:
    """Refuse a model whose tensor shapes differ from the committed configs' dims: Triton's
    onnxruntime backend wants them equal to the graph's exactly, so exporting anyway would give
    files the server refuses. ``wanted``: (triton model, tensor) -> dims; ``model`` describes it."""
    from google.protobuf import text_format  # noqa: PLC0415
    from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

    for (name, tensor), dims in wanted.items():
        path = repo / name / "config.pbtxt"
        if not path.exists():
            continue
        cfg = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        declared = next((list(t.dims) for t in [*cfg.input, *cfg.output] if t.name == tensor), None)
        if declared != dims:
            raise WeightsUnavailable(
                f"{family}: this model needs {tensor} dims {dims} but {path} declares {declared} ({model}): "
                f"edit the dims of {', '.join(sorted({m for m, _ in wanted}))} to match")


def resolve_weights(source: str, family: str, hub_hint: str) -> Path:
    """A local directory as is; anything else is a Hugging Face id, downloaded when a hub answers."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists() or source.startswith((".", "/", "~")):
        raise WeightsUnavailable(f"{family}: '{source}' is not a model directory")
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415

        return Path(snapshot_download(source))
    except Exception as exc:  # offline, unknown id, gated repo: all mean "not here"
        reason = _hub_reason(exc)
        raise WeightsUnavailable(
            f"{family}: weights '{source}' could not be fetched ({reason}). Supply them with "
            f"`search models build --{family.replace('_', '-')}-source /path/to/model-dir`, or run the build on a machine "
            f"that reaches Hugging Face (hub id '{hub_hint}') and copy its triton_repo files here."
        ) from exc


def _hub_reason(exc: Exception) -> str:
    name = type(exc).__name__
    if os.environ.get("HF_HUB_OFFLINE") == "1" or name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") \
            or isinstance(exc, (ConnectionError, TimeoutError)):
        return "Hugging Face is not reachable from this machine"
    if name in ("RepositoryNotFoundError", "GatedRepoError"):
        return "no such model on Hugging Face, or it needs a login"
    return (str(exc).splitlines() or [name])[0][:160]


def write_manifest(fam: Family, repo: Path, source: str, resolved: Path, **extra: object) -> None:
    """build.json: the source, the weights it resolved to, and a checksum per generated file."""
    manifest = fam.manifest_path(repo)
    files = {str(p.relative_to(repo)): sha256(p) for p in fam.artifacts(repo) if p != manifest}
    manifest.write_text(json.dumps(
        {"family": fam.family, "source": source, "weights": str(resolved),
         "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": files, **extra},
        indent=2))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
