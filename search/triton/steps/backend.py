"""The Triton side of the steps: config and files, input tensors, and outcomes -> responses
(BadInput -> INVALID_ARG, so the client tells a bad request from a server fault; anything else ->
INTERNAL). Only the python backend's stub imports this: triton_python_backend_utils exists only there."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import triton_python_backend_utils as pb_utils

from search.triton.steps.requests import BadInput, attempt, run_grouped, texts


def path(args: dict, filename: str) -> str:
    """A file of the model's version folder (the export writes tokenizer.json, *.json there)."""
    return os.path.join(args["model_repository"], args["model_version"], filename)


def read_json(args: dict, filename: str) -> dict:
    with open(path(args, filename), encoding="utf-8") as f:  # the stub's locale may be ASCII
        return json.load(f)


def parameter(args: dict, name: str, default: str | None = None) -> str:
    """A ``parameters`` value of config.pbtxt (``default`` where it has none, if given)."""
    params = json.loads(args["model_config"]).get("parameters", {})
    if name not in params and default is not None:
        return default
    return params[name]["string_value"]


def tensor(request, name: str) -> np.ndarray | None:
    """An input as numpy, or None for an optional input the request left out."""
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy()


def column(request, name: str) -> np.ndarray:
    """A required [batch, 1] input, flattened to one value per row."""
    return tensor(request, name).reshape(-1)


def text(request, name: str) -> list[str]:
    """A required [batch, 1] BYTES input as str, strictly UTF-8."""
    return texts(column(request, name), name)


def respond(outcome) -> pb_utils.InferenceResponse:
    """Output arrays by name, or the error: the caller's (INVALID_ARG) or the server's (INTERNAL)."""
    if isinstance(outcome, BadInput):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(outcome), pb_utils.TritonError.INVALID_ARG))
    if isinstance(outcome, Exception):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(outcome).__name__}: {outcome}"))
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor(name, np.ascontiguousarray(a)) for name, a in outcome.items()])


def execute_grouped(requests: list, parse: Callable, run: Callable) -> list:
    """``parse(request)`` -> its rows; ``run([rows of each request])`` -> outputs per request, in one call."""
    return [respond(o) for o in run_grouped([attempt(parse, r) for r in requests], run)]


def execute_each(requests: list, handle: Callable) -> list:
    """``handle(request)`` -> its outputs, one request at a time; a failure answers that request only."""
    return [respond(attempt(handle, r)) for r in requests]


def infer(model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """Business Logic Scripting: run another model of this server on ``inputs``; its outputs by name.
    A failure there is this model's failure (RuntimeError naming the model)."""
    request = pb_utils.InferenceRequest(model_name=model, requested_output_names=outputs,
                                        inputs=[pb_utils.Tensor(name, np.ascontiguousarray(a)) for name, a in inputs.items()])
    response = request.exec()
    if response.has_error():
        raise RuntimeError(f"{model}: {response.error().message()}")
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs}
