"""ConvTranspose (transpose convolution, decoders and learned upsampling): bit-exact numpy int8 reference (TFLite
TRANSPOSE_CONV arithmetic, as in CMSIS-NN's transpose_conv vectors) and the op.

Semantics shared by ONNX and TFLite: input pixel (iy, ix) times tap (ky, kx) lands on output
(iy * stride_h + ky - pad_top, ix * stride_w + kx - pad_left); contributions outside the output are dropped. The
end pads (and ONNX's output_padding) only decide the output size, which the reference takes explicitly, as CMSIS
does; CMSIS's vectors give the end pads as `pad_with_offset_hw` (TFLite's pad plus its odd-padding offset), used
here only to check that the output size follows. Rows past the reach of every tap (output_padding) hold the bias.

Quantization is conv's: int8 activations, weights symmetric per output channel, int32 bias at s_in * s_w[c],
per-channel fixed-point requantization with TFLite's two roundings. Only group 1 and dilation 1 are supported.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.quant import layer_weights
from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import (activation_nodes, dequantized_const, lift_window_1d, nhwc_oracle, out_params,
                                record_raised, set_const)
from tinyaot.core.fixedpoint import quantize_multiplier_array, requantize_to_int8
from tinyaot.ops.intbounds import layer_bounds
from tinyaot.ops.registry import ConstArray, KernelCall, OpSpec, OracleLayer, register, Traits


def transpose_conv2d_s8(input: np.ndarray, weights_ohwi: np.ndarray, bias: np.ndarray | None, output_mult,
                        output_shift, *, input_offset: int, output_offset: int, stride_hw=(1, 1),
                        pad_top_left=(0, 0), output_hw, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC transpose conv. weights [out_ch, kh, kw, in_ch]; bias int32 [out_ch] or None; output_mult/shift
    per output channel (or one value). Returns int8 [N, OH, OW, out_ch]."""
    x = np.asarray(input)
    w = np.asarray(weights_ohwi).astype(np.int64)
    n, h, wd, cin = x.shape
    cout, kh, kw, cin_w = w.shape
    if cin != cin_w:
        raise ValueError(f"transpose_conv2d_s8: input has {cin} channels, filter expects {cin_w}")
    sh, sw = stride_hw
    pt, pl = pad_top_left
    oh, ow = output_hw
    # Scatter, as TFLite's reference does, into an exact int64 buffer large enough for every tap and the output.
    full_h = max((h - 1) * sh + kh, pt + oh)
    full_w = max((wd - 1) * sw + kw, pl + ow)
    acc = np.zeros((n, full_h, full_w, cout), np.int64)
    xo = x.astype(np.int64) + int(input_offset)
    for ky in range(kh):
        for kx in range(kw):
            acc[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (wd - 1) * sw + 1:sw, :] += xo @ w[:, ky, kx, :].T
    acc = acc[:, pt:pt + oh, pl:pl + ow, :]
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)
    mult = np.asarray(output_mult, np.int64).reshape(-1)
    shift = np.asarray(output_shift, np.int64).reshape(-1)
    return requantize_to_int8(acc, mult, shift, output_offset, act_min, act_max)


def transpose_conv_out_size(in_size: int, k: int, stride: int, pad_begin: int, pad_end: int,
                            output_padding: int = 0) -> int:
    return stride * (in_size - 1) + output_padding + k - pad_begin - pad_end


def resolve_pads(node, in_logical, out_logical) -> None:
    """Explicit [top, left, bottom, right] pads for a ConvTranspose before the layout changes (the `to_nhwc` pass
    calls this), following ONNX: with auto_pad SAME_* or an output_shape attribute the total padding is
    stride * (in - 1) + output_padding + kernel - out per axis; SAME_UPPER puts the odd one at the end, SAME_LOWER
    and a plain output_shape at the beginning (onnxruntime does the same, checked in the tests). Refuses what the
    int8 kernel cannot do, naming the node."""
    a = node.attrs
    where = f"ConvTranspose node {node.name!r}"
    if len(in_logical) != 4:
        raise TinyaotError(f"{where}: only 2-D transpose convolution (4-D NCHW input) is supported")
    if int(a.get("group", 1)) != 1:
        raise TinyaotError(f"{where}: group={a['group']} is not supported (only group 1)")
    if any(int(d) != 1 for d in a.get("dilations", (1, 1))):
        raise TinyaotError(f"{where}: dilations {list(a['dilations'])} are not supported (only 1)")
    k = a["kernel_shape"]
    s = list(a.get("strides", (1, 1)))
    op = list(a.get("output_padding", (0, 0)))
    auto = a.pop("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER") or "output_shape" in a:
        begin, end = [], []
        for i in range(2):
            total = s[i] * (in_logical[2 + i] - 1) + op[i] + k[i] - out_logical[2 + i]
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        a["pads"] = begin + end
    elif auto == "VALID":
        a["pads"] = [0, 0, 0, 0]
    a.pop("output_shape", None)
    pads = list(a.get("pads", [0, 0, 0, 0]))
    for i in range(2):
        if pads[2 + i] < 0:
            # An output_shape past the full transpose convolution: rows beyond its reach hold the bias alone,
            # which is what output_padding means (and what onnxruntime accepts).
            op[i] -= pads[2 + i]
            pads[2 + i] = 0
    if pads[0] < 0 or pads[1] < 0:
        raise TinyaotError(f"{where}: negative begin padding {pads} (an output shifted past the full transpose "
                           "convolution) is not supported")
    a["pads"], a["strides"], a["output_padding"] = pads, s, op


@register("ConvTranspose", traits=Traits(layout="spatial", layer_1d=True, fuses_activation=True, scratch=True,
                                   kernels=("tinyaot_transpose_conv_s8",)))
class ConvTranspose(OpSpec):
    """ONNX ConvTranspose (X, W, B) in NHWC after `to_nhwc`, which turns W [C_in, C_out, kh, kw] into OHWI
    [C_out, kh, kw, C_in] and resolves the pads (`resolve_pads`)."""

    def _geometry(self, node):
        a = node.attrs
        return tuple(a["kernel_shape"]), tuple(a["strides"]), list(a["pads"]), tuple(a["output_padding"])

    def lift_1d(self, node, graph):
        lift_window_1d(node, graph, weighted=True)

    def layout(self, node, ctx):
        """NHWC, pads resolved here (before shapes turn physical), weights [I, O, kh, kw] -> OHWI."""
        w = ctx.graph.tensors[node.inputs[1]]
        if not w.is_const or w.data.ndim != 4:
            raise TinyaotError(f"ConvTranspose node {node.name!r}: only 2-D transpose convolution with constant "
                               "weights is supported")
        node.attrs.setdefault("kernel_shape", list(w.shape[2:]))
        resolve_pads(node, ctx.logical[node.inputs[0]], ctx.graph.tensors[node.outputs[0]].shape)
        node.inputs[1] = ctx.const_transposed(node.inputs[1], "_ohwi", (1, 2, 3, 0))
        ctx.spatial(node)
        return True

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, h, w, _ = graph.tensors[node.inputs[0]].shape
        k, s, p, op = self._geometry(node)
        out_c = graph.tensors[node.inputs[1]].shape[0]
        return [(n, transpose_conv_out_size(h, k[0], s[0], p[0], p[2], op[0]),
                 transpose_conv_out_size(w, k[1], s[1], p[1], p[3], op[1]), out_c)]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        qo, lo, hi = out_params(node, graph, ranges)
        b = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        qw, wq, qb, bias_q, _, raised = layer_weights(graph.tensors[node.inputs[1]], b, 0, x.quant.s,
                                                      f"ConvTranspose node {node.name!r}", input_offset=-x.quant.zp)
        record_raised(graph, node, raised)
        node.inputs[1:] = [set_const(graph, node.name + "_weights", qw, "int8", wq),
                           set_const(graph, node.name + "_bias", qb, "int32", bias_q)]
        mult, shift = quantize_multiplier_array(np.float64(x.quant.s) * wq.scale / np.float64(qo.s))
        node.attrs.update(output_mult=mult, output_shift=shift, input_offset=-x.quant.zp, output_offset=qo.zp,
                          act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        a = node.attrs
        k, s, p, _ = self._geometry(node)
        out = graph.tensors[node.outputs[0]].shape
        return [transpose_conv2d_s8(inputs[0], inputs[1], inputs[2], a["output_mult"], a["output_shift"],
                                    input_offset=a["input_offset"], output_offset=a["output_offset"], stride_hw=s,
                                    pad_top_left=(p[0], p[1]), output_hw=out[1:3], act_min=a["act_min"],
                                    act_max=a["act_max"])]

    def int_bounds(self, node, graph):
        """ConvTranspose gathers each tap at most once per output pixel, so the row sum of a convolution bounds it."""
        w = np.asarray(graph.tensors[node.inputs[1]].data)
        return layer_bounds(node, graph, w.reshape(w.shape[0], -1))

    def macs(self, node, graph):
        """Multiply-accumulates really done: per axis, the (output, input, tap) triples that meet."""
        x = graph.tensors[node.inputs[0]].shape
        out = graph.tensors[node.outputs[0]].shape
        k, s, p, _ = self._geometry(node)
        pairs = []
        for a in range(2):
            dest = np.arange(x[1 + a])[:, None] * s[a] + np.arange(k[a])[None, :] - p[a]
            pairs.append(int(((dest >= 0) & (dest < out[1 + a])).sum()))
        return int(x[0] * pairs[0] * pairs[1] * x[3] * out[3])

    def weights_bytes(self, node, graph):
        return graph.tensors[node.inputs[1]].nbytes

    def params_bytes(self, node, graph):
        return graph.tensors[node.inputs[2]].nbytes + 8 * graph.tensors[node.outputs[0]].shape[3]

    def render(self, node, graph, cname):
        a = node.attrs
        k, s, p, _ = self._geometry(node)
        x = graph.tensors[node.inputs[0]].shape
        w = graph.tensors[node.inputs[1]].shape
        o = graph.tensors[node.outputs[0]].shape
        kernel = "tinyaot_transpose_conv_s8"
        consts = [ConstArray("int8_t", f"{cname}_weights", graph.tensors[node.inputs[1]].data),
                  ConstArray("int32_t", f"{cname}_bias", graph.tensors[node.inputs[2]].data),
                  ConstArray("int32_t", f"{cname}_mult", a["output_mult"]),
                  ConstArray("int32_t", f"{cname}_shift", a["output_shift"])]
        params = {"ptype": "tinyaot_conv_params", "context": False, "input_offset": a["input_offset"],
                  "output_offset": a["output_offset"], "stride": s[:2], "padding": p[:2], "dilation": [1, 1],
                  "activation": [a["act_min"], a["act_max"]], "ch_mult": None, "mult": f"{cname}_mult",
                  "shift": f"{cname}_shift", "input_dims": list(x), "filter_dims": list(w),
                  "bias_dims": [1, 1, 1, o[3]], "output_dims": list(o), "filter": f"{cname}_weights",
                  "bias": f"{cname}_bias"}
        return KernelCall(kernel, files=[kernel + ".c"], consts=consts, template="layers/conv.c.j2", params=params)

    def oracle(self, node, graph):
        w = graph.tensors[node.inputs[1]]
        b = graph.tensors[node.inputs[2]]
        # back to ONNX's [C_in, C_out, kh, kw]; the per-output-channel scales then sit on axis 1
        w_onnx = np.ascontiguousarray(w.data.transpose(3, 0, 1, 2))
        wq = type(w.quant)(w.quant.scale, w.quant.zero_point, 1)

        def core(ins):
            n1, i1, wf = dequantized_const(node.name + "_w", w_onnx, wq)
            n2, i2, bf = dequantized_const(node.name + "_b", b.data, b.quant)
            k, s, p, op = self._geometry(node)
            conv = helper.make_node("ConvTranspose", [ins[0], wf, bf], ["convt_out"], kernel_shape=list(k),
                                    strides=list(s), pads=list(p), output_padding=list(op))
            n3, i3, out = activation_nodes(node, "convt_out")
            return n1 + n2 + [conv] + n3, i1 + i2 + i3, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)
