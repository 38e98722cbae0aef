"""The 16x8 layers (TFLite's int16-activation, int8-weight scheme; numerics in core/quant16.py): bit-exact numpy
references, quantization, C kernel calls and onnxruntime equivalents of the ops `--activation-bits 16` supports.

A node computed at 16 bits gets one of these op types from `compress/precision.py` before quantization (its ONNX
type plus "S16"; the report keeps both), so the int8 op files stay as they are:
- ConvS16 (standard, grouped and depthwise), FullyConnectedS16: int16 input, int8 per-channel weights, int64 bias,
  int64 accumulator (CMSIS-NN's s16 kernels accumulate in int64 too), TFLite's int64 requantization to int16.
- AveragePoolS16 (and GlobalAveragePool): the window sum in int32 (|sum| <= 32768 * kh * kw, bounded below
  2**31), requantized onto its own output parameters when every window is full (as the int8 pool does), otherwise
  divided by the count of real inputs, rounded half away from zero, keeping the input's parameters.
- SoftmaxS16: int16 logits in, int8 probabilities out (scale 1/256, zero point -128): TFLite's integer softmax
  (fixed-point exp over Q5.26 differences) fed the int16 differences; a difference below diff_min contributes
  exp = 0 exactly as for int8, and diff_min keeps d * 2**left_shift inside int32.
- MaxPoolS16: the input's parameters kept, comparisons only.
- AddS16: TFLite's int16 ADD, left shift 15 (|x| << 15 <= 2**30), zero points 0.
- Requantize: int8 <-> int16 between layers of different widths, x' = requant(x - zp) + zp' with TFLite's 32-bit
  MultiplyByQuantizedMultiplier.
Zero points of int16 tensors are 0, so the kernels take no input or output offsets.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import (multiply_by_quantized_multiplier, quantize_multiplier, softmax_params)
from tinyaot.core.quant import QMAX, QMIN, QuantParams, activation_qparams
from tinyaot.core.quant16 import (ACC64_LIMIT, Q16MAX, Q16MIN, activation_clamp16, activation_qparams16,
                                  layer_weights16, reduced_multiplier_array, requantize_to_int16)
from tinyaot.ops.common import activation_nodes, dequantized_const, nhwc_oracle, set_const, spatial_out
from tinyaot.ops.conv import conv_inplace_offset, conv_weight_row_inputs, im2col_patches
from tinyaot.ops.fully_connected import fc_weight_row_inputs
from tinyaot.ops.pool import _windows
from tinyaot.ops.registry import IN0, IN1, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.softmax import MAX_ROW_SIZE, softmax_s8

INT32_MAX = (1 << 31) - 1
ADD16_LEFT_SHIFT = 15  # |x| <= 32768, so x << 15 <= 2**30 (TFLite's int16 ADD uses 15 as well)
TEMPLATE = "layers/s16.c.j2"


def ptr(ctype: str, buf):
    """A typed arena pointer argument of an s16 kernel call (layers/s16.c.j2 writes the cast)."""
    return (ctype, buf)


def _qp16(graph, name, ranges) -> QuantParams:
    if name not in ranges:
        raise TinyaotError(f"calibration produced no range for tensor {name!r}")
    return activation_qparams16(*ranges[name])


# ---- numpy references ------------------------------------------------------------------------------------------
def conv2d_s16(x, w_ohwi, bias, reduced, total_shift, *, stride_hw=(1, 1), pad_top_left=(0, 0),
               dilation_hw=(1, 1), output_hw, act_min=Q16MIN, act_max=Q16MAX, groups=1) -> np.ndarray:
    """int16 NHWC conv, int8 weights OHWI (in_ch / groups per group), int64 bias -> int16."""
    n, h, wd, cin = x.shape
    cout, kh, kw, cg = w_ohwi.shape
    if cin != cg * groups or cout % groups:
        raise ValueError(f"conv2d_s16: {cin} input channels, filter {w_ohwi.shape}, {groups} groups")
    p = im2col_patches(np.asarray(x, np.int64), (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)
    oh, ow = p.shape[1], p.shape[2]
    p = p.reshape(n * oh * ow, kh, kw, groups, cg).transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow, -1)
    wt = np.asarray(w_ohwi, np.int64).reshape(groups, cout // groups, -1).transpose(0, 2, 1)
    acc = np.matmul(p, wt).transpose(1, 0, 2).reshape(n, oh, ow, cout) + np.asarray(bias, np.int64)
    return requantize_to_int16(acc, reduced, total_shift, act_min, act_max)


def depthwise_conv2d_s16(x, w_1hwc, bias, reduced, total_shift, *, ch_mult=1, stride_hw=(1, 1),
                         pad_top_left=(0, 0), dilation_hw=(1, 1), output_hw, act_min=Q16MIN,
                         act_max=Q16MAX) -> np.ndarray:
    """int16 NHWC depthwise conv, weights [1, kh, kw, in_ch * ch_mult] -> int16."""
    n, h, wd, cin = x.shape
    _, kh, kw, cout = w_1hwc.shape
    if cout != cin * ch_mult:
        raise ValueError(f"depthwise_conv2d_s16: {cout} outputs != {cin} inputs x {ch_mult}")
    p = im2col_patches(np.asarray(x, np.int64), (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)
    oh, ow = p.shape[1], p.shape[2]
    wt = np.asarray(w_1hwc, np.int64).reshape(kh, kw, cin, ch_mult)
    acc = np.einsum("nhwyxc,yxcm->nhwcm", p, wt).reshape(n, oh, ow, cout) + np.asarray(bias, np.int64)
    return requantize_to_int16(acc, reduced, total_shift, act_min, act_max)


def fully_connected_s16(x, w, bias, reduced, total_shift, *, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 [batches, depth] x int8 [out, depth] + int64 bias -> int16 [batches, out]."""
    acc = np.asarray(x, np.int64) @ np.asarray(w, np.int64).T + np.asarray(bias, np.int64)
    return requantize_to_int16(acc, reduced, total_shift, act_min, act_max)


def avgpool_s16(x, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw, requant=False, mult=0,
                shift=0, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 NHWC average pool. requant: full windows only, sum requantized by (mult, shift) = s_in / (s_out * k);
    otherwise sum / count of real inputs rounded half away from zero (input parameters kept)."""
    win, valid = _windows(np.asarray(x), 0, kernel_hw, stride_hw, pad_top_left, output_hw)
    total = win.sum(axis=(3, 4))
    if requant:
        if not valid.all():
            raise ValueError("avgpool_s16: a requantizing pool has no padding")
        out = multiply_by_quantized_multiplier(total, mult, shift)
    else:
        count = valid.sum(axis=(2, 3)).astype(np.int64)[None, :, :, None]
        if np.any(count == 0):
            raise ValueError("avgpool_s16: a window lies entirely in the padding")
        half = count // 2
        out = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    return np.clip(out, int(act_min), int(act_max)).astype(np.int16)


def add_params16(s1: float, s2: float, s_out: float) -> dict:
    """TFLite's ADD parameters with int16's left shift of 15 (both input multipliers <= 1/2)."""
    twice_max = 2.0 * max(float(s1), float(s2))
    m1, sh1 = quantize_multiplier(float(s1) / twice_max)
    m2, sh2 = quantize_multiplier(float(s2) / twice_max)
    mo, sho = quantize_multiplier(twice_max / ((1 << ADD16_LEFT_SHIFT) * float(s_out)))
    return {"input1_mult": m1, "input1_shift": sh1, "input2_mult": m2, "input2_shift": sh2,
            "left_shift": ADD16_LEFT_SHIFT, "output_mult": mo, "output_shift": sho}


def elementwise_add_s16(a, b, *, input1_mult, input1_shift, input2_mult, input2_shift, left_shift, output_mult,
                        output_shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    x1 = np.asarray(a, np.int64) << int(left_shift)
    x2 = np.asarray(b, np.int64) << int(left_shift)
    s = (multiply_by_quantized_multiplier(x1, input1_mult, input1_shift)
         + multiply_by_quantized_multiplier(x2, input2_mult, input2_shift))
    out = multiply_by_quantized_multiplier(s, output_mult, output_shift)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int16)


def requantize_values(x, *, input_offset, mult, shift, output_offset, out_bits) -> np.ndarray:
    """int8 <-> int16: requant(x + input_offset) + output_offset, saturated to the output type."""
    lo, hi, dt = (QMIN, QMAX, np.int8) if out_bits == 8 else (Q16MIN, Q16MAX, np.int16)
    v = multiply_by_quantized_multiplier(np.asarray(x, np.int64) + int(input_offset), mult, shift)
    return np.clip(v + int(output_offset), lo, hi).astype(dt)


# ---- shared op plumbing -----------------------------------------------------------------------------------------
def _out16(node, graph, ranges):
    out = graph.tensors[node.outputs[0]]
    out.quant = _qp16(graph, out.name, ranges)
    lo, hi = activation_clamp16(out.quant, node.attrs.get("activation"))
    node.attrs.update(act_min=lo, act_max=hi)
    return out.quant


def _require16(graph, node, k=0):
    t = graph.tensors[node.inputs[k]]
    if t.quant is None or t.quant.bits != 16:
        raise TinyaotError(f"{node.op} node {node.name!r}: input {t.name!r} is not int16 (a tinyaot bug: "
                           "compress/precision.py converts every input to the layer's width)")
    return t


def _acc_bounds(node, graph) -> list:
    """|bias_c| + sum|w_c| * 32768 per output channel, against the int64 requantization's 2**47."""
    w = np.abs(np.asarray(graph.tensors[node.inputs[1]].data, np.int64))
    b = np.abs(np.asarray(graph.tensors[node.inputs[2]].data, np.int64))
    if node.attrs.get("depthwise"):
        per = w.reshape(-1, w.shape[-1]).sum(axis=0)
    else:
        per = w.reshape(w.shape[0], -1).sum(axis=1)
    worst = int((b + per * 32768).max()) if per.size else 0
    return [("int64 accumulator (|bias| + sum|w| * 32768)", worst, ACC64_LIMIT - 1)]


class _WeightedS16(OpSpec):
    traits = Traits(fuses_activation=True, weighted_layer=True)

    def _quantize_weights(self, node, graph, ranges, axis, where):
        x = _require16(graph, node)
        qo = _out16(node, graph, ranges)
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
        return _acc_bounds(node, graph)

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


@register("ConvS16", traits=Traits(fuses_activation=True, weighted_layer=True,
                                   kernels=("tinyaot_convolve_s16", "tinyaot_depthwise_conv_s16")))
class ConvS16(_WeightedS16):
    """Conv at 16 bits (NHWC; OHWI weights, 1HWC for depthwise), attributes as the int8 Conv's."""

    internal = True

    def _geometry(self, node):
        a = node.attrs
        return (tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0))),
                tuple(a.get("dilations", (1, 1))))

    def compression_kind(self, node):
        return "depthwise" if node.attrs.get("depthwise") else "conv"

    def weight_row_inputs(self, node, graph, x):
        return conv_weight_row_inputs(node, graph, x)

    def infer_shapes(self, node, graph):
        n, h, w, _ = graph.tensors[node.inputs[0]].shape
        k, s, p, d = self._geometry(node)
        wshape = graph.tensors[node.inputs[1]].shape
        return [(n, *spatial_out((h, w), k, s, p, d), wshape[3] if node.attrs["depthwise"] else wshape[0])]

    def quantize(self, node, graph, ranges):
        self._quantize_weights(node, graph, ranges, 3 if node.attrs["depthwise"] else 0, f"Conv node {node.name!r}")

    def reference(self, node, graph, inputs):
        x, w, b = inputs[:3]
        k, s, p, d = self._geometry(node)
        a = node.attrs
        kw = dict(stride_hw=s, pad_top_left=(p[0], p[1]), dilation_hw=d,
                  output_hw=graph.tensors[node.outputs[0]].shape[1:3], act_min=a["act_min"], act_max=a["act_max"])
        if a["depthwise"]:
            return [depthwise_conv2d_s16(x, w, b, a["reduced_mult"], a["total_shift"],
                                         ch_mult=w.shape[3] // x.shape[3], **kw)]
        return [conv2d_s16(x, w, b, a["reduced_mult"], a["total_shift"], groups=x.shape[3] // w.shape[3], **kw)]

    def macs(self, node, graph):
        w = graph.tensors[node.inputs[1]].shape
        out = graph.tensors[node.outputs[0]].shape
        return int(np.prod(out) * w[1] * w[2] * (1 if node.attrs["depthwise"] else w[3]))

    def inplace_offset(self, node, graph):
        """Both s16 kernels compute output pixels in raster order, one at a time, and read a pixel's whole window
        before writing any of its outputs, which conv_inplace_offset's bound (two pixels at a time) covers. Input
        and output are both int16, so its offset, counted in elements there, doubles in bytes."""
        _, s, p, _ = self._geometry(node)
        return 2 * conv_inplace_offset(graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape,
                                       s, p)

    def render(self, node, graph, cname):
        k, s, p, d = self._geometry(node)
        x = graph.tensors[node.inputs[0]].shape
        w = graph.tensors[node.inputs[1]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        dw = a["depthwise"]
        # geometry, one int32 array: see the kernel files for the order
        geom = [x[0], x[1], x[2], x[3], o[1], o[2], o[3], k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1],
                a["act_min"], a["act_max"], (o[3] // x[3]) if dw else w[3]]
        kernel = "tinyaot_depthwise_conv_s16" if dw else "tinyaot_convolve_s16"
        args = [ptr("const int16_t *", IN0), f"{cname}_weights", f"{cname}_bias", f"{cname}_mult",
                f"{cname}_shift", f"{cname}_geom", ptr("int16_t *", OUT0)]
        return KernelCall(kernel, files=[kernel + ".c", "tinyaot_s16_support.h"],
                          consts=self._consts(node, graph, cname, geom), template=TEMPLATE, params={"args": args})

    def oracle(self, node, graph):
        a = node.attrs
        w = graph.tensors[node.inputs[1]]
        w_oihw = w.data.transpose(3, 0, 1, 2) if a["depthwise"] else w.data.transpose(0, 3, 1, 2)
        wq = QuantParams(w.quant.scale, w.quant.zero_point, 0)

        def core(ins):
            n1, i1, wf = dequantized_const(node.name + "_w", np.ascontiguousarray(w_oihw), wq)
            bias = self._bias_init(node, graph, node.name + "_bf")
            k, s, p, d = self._geometry(node)
            group = graph.tensors[node.inputs[0]].shape[3] // (1 if a["depthwise"] else w.shape[3])
            conv = helper.make_node("Conv", [ins[0], wf, bias.name], ["conv_out"], kernel_shape=list(k),
                                    strides=list(s), pads=list(p), dilations=list(d), group=group)
            n3, i3, out = activation_nodes(node, "conv_out")
            return n1 + [conv] + n3, i1 + [bias] + i3, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


@register("FullyConnectedS16", traits=Traits(fuses_activation=True, weighted_layer=True,
                                             kernels=("tinyaot_fully_connected_s16",)))
class FullyConnectedS16(_WeightedS16):
    """FullyConnected at 16 bits: Y[M, N] = X[M, K] @ W[N, K].T + B[N]."""

    internal = True

    def compression_kind(self, node):
        return "fully_connected"

    def weight_row_inputs(self, node, graph, x):
        return fc_weight_row_inputs(node, graph, x)

    def infer_shapes(self, node, graph):
        return [(graph.tensors[node.inputs[0]].shape[0], graph.tensors[node.inputs[1]].shape[0])]

    def quantize(self, node, graph, ranges):
        self._quantize_weights(node, graph, ranges, 0, f"MatMul/Gemm node {node.name!r}")

    def reference(self, node, graph, inputs):
        a = node.attrs
        return [fully_connected_s16(inputs[0], inputs[1], inputs[2], a["reduced_mult"], a["total_shift"],
                                    act_min=a["act_min"], act_max=a["act_max"])]

    def macs(self, node, graph):
        return int(graph.tensors[node.inputs[0]].shape[0] * graph.tensors[node.inputs[1]].size)

    def render(self, node, graph, cname):
        a = node.attrs
        m, k = graph.tensors[node.inputs[0]].shape
        n = graph.tensors[node.inputs[1]].shape[0]
        geom = [m, k, n, a["act_min"], a["act_max"]]
        args = [ptr("const int16_t *", IN0), f"{cname}_weights", f"{cname}_bias", f"{cname}_mult",
                f"{cname}_shift", f"{cname}_geom", ptr("int16_t *", OUT0)]
        return KernelCall("tinyaot_fully_connected_s16",
                          files=["tinyaot_fully_connected_s16.c", "tinyaot_s16_support.h"],
                          consts=self._consts(node, graph, cname, geom), template=TEMPLATE, params={"args": args})

    def oracle(self, node, graph):
        w = graph.tensors[node.inputs[1]]
        wq = QuantParams(w.quant.scale, w.quant.zero_point, 1)  # W.T is [K, N]: channels on axis 1
        n1, i1, wf = dequantized_const(node.name + "_w", np.ascontiguousarray(w.data.T), wq)
        bias = self._bias_init(node, graph, node.name + "_bf")
        mm = helper.make_node("MatMul", [node.inputs[0], wf], ["mm_out"])
        add = helper.make_node("Add", ["mm_out", bias.name], ["fc_out"])
        n3, i3, out = activation_nodes(node, "fc_out")
        return OracleLayer(n1 + [mm, add] + n3, i1 + [bias] + i3, out)


@register("AveragePoolS16", traits=Traits(fuses_activation=True, per_channel=True,
                                          kernels=("tinyaot_avgpool_s16",)))
class AveragePoolS16(OpSpec):
    """AveragePool / GlobalAveragePool at 16 bits (node.attrs["global"] for the latter)."""

    internal = True

    def _geometry(self, node, graph):
        if node.attrs.get("global"):
            _, h, w, _ = graph.tensors[node.inputs[0]].shape
            return (h, w), (1, 1), [0, 0, 0, 0]
        a = node.attrs
        if tuple(a.get("dilations", (1, 1))) != (1, 1) or int(a.get("ceil_mode", 0)) or (
                int(a.get("count_include_pad", 0)) and any(a.get("pads", (0, 0, 0, 0)))):
            raise TinyaotError(f"AveragePool node {node.name!r}: dilation, ceil_mode or count_include_pad with "
                               "padding are not supported with --activation-bits 16")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0)))

    def infer_shapes(self, node, graph):
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        return [(n, *spatial_out((h, w), k, s, p), c)]

    def quantize(self, node, graph, ranges):
        x = _require16(graph, node)
        k, s, p = self._geometry(node, graph)
        o = graph.tensors[node.outputs[0]].shape
        full = not any(p) and all((o[1 + a] - 1) * s[a] + k[a] <= x.shape[1 + a] for a in range(2))
        if full and node.outputs[0] in ranges:
            qo = _out16(node, graph, ranges)
            mult, shift = quantize_multiplier(np.float64(x.quant.s) / (np.float64(qo.s) * k[0] * k[1]))
            node.attrs.update(requant=1, mult=mult, shift=shift)
        else:
            graph.tensors[node.outputs[0]].quant = x.quant
            lo, hi = activation_clamp16(x.quant, node.attrs.get("activation"))
            node.attrs.update(requant=0, mult=0, shift=0, act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        a = node.attrs
        return [avgpool_s16(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]),
                            output_hw=graph.tensors[node.outputs[0]].shape[1:3], requant=bool(a["requant"]),
                            mult=a["mult"], shift=a["shift"], act_min=a["act_min"], act_max=a["act_max"])]

    def int_bounds(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return [(f"window sum of {k[0] * k[1]} int16 values", 32768 * k[0] * k[1])]

    def macs(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return int(np.prod(graph.tensors[node.outputs[0]].shape) * k[0] * k[1])

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        geom = [x[0], x[1], x[2], x[3], o[1], o[2], k[0], k[1], s[0], s[1], p[0], p[1], a["requant"], a["mult"],
                a["shift"], a["act_min"], a["act_max"]]
        return KernelCall("tinyaot_avgpool_s16", files=["tinyaot_avgpool_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_geom", np.asarray(geom, np.int64))],
                          template=TEMPLATE, params={"args": [ptr("const int16_t *", IN0), f"{cname}_geom",
                                                              ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            pool = helper.make_node("AveragePool", ins, ["pool_out"], kernel_shape=list(k), strides=list(s),
                                    pads=list(p), count_include_pad=0)
            n2, i2, out = activation_nodes(node, "pool_out")
            return [pool] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


def maxpool_s16(x, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw, act_min=Q16MIN,
                act_max=Q16MAX) -> np.ndarray:
    """int16 NHWC max pool (input parameters kept; padded taps never win)."""
    win, valid = _windows(np.asarray(x), Q16MIN - 1, kernel_hw, stride_hw, pad_top_left, output_hw)
    if not np.all(valid.any(axis=(2, 3))):
        raise ValueError("maxpool_s16: a window lies entirely in the padding")
    return np.clip(win.max(axis=(3, 4)), int(act_min), int(act_max)).astype(np.int16)


@register("MaxPoolS16", traits=Traits(fuses_activation=True, per_channel=True, kernels=("tinyaot_max_pool_s16",)))
class MaxPoolS16(OpSpec):
    """MaxPool at 16 bits: the input's parameters kept, a fused activation as a clamp."""

    internal = True

    def _geometry(self, node, graph):
        a = node.attrs
        if tuple(a.get("dilations", (1, 1))) != (1, 1) or int(a.get("ceil_mode", 0)):
            raise TinyaotError(f"MaxPool node {node.name!r}: dilation or ceil_mode are not supported with "
                               "--activation-bits 16")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0)))

    def infer_shapes(self, node, graph):
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        return [(n, *spatial_out((h, w), k, s, p), c)]

    def quantize(self, node, graph, ranges):
        x = _require16(graph, node)
        graph.tensors[node.outputs[0]].quant = x.quant
        lo, hi = activation_clamp16(x.quant, node.attrs.get("activation"))
        node.attrs.update(act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        return [maxpool_s16(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]),
                            output_hw=graph.tensors[node.outputs[0]].shape[1:3], act_min=node.attrs["act_min"],
                            act_max=node.attrs["act_max"])]

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        geom = [x[0], x[1], x[2], x[3], o[1], o[2], k[0], k[1], s[0], s[1], p[0], p[1], a["act_min"], a["act_max"]]
        return KernelCall("tinyaot_max_pool_s16", files=["tinyaot_max_pool_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_geom", np.asarray(geom, np.int64))],
                          template=TEMPLATE, params={"args": [ptr("const int16_t *", IN0), f"{cname}_geom",
                                                              ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            pool = helper.make_node("MaxPool", ins, ["pool_out"], kernel_shape=list(k), strides=list(s), pads=list(p))
            n2, i2, out = activation_nodes(node, "pool_out")
            return [pool] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


@register("SoftmaxS16", traits=Traits(kernels=("tinyaot_softmax_s16_s8",)))
class SoftmaxS16(OpSpec):
    """Softmax of int16 logits over the innermost axis, int8 probabilities out (scale 1/256, zero point -128)."""

    internal = True
    oracle_tolerance = 1  # as the int8 softmax: the fixed-point exp is within one output step of float

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = _require16(graph, node)
        axis = int(node.attrs.get("axis", -1)) % len(x.shape)
        if axis != len(x.shape) - 1 and int(np.prod(x.shape[axis + 1:])) != 1:
            raise TinyaotError(f"Softmax node {node.name!r}: only the innermost axis is supported with "
                               "--activation-bits 16")
        if x.shape[axis] > MAX_ROW_SIZE:
            raise TinyaotError(f"Softmax node {node.name!r}: axis of {x.shape[axis]} > {MAX_ROW_SIZE} elements")
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(1.0 / 256, -128)
        mult, shift, diff_min = softmax_params(x.quant.s, 1.0)
        node.attrs.update(input_mult=mult, input_left_shift=shift, diff_min=diff_min)

    def _rows(self, node, graph):
        x = graph.tensors[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", -1)) % len(x)
        return int(np.prod(x[:axis])), int(x[axis])

    def reference(self, node, graph, inputs):
        rows, n = self._rows(node, graph)
        a = node.attrs
        y = softmax_s8(np.asarray(inputs[0]).reshape(rows, n), input_mult=a["input_mult"],
                       input_left_shift=a["input_left_shift"], diff_min=a["diff_min"])
        return [y.reshape(inputs[0].shape)]

    def int_bounds(self, node, graph):
        return [(f"sum of {self._rows(node, graph)[1]} exponentials in Q12.19", self._rows(node, graph)[1] << 19)]

    def render(self, node, graph, cname):
        rows, n = self._rows(node, graph)
        a = node.attrs
        args = [ptr("const int16_t *", IN0), str(rows), str(n), str(a["input_mult"]), str(a["input_left_shift"]),
                str(a["diff_min"]), ptr("int8_t *", OUT0)]
        return KernelCall("tinyaot_softmax_s16_s8", files=["tinyaot_softmax_s16_s8.c", "tinyaot_s16_support.h"],
                          template=TEMPLATE, params={"args": args})

    def oracle(self, node, graph):
        axis = int(node.attrs.get("axis", -1)) % len(graph.tensors[node.inputs[0]].shape)
        return OracleLayer([helper.make_node("Softmax", [node.inputs[0]], ["sm_out"], axis=axis)], [], "sm_out")


@register("AddS16", traits=Traits(fuses_activation=True, kernels=("tinyaot_elementwise_add_s16",)))
class AddS16(OpSpec):
    """Add of two int16 activations of one shape (no broadcasting, no constant operand at 16 bits)."""

    internal = True
    alias_output_to_input = True  # element i of both inputs is read before output i is written
    _KEYS = ("input1_mult", "input1_shift", "input2_mult", "input2_shift", "left_shift", "output_mult",
             "output_shift", "act_min", "act_max")

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        a, b = (graph.tensors[i] for i in node.inputs[:2])
        if len(node.inputs) != 2 or a.is_const or b.is_const or tuple(a.shape) != tuple(b.shape):
            raise TinyaotError(f"Add node {node.name!r}: with --activation-bits 16 only two activations of one "
                               "shape are supported (no constant operand, no broadcasting)")
        _require16(graph, node, 0)
        _require16(graph, node, 1)
        qo = _out16(node, graph, ranges)
        node.attrs.update(add_params16(a.quant.s, b.quant.s, qo.s))

    def reference(self, node, graph, inputs):
        return [elementwise_add_s16(inputs[0], inputs[1], **{k: node.attrs[k] for k in self._KEYS})]

    def int_bounds(self, node, graph):
        a = node.attrs
        v = 32768 << int(a["left_shift"])
        items = [(f"input shifted left by {a['left_shift']}", v)]
        # each rescaled term is at most v / 2 (input multipliers <= 1/2), so their sum is at most v
        s1 = int(np.abs(multiply_by_quantized_multiplier(v, a["input1_mult"], a["input1_shift"])))
        s2 = int(np.abs(multiply_by_quantized_multiplier(v, a["input2_mult"], a["input2_shift"])))
        items.append(("sum of the rescaled inputs", s1 + s2))
        return items

    def render(self, node, graph, cname):
        a = node.attrs
        p = [a[k] for k in self._KEYS]
        return KernelCall("tinyaot_elementwise_add_s16",
                          files=["tinyaot_elementwise_add_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_params", np.asarray(p, np.int64))],
                          template=TEMPLATE,
                          params={"args": [ptr("const int16_t *", IN0), ptr("const int16_t *", IN1),
                                           f"{cname}_params", str(graph.tensors[node.outputs[0]].size),
                                           ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        add = helper.make_node("Add", list(node.inputs[:2]), ["add_out"])
        n2, i2, out = activation_nodes(node, "add_out")
        return OracleLayer([add] + n2, i2, out)


@register("Requantize", traits=Traits(kernels=("tinyaot_requantize_s8_s16", "tinyaot_requantize_s16_s8")))
class Requantize(OpSpec):
    """int8 -> int16 or int16 -> int8 between layers of different widths (compress/precision.py inserts it):
    node.attrs["out_bits"] is the output's width; the output tensor's range is the input's calibrated range."""

    internal = True

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        out = graph.tensors[node.outputs[0]]
        bits = int(node.attrs["out_bits"])
        if out.name not in ranges:
            raise TinyaotError(f"calibration produced no range for tensor {out.name!r}")
        if bits == 16:
            out.quant = activation_qparams16(*ranges[out.name])
        else:
            out.quant = activation_qparams(*ranges[out.name])
        mult, shift = quantize_multiplier(np.float64(x.quant.s) / np.float64(out.quant.s))
        node.attrs.update(input_offset=-x.quant.zp, output_offset=out.quant.zp, mult=mult, shift=shift)

    def reference(self, node, graph, inputs):
        a = node.attrs
        return [requantize_values(inputs[0], input_offset=a["input_offset"], mult=a["mult"], shift=a["shift"],
                                  output_offset=a["output_offset"], out_bits=int(a["out_bits"]))]

    def int_bounds(self, node, graph):
        a = node.attrs
        v = (255 if int(a["out_bits"]) == 16 else 32768)
        r = int(np.abs(multiply_by_quantized_multiplier(v, a["mult"], a["shift"])))
        return [("rescaled input plus the output offset", r + abs(int(a["output_offset"])))]

    def render(self, node, graph, cname):
        a = node.attrs
        n = graph.tensors[node.outputs[0]].size
        q = [str(a["input_offset"]), str(a["mult"]), str(a["shift"]), str(a["output_offset"])]
        if int(a["out_bits"]) == 16:
            kernel, args = "tinyaot_requantize_s8_s16", [IN0, str(n), *q, ptr("int16_t *", OUT0)]
        else:
            kernel, args = "tinyaot_requantize_s16_s8", [ptr("const int16_t *", IN0), str(n), *q, OUT0]
        return KernelCall(kernel, files=["tinyaot_requantize_s16.c", "tinyaot_s16_support.h"], template=TEMPLATE,
                          params={"args": args})

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Identity", [node.inputs[0]], ["rq_out"])], [], "rq_out")


S16_OPS = {"Conv": "ConvS16", "FullyConnected": "FullyConnectedS16", "AveragePool": "AveragePoolS16",
           "GlobalAveragePool": "AveragePoolS16", "Softmax": "SoftmaxS16", "Add": "AddS16", "MaxPool": "MaxPoolS16",
           # ops/s16_elementwise.py
           "Mul": "MulS16", "Concat": "ConcatS16", "HardSigmoid": "HardSigmoidS16", "HardSwish": "HardSwishS16",
           "Sigmoid": "SigmoidS16", "Tanh": "TanhS16"}  # ops/s16_lut.py
