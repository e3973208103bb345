"""What every family's export shares: the checked ONNX export, the config-dims check, weight
sources, and the build manifest."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from search.models.base import INT8_MIN_COSINE, BuildReport, Family, Int8Rejected, WeightsUnavailable


def export_checked(module, feeds: dict, outputs: list[str], dynamic_axes: dict, dest: Path, family: str,
                   fix=None, reference=None) -> float:
    """Export ``module`` to ONNX at ``dest`` and return the max |ONNX - PyTorch| over ``outputs``
    on the check batch ``feeds`` (name -> tensor); PyTorch is ``reference`` where given (the
    model as loaded, when ``module`` computes the same another way), else ``module``. The file
    only replaces ``dest`` when the graph takes every input the config names and agrees with
    PyTorch within 1e-4. ``fix(tmp, dest)``, if given, may rewrite the exported file before the
    check (graph-level workarounds)."""
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415
    import torch  # noqa: PLC0415

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".onnx.tmp")
    names = list(feeds)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    # nn.MultiheadAttention would trace to its fused inference kernel, which ONNX lacks.
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shapes the dynamic axes already cover
            torch.onnx.export(module, tuple(feeds.values()), str(tmp), input_names=names, output_names=outputs,
                              dynamic_axes=dynamic_axes, opset_version=17, dynamo=False)
            out = (module if reference is None else reference)(*feeds.values())
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


def precision_status(fam: Family, weights: Path, precision: str, allow_unmeasured: bool) -> str | BuildReport:
    """``fam.precision_status`` for these weights (int8 figures hold only for the weights measured),
    or the refusal to report when it is unmeasured and not allowed."""
    status = fam.precision_status(precision)
    if status == "measured" and not any(sha256(f) == fam.int8_quality.weights_sha256
                                        for f in sorted(weights.glob("*.safetensors")) + sorted(weights.glob("*.bin"))):
        status = "unmeasured"
        if not allow_unmeasured:
            return BuildReport(fam.family, "refused", f"int8 {fam.display} was measured on other weights "
                               f"({fam.int8_quality.measured_by}), not on {weights}: pass --allow-unmeasured-int8 "
                               "to build it anyway, or measure it (a bench/quality_*.py script)")
    return status


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


# -- the CPU graph: what config.pbtxt serves (the GPU configs serve the exported graph, which
# TensorRT fuses by itself and whose com.microsoft-free ops it can run)
CPU_GRAPH = "model.cpu.onnx"
MIN_COSINE = 0.9999  # a fused or packed graph vs the exported one, on the family's check inputs
MIN_GAIN = 1.03  # another graph is served when it runs at least this much faster than the exported one


@dataclass(frozen=True)
class Fusion:
    """How onnxruntime's transformer optimizer reads a graph (``optimize_model`` arguments)."""

    model_type: str  # the optimizer's model type, e.g. "bert" (BERT, XLM-RoBERTa)
    num_heads: int
    hidden_size: int


def cpu_graph(exported: Path, fusion: Fusion | None, checks: list[dict], family: str, precision: str = "fp32",
              timing: list[dict] | None = None, pack: Callable[[Path], object] | None = None,
              text: list[dict] | None = None, keep_float: tuple[str, ...] = ()) -> dict:
    """Write ``model.cpu.onnx`` beside ``exported``, the graph the CPU configs serve, and return
    what the manifest records about it.

    1. Candidates: the exported graph, onnxruntime's transformer-optimized one (where ``fusion``
       says how) and the packed one ``pack(path)`` exports. Each must match the exported graph's
       outputs on ``checks`` (MIN_COSINE per row), else this raises and nothing is replaced.
    2. Choice: timed on ``timing`` (default ``checks``), one thread, best of alternating rounds;
       the fastest is served if at least MIN_GAIN faster. Fused is not always faster (on some CPUs
       core kernels beat the contrib ops), so the build machine decides.
    3. ``precision`` "int8": the chosen graph quantized per token (``search.models.export.int8``),
       held against fp32 on ``text`` (real text's batches, default ``checks``): INT8_MIN_COSINE on
       every row, and each row run alone must give its in-batch vector (MIN_COSINE); the products
       ``keep_float`` names stay float. One that misses
       gives way to the next-fastest candidate's; when none meets both this raises Int8Rejected."""
    import numpy as np  # noqa: PLC0415

    if precision not in ("fp32", "int8"):
        raise ValueError(f"{family}: unknown precision {precision!r}")
    dest = exported.with_name(CPU_GRAPH)
    work = exported.parent / ".cpu-graph"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    name = exported.parent.parent.name
    try:
        start = time.perf_counter()
        big = _graph_bytes(exported) > 1_800_000_000  # protobuf's 2 GB limit: weights go to model.cpu.onnx.data
        reference = run_graph(exported, checks)
        record: dict = {"file": CPU_GRAPH, "precision": precision, "fusion": None, "fused_ops": {}}
        candidates = {"exported": exported}
        if fusion is not None:
            candidates["fused"] = work / "fused" / CPU_GRAPH
            candidates["fused"].parent.mkdir()
            record |= {"fusion": fusion.model_type, "fused_ops": _fuse(exported, candidates["fused"], fusion, big)}
        if pack is not None:
            candidates["packed"] = work / "packed" / CPU_GRAPH
            pack(candidates["packed"])
        for kind, path in candidates.items():
            if kind != "exported":
                cos = agreement(reference, run_graph(path, checks))
                if cos < MIN_COSINE:
                    raise RuntimeError(f"{family}: the {kind} {name} graph differs from the exported one "
                                       f"(min cosine {cos:.6f} < {MIN_COSINE})")
                record[f"{kind}_vs_exported_min_cosine"] = round(cos, 7)
        served, ms = "exported", {}
        if len(candidates) > 1:
            # 3 rounds: enough to steady a graph's best time; more rounds barely moved the measured gain.
            ms = time_graphs(candidates, timing or checks, rounds=2 if big else 3)
            if (load := busy_load()) is not None:
                record["timed_under_load"] = load
            # decided on the gains as recorded: a gain of 1.0296 written as 1.03 must not read "not enough"
            gains = {kind: round(ms["exported"] / t, 3) for kind, t in ms.items() if kind != "exported"}
            best = max(gains, key=gains.get)
            served = best if gains[best] >= MIN_GAIN else "exported"
            record |= {"cpu_ms_per_run": {k: round(v, 2) for k, v in ms.items()},
                       **{f"{kind}_gain": g for kind, g in gains.items()}}
        record["served"] = served
        chosen = candidates[served]
        if served == "exported":  # copied into the work folder, whose files all move to dest (as fused and packed are)
            chosen = work / "chosen" / CPU_GRAPH
            chosen.parent.mkdir()
            _copy_graph(candidates[served], chosen)
        if precision == "int8":
            from search.models.export.int8 import batch_invariance, quantize_per_token  # noqa: PLC0415

            text_ref = reference if text is None else run_graph(exported, text)
            order = [served] + sorted((k for k in candidates if k != served), key=lambda k: ms.get(k, 0.0))
            tried: dict[str, tuple[float, float, Path]] = {}
            for kind in order:  # the fastest first; the next only when it falls short
                quantized = work / f"int8-{kind}" / CPU_GRAPH
                quantized.parent.mkdir()
                quantize_per_token(chosen if kind == served else candidates[kind], quantized, big, keep_float)
                cos = agreement(text_ref, run_graph(quantized, text or checks))
                inv = batch_invariance(quantized, text or checks)
                tried[kind] = (cos if np.isfinite(cos) else -1.0, inv if np.isfinite(inv) else -1.0, quantized)
                if tried[kind][0] >= INT8_MIN_COSINE and tried[kind][1] >= MIN_COSINE:
                    break
            else:
                cos, inv, _ = max(tried.values(), key=lambda t: t[:2])
                raise Int8Rejected(f"int8 {family} refused: min cosine {cos:.4f} against fp32 on the check texts "
                                   f"(bound {INT8_MIN_COSINE}), one-vs-batch {inv:.6f} (bound {MIN_COSINE}); "
                                   "the fp32 build stays")
            cos, inv, chosen = tried[kind]
            if len(tried) > 1:
                record["int8_tried_min_cosine"] = {k: round(c, 6) for k, (c, _, _) in tried.items()}
            record |= {"served": kind, "int8": "per-token", "int8_vs_fp32_min_cosine": round(cos, 6),
                       "int8_one_vs_batch_min_cosine": round(inv, 7),
                       "int8_checked_rows": sum(len(next(iter(f.values()))) for f in text or checks)}
        record["seconds"] = round(time.perf_counter() - start, 1)
        for stale in (dest, dest.with_name(CPU_GRAPH + ".data")):
            stale.unlink(missing_ok=True)
        for f in chosen.parent.iterdir():
            if f.is_file():
                os.replace(f, dest.parent / f.name)
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


def time_graphs(graphs: dict[str, Path], feeds: list[dict], rounds: int = 3) -> dict[str, float]:
    """CPU milliseconds per pass over ``feeds`` for each graph: one intra-op thread without
    spinning (so CPU time is work done, whatever else runs on the machine), best of ``rounds``,
    the graphs taking turns."""
    import onnxruntime as ort  # noqa: PLC0415

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for k, p in graphs.items()}
    best = dict.fromkeys(sessions, float("inf"))
    for sess in sessions.values():
        sess.run(None, feeds[0])  # warm-up
    for _ in range(rounds):
        for k, sess in sessions.items():
            t = time.process_time()
            for f in feeds:
                sess.run(None, f)
            best[k] = min(best[k], time.process_time() - t)
    return {k: v * 1000 for k, v in best.items()}


def busy_load() -> float | None:
    """The 1-minute load average when it is over the machine's CPU count, else None. CPU time does not
    shield the timing from other work on the machine: under load a faster graph can time as no faster."""
    load = os.getloadavg()[0]
    return round(load, 2) if load > (os.cpu_count() or 1) else None


def describe_cpu_graph(cpu: dict, status: str) -> str:
    """One line for the build report: what fused, which graph is served, how close int8 came."""
    fused = ", ".join(f"{n}×{k}" for k, n in cpu["fused_ops"].items()) or "nothing fused"
    text = f"CPU graph {cpu['precision']}" + (f" ({status})" if cpu["precision"] != "fp32" else "")
    text += f", {cpu['served']} graph served (fusions: {fused}"
    for kind in ("fused", "packed"):
        if f"{kind}_gain" in cpu:
            text += f"; {kind}/exported speed {cpu[f'{kind}_gain']:.2f}x"
    text += ")"
    if "int8_vs_fp32_min_cosine" in cpu:
        text += f"; int8 vs fp32 min cosine {cpu['int8_vs_fp32_min_cosine']:.4f} on the check inputs"
        if "int8_one_vs_batch_min_cosine" in cpu:
            text += f", one vs batch {cpu['int8_one_vs_batch_min_cosine']:.6f}"
    if "timed_under_load" in cpu:
        text += (f"; timed while the machine was busy (load average {cpu['timed_under_load']:g} on {os.cpu_count()} "
                 "CPUs): on a quiet machine `search models build --force` may serve another graph")
    return text


def _fuse(src: Path, dest: Path, fusion: Fusion, big: bool) -> dict[str, int]:
    from onnxruntime.transformers import optimizer  # noqa: PLC0415  (export only: it imports onnx and sympy)

    quiet = logging.getLogger("onnxruntime.transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "fused N nodes" chatter; what fused is returned and recorded instead
    try:
        # opt_level 0: the optimizer's own fusions only, no onnxruntime session rewrites (those can
        # be specific to the machine that runs them); onnxruntime adds its own at load time anyway.
        model = optimizer.optimize_model(str(src), model_type=fusion.model_type, num_heads=fusion.num_heads,
                                         hidden_size=fusion.hidden_size, opt_level=0)
        stats = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
        model.save_model_to_file(str(dest), use_external_data_format=big)
    finally:
        quiet.setLevel(level)
    return stats


def run_graph(path: Path, checks: list[dict]) -> list[list]:
    """The graph's outputs on each input batch (onnxruntime, CPU)."""
    import onnxruntime as ort  # noqa: PLC0415

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, feeds) for feeds in checks]


def agreement(reference: list[list], got: list[list]) -> float:
    """The smallest cosine between matching rows (one row per batch item, each output flattened)
    of two runs; rows that are zero in both (masked positions) agree."""
    import numpy as np  # noqa: PLC0415

    worst = 1.0
    for ref_outs, got_outs in zip(reference, got, strict=True):
        for a, b in zip(ref_outs, got_outs, strict=True):
            a = np.asarray(a, np.float64).reshape(len(a), -1)
            b = np.asarray(b, np.float64).reshape(len(b), -1)
            if a.shape != b.shape:
                return float("nan")
            na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
            both_zero = (na == 0) & (nb == 0)
            cos = np.where(both_zero, 1.0, (a * b).sum(1) / np.maximum(na * nb, 1e-30))
            worst = min(worst, float(cos.min(initial=1.0)))
    return worst


def _graph_bytes(path: Path) -> int:
    """The graph's size with its external weight files (torch writes one per tensor beside it)."""
    import onnx  # noqa: PLC0415
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data  # noqa: PLC0415

    model = onnx.load(str(path), load_external_data=False)
    files = {ExternalDataInfo(t).location for t in model.graph.initializer if uses_external_data(t)}
    return path.stat().st_size + sum((path.parent / f).stat().st_size for f in files)


def _copy_graph(src: Path, dest: Path) -> None:
    import onnx  # noqa: PLC0415

    model = onnx.load(str(src))  # loads external weights too
    big = _graph_bytes(src) > 1_800_000_000
    onnx.save_model(model, str(dest), save_as_external_data=big, all_tensors_to_one_file=True,
                    location=dest.name + ".data")
