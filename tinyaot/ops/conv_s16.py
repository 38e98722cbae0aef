"""Conv at 16 bits (16x8: int16 activations, int8 per-channel weights, int64 bias): standard, grouped and
depthwise. int64 accumulator (CMSIS-NN's s16 kernels accumulate in int64 too), TFLite's int64 requantization to
int16. Numerics in core/quant16.py; shared plumbing in s16_common.py."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.fixedpoint import exact_matmul
from tinyaot.core.quant import QuantParams
from tinyaot.core.quant16 import Q16MAX, Q16MIN, requantize_to_int16
from tinyaot.ops.common import activation_nodes, dequantized_const, nhwc_oracle, spatial_out
from tinyaot.ops.conv import conv_inplace_offset, conv_weight_row_inputs, im2col_patches
from tinyaot.ops.registry import IN0, OUT0, KernelCall, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, WeightedS16, ptr


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
    acc = exact_matmul(p, wt).transpose(1, 0, 2).reshape(n, oh, ow, cout) + np.asarray(bias, np.int64)
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


@register("ConvS16", traits=Traits(fuses_activation=True, weighted_layer=True, int16_form_of=("Conv",),
                                   kernels=("tinyaot_convolve_s16", "tinyaot_depthwise_conv_s16")))
class ConvS16(WeightedS16):
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
