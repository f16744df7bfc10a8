"""SmoothQuant (Xiao et al. 2023, "SmoothQuant: accurate and efficient post-training quantization for large language
models", §4) for onnxruntime's static int8 (issue 53; on by default, `quantize_static_int8`): per-channel scales that move the activation outliers of a
LayerNorm's output into the weights of the MatMuls that read it, folded into the graph so the float model computes
the same function.

Static int8 quantises each Linear's input per tensor, with one min / max range for all of its channels. Where a few
channels are far larger than the rest (DINOv2's LayerNorm outputs: max |x| 88 against an RMS of 3.6 in block 0's
MLP input), that one range leaves few int8 levels for the typical channels. SmoothQuant divides input channel j by
s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) and multiplies the weight's row j by s_j: X W = (X / s)(s W). Behind a
LayerNorm the division is free: it is folded into the LayerNorm's scale and bias (gamma / s, beta / s), the product
into the weights, so the smoothed graph has exactly the nodes of the original (same speed) and its float output
differs only by rounding. OpenVINO's path has NNCF's own SmoothQuant (`quantize_openvino_int8`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

#: SmoothQuant's migration strength alpha for onnxruntime static int8: how much of the activations' channel range
#: moves into the weights (0: none, 1: all)
SMOOTH_ALPHA = 0.5
#: the smallest and largest per-channel scale (a near-dead channel or weight row would otherwise get an extreme one)
SCALE_RANGE = (1e-2, 1e2)


def _constants(graph) -> dict[str, object]:  # noqa: ANN001 - onnx.GraphProto
    """{tensor name: its initializer} for the initializers and the Identity nodes of one (the exporter writes a
    parameter equal to another as an Identity of it)."""
    found = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Identity" and n.input[0] in found:
            found[n.output[0]] = found[n.input[0]]
    return found


def smoothable(graph) -> dict[str, list]:  # noqa: ANN001 - onnx.GraphProto, an optional dependency
    """{LayerNormalization node name: the MatMul nodes that read its output} where every reader of the output is a
    MatMul whose second input is a 2-D weight (an initializer; or a Shape) and the output is not a graph output: the LayerNorms
    before a block's qkv and fc1 (the final norm, read by the pooling, is not one)."""
    weights = _constants(graph)
    outputs = {o.name for o in graph.output}
    readers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    found = {}
    for n in graph.node:
        if n.op_type != "LayerNormalization" or n.output[0] in outputs or len(n.input) < 2 or n.input[1] not in weights:
            continue
        mm = [m for m in readers.get(n.output[0], []) if m.op_type != "Shape"]  # a Shape reads no values
        if mm and all(m.op_type == "MatMul" and m.input[0] == n.output[0] and m.input[1] in weights
                      and len(weights[m.input[1]].dims) == 2 for m in mm):
            found[n.name] = mm
    return found


def channel_absmax(path: str | Path, tensors: list[str], calibration: torch.Tensor, input_name: str,
                   batch_size: int = 8) -> dict[str, np.ndarray]:
    """{tensor: max |x| per last-axis channel over `calibration`} of the named intermediate tensors of the ONNX
    graph at `path`, run by onnxruntime in batches of `batch_size` (the tensors made graph outputs of a copy)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in tensors if t not in have)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the named tensors must stay
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    found: dict[str, np.ndarray] = {}
    for b in calibration.float().split(batch_size):
        outs = sess.run(tensors, {input_name: b.numpy()})
        for t, x in zip(tensors, outs):
            m = np.abs(x).reshape(-1, x.shape[-1]).max(0)
            found[t] = m if t not in found else np.maximum(found[t], m)
    return found


def smooth_scales(act_max: np.ndarray, weight_max: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) (paper eq. 4), within `SCALE_RANGE`; 1 where a
    channel's activation or weight is 0."""
    s = np.power(np.maximum(act_max, 1e-12), alpha) / np.power(np.maximum(weight_max, 1e-12), 1 - alpha)
    s = np.clip(s, *SCALE_RANGE)
    s[(act_max <= 0) | (weight_max <= 0)] = 1.0
    return s.astype(np.float32)


def smooth_onnx(src: str | Path, dst: str | Path, calibration: torch.Tensor, input_name: str,
                alpha: float = SMOOTH_ALPHA, batch_size: int = 8) -> dict[str, float]:
    """SmoothQuant applied to the ONNX graph `src`, written to `dst`: for each LayerNorm whose output only MatMuls
    read (`smoothable`), its output's per-channel max |x| over `calibration` (normalised images, N x C x H x W),
    the scales of `smooth_scales`, the LayerNorm's scale and bias divided by them and the MatMuls' weight rows
    multiplied (new initializers: a weight shared with another node is not changed under it): no node is added.
    The float function is unchanged up to rounding. Returns {smoothed LayerNorm output: how much its spread of
    channel ranges (largest / median max |x|) shrank}; empty (and `dst` a copy) where nothing is smoothable."""
    import onnx
    from onnx import numpy_helper

    if not 0 <= alpha <= 1:
        raise ValueError(f"SmoothQuant's alpha is between 0 and 1, got {alpha}")
    model = onnx.load(str(src))
    graph = model.graph
    targets = smoothable(graph)
    if not targets:
        onnx.save(model, str(dst))
        return {}
    norms = {n.name: n for n in graph.node if n.name in targets}
    groups = {norms[k].output[0]: (norms[k], v) for k, v in targets.items()}
    act = channel_absmax(src, list(groups), calibration, input_name, batch_size)
    inits = _constants(graph)
    done: dict[str, float] = {}

    def add(arr: np.ndarray, name: str) -> str:
        graph.initializer.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    for t, (ln, readers) in groups.items():
        w = {m.name: numpy_helper.to_array(inits[m.input[1]]) for m in readers}
        a = act[t]
        s = smooth_scales(a, np.max([np.abs(v).max(1) for v in w.values()], axis=0), alpha)
        for slot in (1, 2):  # x / s folded into the LayerNorm: gamma / s, beta / s
            if len(ln.input) > slot and ln.input[slot]:
                ln.input[slot] = add(numpy_helper.to_array(inits[ln.input[slot]]) / s, f"{ln.name}.smoothed_{slot}")
        for m in readers:  # s W
            m.input[1] = add(w[m.name] * s[:, None], f"{m.name}.smoothed_weight")
        done[t] = float((a.max() / np.median(a)) / ((a / s).max() / np.median(a / s)))
    used = {i for n in graph.node for i in n.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    onnx.save(model, str(dst))
    return done
