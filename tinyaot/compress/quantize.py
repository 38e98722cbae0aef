"""int8 quantization per the numerics contract (TFLite/CMSIS-NN scheme).

Activations: int8, asymmetric, per tensor, from calibrated ranges widened to include 0 (so zero padding and
ReLU's zero are exact). Weights: int8, symmetric (zero point 0), per output channel, in [-127, 127] (the
symmetric range keeps -128 out, as TFLite does, so |w| <= 127 bounds every accumulator). Bias: int32 with scale
s_in * s_w[c]. Each op file sets its own integer parameters from these in its `quantize()`.

A pre-quantized model (QDQ: see passes/absorb_qdq.py) arrives with `Tensor.quant` already set on its activations
and integer weights/biases: those parameters are used as given, never recomputed; only the effective
requantization multipliers are derived from them.
"""
from __future__ import annotations

import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, QuantParams, Tensor, verify

QMIN, QMAX = -128, 127


def activation_qparams(lo: float, hi: float) -> QuantParams:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / (QMAX - QMIN)
    if scale <= 0.0 or not np.isfinite(scale):
        scale = 1.0 / 256  # an all-zero tensor: any scale represents it; keep a harmless one
    zp = int(np.clip(np.round(QMIN - lo / scale), QMIN, QMAX))
    return QuantParams.per_tensor(np.float32(scale), zp)  # float32 scales, as ONNX and TFLite store them


def quantize_values(x: np.ndarray, qp: QuantParams) -> np.ndarray:
    """Float -> int8 as ONNX QuantizeLinear does: round half to even, then saturate. Graph inputs use it, so
    a value on a tie quantizes the way onnxruntime's QuantizeLinear would."""
    q = np.rint(np.asarray(x, np.float64) / np.float64(qp.scale).astype(np.float32)) + qp.zero_point
    return np.clip(q, QMIN, QMAX).astype(np.int8)


def dequantize_values(q: np.ndarray, qp: QuantParams) -> np.ndarray:
    return (np.asarray(q, np.float32) - np.float32(qp.zero_point)) * np.float32(qp.scale)


def weight_qparams(w: np.ndarray, axis: int, qmax: int = 127) -> tuple[np.ndarray, QuantParams]:
    """Symmetric per-channel weights along `axis`, in [-qmax, qmax]: 127 for int8, 7 for 4-bit weights (stored
    as int8 values; compression packs them)."""
    moved = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(moved).max(axis=1) if moved.size else np.zeros(w.shape[axis])
    scale = np.where(amax > 0, amax / float(qmax), 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.astype(np.float64).reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, QuantParams(scale.astype(np.float64), np.zeros_like(scale, dtype=np.int64), axis)


def weight_qmax(node) -> int:
    """The symmetric weight range of a Conv/FullyConnected node: 127, or 7 when compression marked it 4-bit."""
    return 2 ** (int(node.attrs.get("weight_bits", 8)) - 1) - 1


def quantize_bias(b: np.ndarray, s_in: float, s_w: np.ndarray) -> np.ndarray:
    scale = np.float64(s_in) * np.asarray(s_w, np.float64)
    q = np.rint(np.asarray(b, np.float64) / scale)
    return np.clip(q, -(2 ** 31), 2 ** 31 - 1).astype(np.int32)


def activation_clamp(qp: QuantParams, activation: tuple[float, float] | None) -> tuple[int, int]:
    """int8 clamp bounds of a fused activation (lo, hi) under output parameters `qp`."""
    lo, hi = activation if activation is not None else (-np.inf, np.inf)
    qlo = QMIN if not np.isfinite(lo) else int(np.clip(qp.zp + np.rint(lo / qp.s), QMIN, QMAX))
    qhi = QMAX if not np.isfinite(hi) else int(np.clip(qp.zp + np.rint(hi / qp.s), QMIN, QMAX))
    return qlo, qhi


def output_qparams(graph: Graph, name: str, ranges: dict[str, tuple[float, float]]) -> QuantParams:
    given = graph.tensors[name].quant
    if given is not None:  # the pre-quantized model's own QuantizeLinear parameters for this tensor
        return given
    if graph.meta.get("prequantized"):
        raise TinyaotError(f"tensor {name!r} has no QuantizeLinear/DequantizeLinear pair in the pre-quantized "
                           "model; tinyaot needs the int8 parameters of every activation (partly float QDQ "
                           "models are not supported)")
    if name not in ranges:
        raise TinyaotError(f"calibration produced no range for tensor {name!r}")
    return activation_qparams(*ranges[name])


def layer_weights(w: Tensor, b: Tensor | None, axis: int, s_in: float, where: str, *,
                  allow_filter_offset: bool = False,
                  qmax: int = 127) -> tuple[np.ndarray, QuantParams, np.ndarray, QuantParams, int]:
    """(int8 weights, their per-channel parameters along `axis`, int32 bias, its parameters, filter offset) of a
    Conv or FullyConnected whose input scale is `s_in`.

    Float weights are quantized here (symmetric, per channel). Integer weights a pre-quantized model stores
    (`w.quant` set) are kept bit for bit with their scales; a per-tensor scale is repeated per channel so every
    layer has the same per-channel requantization. Their zero point must be 0, except that a kernel with a filter
    offset (fully connected) takes one zero point shared by all channels. The kernels add the int32 bias to
    accumulators counted in units of s_in * s_w[c]: a stored int32 bias in those units (what QDQ makes) is kept
    bit for bit; one with another scale is re-expressed in them; a float bias is quantized to them.

    `qmax` < 127 (4-bit weights, `weight_qmax`) quantizes to [-qmax, qmax]; a pre-quantized model's integer
    weights are then re-quantized from their real values, since their own scales are for 8 bits."""
    out_c = w.shape[axis]
    offset = 0
    if w.quant is None:
        qw, wq = weight_qparams(w.data, axis, qmax)
    elif qmax != 127 and (w.quant.axis is None or w.quant.axis == axis):
        qw, wq = weight_qparams(w.quant.dequantize(w.data), axis, qmax)
    else:
        q = w.quant
        if q.axis is not None and (q.axis != axis or np.size(q.scale) != out_c):
            raise TinyaotError(f"{where}: weights are quantized along axis {q.axis} ({np.size(q.scale)} scales); "
                               f"tinyaot needs one scale per output channel ({out_c}) or one per tensor")
        scale = np.broadcast_to(np.asarray(q.scale, np.float64).reshape(-1), (out_c,)).copy()
        zp = np.broadcast_to(np.asarray(q.zero_point, np.int64).reshape(-1), (out_c,)).copy()
        if np.any(zp != 0):
            if not (allow_filter_offset and np.all(zp == zp[0])):
                raise TinyaotError(f"{where}: asymmetric weights (zero point {zp[zp != 0][0]}) are not supported "
                                   "by its int8 kernel; quantize weights symmetrically (zero point 0)")
            offset = -int(zp[0])
        qw, wq = w.data, QuantParams(scale, zp, axis)
    s_acc = np.float64(s_in) * wq.scale  # the accumulator's units per output channel
    if b is None:
        qb = np.zeros(out_c, np.int32)
    elif b.quant is not None and b.dtype == "int32":
        s_b = np.broadcast_to(np.asarray(b.quant.scale, np.float64).reshape(-1), (out_c,))
        if np.any(np.asarray(b.quant.zero_point) != 0):
            raise TinyaotError(f"{where}: an int32 bias with a non-zero zero point is not supported")
        if np.allclose(s_b, s_acc, rtol=1e-6, atol=0.0):
            qb = b.data.astype(np.int32)  # bit for bit: already in accumulator units (to float32 rounding)
        else:
            qb = quantize_bias(b.quant.dequantize(b.data), s_in, wq.scale)
            if np.any(np.abs(qb.astype(np.int64)) >= 2 ** 31 - 1):
                raise TinyaotError(f"{where}: the bias does not fit int32 at scale s_in * s_w")
    else:
        real = b.quant.dequantize(b.data) if b.quant is not None else b.data
        qb = quantize_bias(real, s_in, wq.scale)
    bias_q = QuantParams(s_acc, np.zeros(out_c, np.int64), 0)
    return qw, wq, qb, bias_q, offset


def quantize_graph(graph: Graph, ranges: dict[str, tuple[float, float]]) -> Graph:
    """Assign int8 parameters to every tensor and integer parameters to every node, in schedule order."""
    from tinyaot.ops.registry import get_op

    given = {}
    if graph.meta.get("prequantized"):
        share_quant_across_moves(graph)
        given = {n: graph.tensors[n].quant for n in graph.activations() if graph.tensors[n].quant is not None}
    for name in graph.inputs:
        graph.tensors[name].quant = output_qparams(graph, name, ranges)
        graph.tensors[name].dtype = "int8"
    for node in graph.nodes:
        get_op(node.op).quantize(node, graph, ranges)
        for o in node.outputs:
            graph.tensors[o].dtype = "int8"
    if graph.meta.get("prequantized"):
        graph.meta["quantization_notes"] = _check_given(graph, given)
    graph.quantized = True
    return verify(graph, "quantize")


def share_quant_across_moves(graph: Graph) -> None:
    """A pre-quantized model quantizes a tensor where its QuantizeLinear sits, e.g. after the Reshape or Transpose
    that follows the graph input, or a tensor the passes created (an NHWC copy) has no QuantizeLinear at all. A
    move does not change values, so a tensor without parameters takes those of its other side (repeatedly)."""
    moves = [(n.inputs[0], n.outputs[0]) for n in graph.nodes if n.op in ("Transpose", "Reshape")]
    changed = True
    while changed:
        changed = False
        for a, b in moves:
            for src, dst in ((a, b), (b, a)):
                ts, td = graph.tensors[src], graph.tensors[dst]
                if ts.quant is not None and td.quant is None and not td.is_const:
                    td.quant = ts.quant
                    changed = True


def _same(a: QuantParams, b: QuantParams) -> bool:
    return (a.axis == b.axis and np.array_equal(np.float32(a.scale), np.float32(b.scale))
            and np.array_equal(a.zero_point, b.zero_point))


def _check_given(graph: Graph, given: dict[str, QuantParams]) -> list[dict]:
    """Every activation keeps the parameters the pre-quantized model gives it, or compilation stops. The one
    exception is Softmax, whose int8 kernel (TFLite's) only produces scale 1/256, zero point -128: a model giving
    another output scale is deployed with the fixed one, and the note says so (it is a probability either way).
    Ops that keep their input's parameters (max pooling, Relu, moves) cannot honour a different output scale."""
    notes = []
    for name, want in given.items():
        got = graph.tensors[name].quant
        if _same(want, got):
            continue
        prod = graph.producer(name)
        op = prod.op if prod is not None else "input"
        entry = {"tensor": name, "op": op, "given": {"scale": float(want.scale), "zero_point": int(want.zero_point)},
                 "used": {"scale": float(got.scale), "zero_point": int(got.zero_point)}}
        if op == "Softmax":
            notes.append({**entry, "why": "the int8 softmax kernel outputs scale 1/256, zero point -128"})
            continue
        raise TinyaotError(f"{op} node {prod.name if prod else name!r}: the model quantizes its output {name!r} with "
                           f"scale {float(want.scale):.6g}, zero point {int(want.zero_point)}, but tinyaot's int8 "
                           f"{op} can only produce scale {float(got.scale):.6g}, zero point {int(got.zero_point)} "
                           "(its input's, or its kernel's fixed ones); re-quantize the model with those "
                           "(onnxruntime: TensorQuantOverrides)")
    return notes
