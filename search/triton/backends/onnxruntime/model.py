"""Local stand-in for Triton's C++ onnxruntime backend, as a Python-based backend.

The nvidia-pytriton wheel ships no ``libtriton_onnxruntime.so``; Triton then loads
``<backend-directory>/onnxruntime/model.py``, so ``platform: "onnxruntime_onnx"`` models load
unchanged here and in the official container (real backend).

Like the real backend it never pads: requests are grouped by identical input shapes, each group
run once along the batch axis and split back. It reads the real backend's session settings from
config.pbtxt: ``parameters`` intra_op_thread_count, inter_op_thread_count, execution_mode,
enable_mem_arena, enable_mem_pattern and ``optimization { graph { level } }``."""

import ctypes
import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

from search.triton.steps import backend
from search.triton.steps.requests import attempt, split

LARGE_INPUT_BYTES = 16 << 20  # after a run on inputs this large, its freed activations go back to the system


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.batched = int(cfg.get("max_batch_size", 0)) > 0
        params = {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}
        filename = cfg.get("default_model_filename") or "model.onnx"
        path = backend.path(args, filename)
        self.session = ort.InferenceSession(path, sess_options=session_options(cfg, params),
                                            providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in cfg["input"]]
        self.outputs = [o["name"] for o in cfg["output"]]
        self.dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in cfg["output"]}
        graph_inputs = {i.name for i in self.session.get_inputs()}
        missing = set(self.inputs) - graph_inputs
        if missing:
            raise pb_utils.TritonModelException(f"{path}: config inputs {sorted(missing)} not in the ONNX graph")

    def execute(self, requests):
        arrays = [{n: backend.tensor(r, n) for n in self.inputs} for r in requests]
        groups = {}
        for idx, feeds in enumerate(arrays):
            key = tuple((n, feeds[n].shape[1:] if self.batched else feeds[n].shape, feeds[n].dtype.str) for n in self.inputs)
            groups.setdefault(key if self.batched else idx, []).append(idx)
        responses = [None] * len(requests)
        for members in groups.values():  # one bad group must not fail the others
            outcome = attempt(self._run, [arrays[i] for i in members])
            for j, i in enumerate(members):
                responses[i] = backend.respond(outcome if isinstance(outcome, Exception) else outcome[j])
        if sum(a.nbytes for feeds in arrays for a in feeds.values() if a is not None) > LARGE_INPUT_BYTES:
            _trim()  # else glibc keeps the heap a large image grew (a detector's GB) for good
        return responses

    def _run(self, group: list[dict]) -> list[dict]:
        feeds = {n: np.concatenate([f[n] for f in group]) for n in self.inputs}
        try:
            results = self.session.run(self.outputs, feeds)
        except Exception as exc:
            raise RuntimeError(f"onnxruntime: {exc}") from exc
        outs = {name: res.astype(self.dtypes[name], copy=False) for name, res in zip(self.outputs, results)}
        return split(outs, [len(f[self.inputs[0]]) for f in group]) if self.batched else [outs]


def session_options(cfg: dict, params: dict) -> ort.SessionOptions:
    """The real backend's reading of config.pbtxt (0 or absent: onnxruntime's default)."""
    opts = ort.SessionOptions()
    if int(params.get("intra_op_thread_count") or 0) > 0:
        opts.intra_op_num_threads = int(params["intra_op_thread_count"])
    if int(params.get("inter_op_thread_count") or 0) > 0:
        opts.inter_op_num_threads = int(params["inter_op_thread_count"])
    if params.get("execution_mode", "0") not in ("0", "1"):
        raise pb_utils.TritonModelException(f"execution_mode must be 0 or 1, not {params['execution_mode']!r}")
    opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL if params.get("execution_mode") == "1" else ort.ExecutionMode.ORT_SEQUENTIAL
    for key, attr in (("enable_mem_arena", "enable_cpu_mem_arena"), ("enable_mem_pattern", "enable_mem_pattern")):
        if key in params:
            setattr(opts, attr, params[key].strip().lower() in ("1", "true", "on", "yes"))
    level = int(cfg.get("optimization", {}).get("graph", {}).get("level", 0) or 0)
    opts.graph_optimization_level = {-1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                     1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                     2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL}.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return opts


def _trim() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
