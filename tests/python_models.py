"""Tiny Python-backend models for tests of the Triton plumbing (start, stop, crashes, answers)."""

from __future__ import annotations

from pathlib import Path

ECHO_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""
ECHO_MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        {init}
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", {answer})]))
        return out
"""


def python_model(repo: Path, name: str, init: str = "pass", answer: str = "x") -> None:
    """Model ``name`` in ``repo``: X [batch, 1] fp32 -> Y = ``answer`` (an expression of ``x``, the
    request's X, and ``self``), after ``init`` (one line of ``initialize(self, args)``)."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ECHO_CONFIG.format(name=name))
    (repo / name / "1" / "model.py").write_text(ECHO_MODEL.format(init=init, answer=answer))


ONNX_CONFIG = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def onnx_double(repo: Path, name: str) -> None:
    """Model ``name`` in ``repo``, served by the ONNX Runtime backend: Y = 2 X. No step process: a
    stop and continue of the server tests the server itself, not Triton's watch over its Python steps."""
    import onnx  # noqa: PLC0415 - a build-time dependency, only these tests make a model
    from onnx import TensorProto, helper  # noqa: PLC0415

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 1])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "two"], ["Y"])], name, [x], [y], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ONNX_CONFIG.format(name=name))
    onnx.save(model, repo / name / "1" / "model.onnx")
