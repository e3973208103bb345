"""Local stand-in for Triton's C++ onnxruntime backend, as a Python-based backend.

The nvidia-pytriton wheel ships no ``libtriton_onnxruntime.so``; Triton then looks for
``<backend-directory>/onnxruntime/model.py``, so models with ``platform: "onnxruntime_onnx"``
load unchanged here and in the official container (which uses the real C++ backend).

Like the real backend it never pads: the requests the dynamic batcher hands over are grouped by
identical input shapes, each group concatenated along the batch axis and run once.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.batched = int(cfg.get("max_batch_size", 0)) > 0
        params = {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}
        filename = cfg.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        opts = ort.SessionOptions()
        if params.get("intra_op_thread_count"):
            opts.intra_op_num_threads = int(params["intra_op_thread_count"])
        self.session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in cfg["input"]]
        self.outputs = [o["name"] for o in cfg["output"]]
        self.dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in cfg["output"]}
        graph_inputs = {i.name for i in self.session.get_inputs()}
        missing = set(self.inputs) - graph_inputs
        if missing:
            raise pb_utils.TritonModelException(f"{path}: config inputs {sorted(missing)} not in the ONNX graph")

    def execute(self, requests):
        arrays = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs} for r in requests]
        responses = [None] * len(requests)
        groups = {}
        for idx, feeds in enumerate(arrays):
            key = tuple((n, feeds[n].shape[1:] if self.batched else feeds[n].shape, feeds[n].dtype.str) for n in self.inputs)
            groups.setdefault(key if self.batched else idx, []).append(idx)
        for members in groups.values():
            try:
                feeds = {n: np.concatenate([arrays[i][n] for i in members]) for n in self.inputs}
                results = self.session.run(self.outputs, feeds)
            except Exception as exc:  # one bad group must not fail the others
                for i in members:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"onnxruntime: {exc}"))
                continue
            start = 0
            for i in members:
                n = arrays[i][self.inputs[0]].shape[0]
                outs = [
                    pb_utils.Tensor(name, np.ascontiguousarray(res[start:start + n] if self.batched else res).astype(self.dtypes[name], copy=False))
                    for name, res in zip(self.outputs, results)
                ]
                responses[i] = pb_utils.InferenceResponse(output_tensors=outs)
                start += n
        return responses
