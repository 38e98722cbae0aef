"""int8 quantization per the numerics contract (TFLite/CMSIS-NN scheme).

Activations: int8, asymmetric, per tensor, from calibrated ranges widened to include 0 (so zero padding and
ReLU's zero are exact). Weights: int8, symmetric (zero point 0), per output channel, in [-127, 127] (the
symmetric range keeps -128 out, as TFLite does, so |w| <= 127 bounds every accumulator). Bias: int32 with scale
s_in * s_w[c]. Each op file sets its own integer parameters from these in its `quantize()`.
"""
from __future__ import annotations

import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, QuantParams, verify

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


def weight_qparams(w: np.ndarray, axis: int) -> tuple[np.ndarray, QuantParams]:
    """Symmetric per-channel int8 weights along `axis`."""
    moved = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(moved).max(axis=1) if moved.size else np.zeros(w.shape[axis])
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.astype(np.float64).reshape(shape)), -127, 127).astype(np.int8)
    return q, QuantParams(scale.astype(np.float64), np.zeros_like(scale, dtype=np.int64), axis)


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
    if name not in ranges:
        raise TinyaotError(f"calibration produced no range for tensor {name!r}")
    return activation_qparams(*ranges[name])


def quantize_graph(graph: Graph, ranges: dict[str, tuple[float, float]]) -> Graph:
    """Assign int8 parameters to every tensor and integer parameters to every node, in schedule order."""
    from tinyaot.ops.registry import get_op

    for name in graph.inputs:
        graph.tensors[name].quant = output_qparams(graph, name, ranges)
        graph.tensors[name].dtype = "int8"
    for node in graph.nodes:
        get_op(node.op).quantize(node, graph, ranges)
        for o in node.outputs:
            graph.tensors[o].dtype = "int8"
    graph.quantized = True
    return verify(graph, "quantize")
