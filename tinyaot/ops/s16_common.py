"""The 16x8 layers (TFLite's int16-activation, int8-weight scheme; numerics in core/quant16.py): what their op files
share. Each 16-bit op has its own file (conv_s16.py, fully_connected_s16.py, avgpool_s16.py, maxpool_s16.py,
softmax_s16.py, add_s16.py, mul_s16.py, concat_s16.py, hard_gate_s16.py, s16_lut.py, and requantize.py for the
conversions between widths) and says there which ops it computes at 16 bits (`Traits.int16_form_of`).

A node computed at 16 bits gets its 16-bit op type from `compress/precision.py` before quantization (its ONNX
type plus "S16"; the report keeps both), so the int8 op files stay as they are. Zero points of int16 tensors are 0,
so the kernels take no input or output offsets.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import ScaleError
from tinyaot.core.quant import QuantParams
from tinyaot.core.quant16 import (ACC64_LIMIT, activation_clamp16, activation_qparams16, exact_multiplier,
                                  layer_weights16, reduced_multiplier_array)
from tinyaot.ops.common import activation_nodes, nhwc_oracle, set_const, spatial_out
from tinyaot.ops.registry import IN0, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits

TEMPLATE = "layers/s16.c.j2"
INT64_MAX = (1 << 63) - 1


def ptr(ctype: str, buf):
    """A typed arena pointer argument of an s16 kernel call (layers/s16.c.j2 writes the cast)."""
    return (ctype, buf)


def qparams16(graph, name, ranges) -> QuantParams:
    if name not in ranges:
        raise TinyaotError(f"calibration produced no range for tensor {name!r}")
    return activation_qparams16(*ranges[name])


# ---- shared op plumbing ---------------------------------------------------------------------------------
def out16(node, graph, ranges):
    out = graph.tensors[node.outputs[0]]
    out.quant = qparams16(graph, out.name, ranges)
    lo, hi = activation_clamp16(out.quant, node.attrs.get("activation"))
    node.attrs.update(act_min=lo, act_max=hi)
    return out.quant


def require16(graph, node, k=0):
    t = graph.tensors[node.inputs[k]]
    if t.quant is None or t.quant.bits != 16:
        raise TinyaotError(f"{node.op} node {node.name!r}: input {t.name!r} is not int16 (a tinyaot bug: "
                           "compress/precision.py converts every input to the layer's width)")
    return t


def acc_bounds(node, graph) -> list:
    """|bias_c| + sum|w_c| * 32768 per output channel, against the int64 requantization's 2**47."""
    w = np.abs(np.asarray(graph.tensors[node.inputs[1]].data, np.int64))
    b = np.abs(np.asarray(graph.tensors[node.inputs[2]].data, np.int64))
    if node.attrs.get("depthwise"):
        per = w.reshape(-1, w.shape[-1]).sum(axis=0)
    else:
        per = w.reshape(w.shape[0], -1).sum(axis=1)
    worst = int((b + per * 32768).max()) if per.size else 0
    return [("int64 accumulator (|bias| + sum|w| * 32768)", worst, ACC64_LIMIT - 1)]


class WeightedS16(OpSpec):
    traits = Traits(fuses_activation=True, weighted_layer=True)

    def _quantize_weights(self, node, graph, ranges, axis, where):
        x = require16(graph, node)
        qo = out16(node, graph, ranges)
        w = graph.tensors[node.inputs[1]]
        if w.quant is not None:
            raise TinyaotError(f"{where}: a pre-quantized model's weights with --activation-bits 16 are not "
                               "supported (16x8 quantizes the float model)")
        b = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        qw, wq, qb, bq = layer_weights16(w.data, None if b is None else b.data, axis, x.quant.s, where)
        node.inputs[1:] = [set_const(graph, node.name + "_weights", qw, "int8", wq),
                           set_const(graph, node.name + "_bias", qb, "int64", bq)]
        reduced, total = reduced_multiplier_array(np.float64(x.quant.s) * wq.scale / np.float64(qo.s))
        node.attrs.update(reduced_mult=reduced, total_shift=total)

    def weights_bytes(self, node, graph):
        return graph.tensors[node.inputs[1]].nbytes

    def params_bytes(self, node, graph):
        return graph.tensors[node.inputs[2]].nbytes + 8 * graph.tensors[node.inputs[2]].size

    def int_bounds(self, node, graph):
        return acc_bounds(node, graph)

    def _consts(self, node, graph, cname, geom):
        a = node.attrs
        return [ConstArray("int8_t", f"{cname}_weights", graph.tensors[node.inputs[1]].data),
                ConstArray("int64_t", f"{cname}_bias", graph.tensors[node.inputs[2]].data),
                ConstArray("int32_t", f"{cname}_mult", a["reduced_mult"]),
                ConstArray("int32_t", f"{cname}_shift", a["total_shift"]),
                ConstArray("int32_t", f"{cname}_geom", np.asarray(geom, np.int64))]

    def _bias_init(self, node, graph, name):
        b = graph.tensors[node.inputs[2]]
        real = (np.asarray(b.data, np.float64) * np.asarray(b.quant.scale, np.float64)).astype(np.float32)
        return numpy_helper.from_array(real, name)


class PoolS16(OpSpec):
    """A 16-bit pooling layer (NHWC, the input's channels): its `_geometry(node, graph)` gives (kernel, strides,
    pads); `c_kernel` is its C function (templates/kernels/<c_kernel>.c), called with one int32 geometry array,
    and `onnx_pool` (with `oracle_attrs`) the ONNX op its float oracle runs."""

    c_kernel = ""
    onnx_pool = ""
    oracle_attrs: dict = {}

    def infer_shapes(self, node, graph):
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        return [(n, *spatial_out((h, w), k, s, p), c)]

    def _requant_geometry(self, node) -> list:
        """The geometry array's fields between the pads and the clamp (AveragePoolS16: its rescale)."""
        return []

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        geom = [x[0], x[1], x[2], x[3], o[1], o[2], k[0], k[1], s[0], s[1], p[0], p[1],
                *self._requant_geometry(node), node.attrs["act_min"], node.attrs["act_max"]]
        return KernelCall(self.c_kernel, files=[f"{self.c_kernel}.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_geom", np.asarray(geom, np.int64))],
                          template=TEMPLATE, params={"args": [ptr("const int16_t *", IN0), f"{cname}_geom",
                                                              ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            pool = helper.make_node(self.onnx_pool, ins, ["pool_out"], kernel_shape=list(k), strides=list(s),
                                    pads=list(p), **self.oracle_attrs)
            n2, i2, out = activation_nodes(node, "pool_out")
            return [pool] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


def rescaled_bound(v: int, mult, shift) -> int:
    """|v * mult| plus the rounding term of requantize_exact: the int64 intermediate for inputs up to |v|."""
    return int(v) * int(mult) + (1 << (int(shift) - 1))


def exact16(real: float, where: str) -> tuple[int, int]:
    """core/quant16.exact_multiplier, its error a one-line TinyaotError naming the layer."""
    try:
        return exact_multiplier(real)
    except ScaleError as exc:
        raise TinyaotError(f"{where}: {exc}") from None


__all__ = ["TEMPLATE", "INT64_MAX", "rescaled_bound", "exact16", "ptr", "qparams16", "out16", "require16", "acc_bounds",
           "WeightedS16", "PoolS16"]
