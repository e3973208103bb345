"""The int8 CPU graph: weights int8 per output channel, activations quantized per token at run time.

Each token's row of a Gemm/MatMul input gets its own scale (its largest |value| / 127, zero point
128), so a text's vector depends on its own tokens only, never on its batch-mates: onnxruntime's
dynamic quantization scales the whole batch tensor at once (one text alone vs in a batch of 64: cosine
down to 0.98), and static quantization (fixed, calibrated scales) cannot hold the feed-forward
outputs' outlier channels (far below the 0.98 bound against fp32). Integer products are exact, so
per-token rows are batch-invariant up to float rounding. Weights on 7 bits: without VNNI (AVX2 only,
e.g. AMD Zen 3) onnxruntime's u8 x s8 kernels add pairs of products in saturating 16-bit lanes;
255 x 64 x 2 stays below 2^15.

A few products stay float: by default the first that narrows (see quantize_per_token); a family
whose short texts need more names them (``Family.int8_float``), found by quantizing one product at
a time and measuring short conversational sentences against fp32."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ZERO_POINT = 128  # activations: round(x / scale) + 128, in [1, 255]
WEIGHT_MAX = 63  # weights: [-63, 63] (7 bits, see the module docstring)


def quantize_per_token(src: Path, dest: Path, big: bool = False, keep_float: tuple[str, ...] = ()) -> int:
    """Write ``src`` with every Gemm/MatMul whose second input is a constant 2-D weight replaced by its
    per-token int8 form, but those kept float; returns how many were replaced.

    Kept float: without ``keep_float``, the first product that narrows (the first layer's
    feed-forward output, whose input carries the widest outlier channels: quantized, it alone takes
    a few sentences below the 0.98 bound); with it, each product whose node or weight name, with "/"
    read as ".", contains one of its fragments (e.g. "layer.4.attention.self.value")."""
    import onnx  # noqa: PLC0415
    from onnx import helper, numpy_helper  # noqa: PLC0415

    model = onnx.load(str(src))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    consts: list = []
    nodes: list = []
    done, narrowed = 0, False

    def const(name: str, value) -> str:
        consts.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        gemm_ok = node.op_type == "Gemm" and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 \
            and not attrs.get("transA", 0)
        w_init = weights.get(node.input[1]) if len(node.input) > 1 else None
        if not (gemm_ok or node.op_type == "MatMul") or w_init is None or len(w_init.dims) != 2:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(w_init).astype(np.float32)
        if node.op_type == "Gemm" and attrs.get("transB", 0):
            w = w.T  # [in, out]
        named = f"{node.name} {w_init.name}".replace("/", ".")
        if any(f in named for f in keep_float) if keep_float else (w.shape[0] > w.shape[1] and not narrowed):
            narrowed = True
            nodes.append(node)
            continue
        scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / WEIGHT_MAX  # per output channel
        p = f"{node.name or node.output[0]}/pt8"
        x, y = node.input[0], node.output[0]
        wq = const(p + "/w", np.clip(np.round(w / scale), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8))
        n_in, n_out = w.shape
        nodes += [  # x as [tokens, in]; scale per token row: its largest |value| / 127
            helper.make_node("Reshape", [x, const(p + "/rows", np.array([-1, n_in], np.int64))], [p + "/x2"]),
            helper.make_node("Abs", [p + "/x2"], [p + "/abs"]),
            helper.make_node("ReduceMax", [p + "/abs"], [p + "/amax"], axes=[1], keepdims=0),
            helper.make_node("Max", [p + "/amax", const(p + "/eps", np.float32(1e-12))], [p + "/amax_"]),
            helper.make_node("Div", [p + "/amax_", const(p + "/qmax", np.float32(127))], [p + "/s"]),
            helper.make_node("Shape", [p + "/s"], [p + "/n"]),
            helper.make_node("Expand", [const(p + "/zp", np.uint8(ZERO_POINT)), p + "/n"], [p + "/zps"]),
            helper.make_node("QuantizeLinear", [p + "/x2", p + "/s", p + "/zps"], [p + "/xq"], axis=0),
            helper.make_node("MatMulInteger", [p + "/xq", wq, const(p + "/zp0", np.uint8(ZERO_POINT))], [p + "/yi"]),
            helper.make_node("Cast", [p + "/yi"], [p + "/yf"], to=onnx.TensorProto.FLOAT),
            helper.make_node("Unsqueeze", [p + "/s", const(p + "/ax", np.array([1], np.int64))], [p + "/s2"]),
            helper.make_node("Mul", [p + "/yf", p + "/s2"], [p + "/ys"]),
        ]
        # back to x's leading dims (a no-op reshape for the packed graphs' [tokens, in] inputs)
        out_shape = [helper.make_node("Shape", [x], [p + "/xshape"], start=0, end=-1),
                     helper.make_node("Concat", [p + "/xshape", const(p + "/nout", np.array([n_out], np.int64))],
                                      [p + "/yshape"], axis=0)]
        bias = weights.get(node.input[2]) if node.op_type == "Gemm" and len(node.input) > 2 else None
        if node.op_type == "Gemm" and len(node.input) > 2 and bias is None:
            raise ValueError(f"{node.name}: a Gemm whose bias is not a constant")
        wscale = const(p + "/ws", scale.astype(np.float32))
        nodes.append(helper.make_node("Mul", [p + "/ys", wscale], [p + "/yw"]))
        if bias is not None:
            nodes.append(helper.make_node("Add", [p + "/yw", bias.name], [p + "/yb"]))
        nodes += [*out_shape, helper.make_node("Reshape", [p + ("/yw" if bias is None else "/yb"), p + "/yshape"], [y])]
        done += 1
    graph.ClearField("node")
    graph.node.extend(nodes)
    graph.initializer.extend(consts)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in used]  # the float weights now quantized
    graph.ClearField("initializer")
    graph.initializer.extend(kept)
    onnx.save_model(model, str(dest), save_as_external_data=big, all_tensors_to_one_file=True,
                    location=dest.name + ".data")
    return done


def batch_invariance(path: Path, batches: list[dict]) -> float:
    """The smallest cosine between a row's outputs in its batch and the same row run alone (cut to
    its real tokens where the feeds carry an ``attention_mask``): 1.0 for a batch-invariant graph."""
    import onnxruntime as ort  # noqa: PLC0415

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 1.0
    for feeds in batches:
        together = sess.run(None, feeds)
        mask = feeds.get("attention_mask")
        for row in range(len(next(iter(feeds.values())))):
            width = int(mask[row].sum()) if mask is not None else None
            alone = {k: (v[row:row + 1, :width] if mask is not None and v.shape == mask.shape else v[row:row + 1])
                     for k, v in feeds.items()}
            # token-level outputs: the batch's row cut to the real tokens too
            mine = [o[row:row + 1, :width] if width is not None and o.ndim > 1 and o.shape[1] == mask.shape[1]
                    else o[row:row + 1] for o in together]
            for a, b in zip(mine, sess.run(None, alone), strict=True):
                if a.shape != b.shape:
                    return float("nan")
                a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
                norms = np.linalg.norm(a) * np.linalg.norm(b)
                worst = min(worst, 1.0 if norms == 0 else float(a @ b / norms))
    return worst
