"""Average and max pooling: bit-exact numpy int8 reference kernels (TFLite int8 semantics).

Input and output share scale and zero point (no requantization). Padding is (top, left) plus the explicit output
size. Padded positions are excluded: max ignores them and the average divides by the number of real inputs in the
window, rounding sum/count to nearest with ties away from zero (TFLite's integer average pool; round-half-to-even or
counting the padding each change some CMSIS-NN expected outputs).
"""
from __future__ import annotations

import numpy as np
from onnx import helper
from tinyaot.codegen.cfmt import c_dims
from tinyaot.compress.quantize import activation_clamp
from tinyaot.errors import TinyaotError
from tinyaot.ops.common import activation_nodes, nhwc_oracle, spatial_out
from tinyaot.ops.registry import KernelCall, OracleLayer, OpSpec, register


def _windows(x: np.ndarray, fill: int, kernel_hw, stride_hw, pad_top_left, output_hw):
    """Gather pooling windows [N, OH, OW, KH, KW, C] (int64, padded with `fill`) and the valid mask [OH, OW, KH, KW]."""
    n, h, w, c = x.shape
    kh, kw = kernel_hw
    sh, sw = stride_hw
    pt, pl = pad_top_left
    oh, ow = output_hw
    iy = np.arange(oh)[:, None] * sh + np.arange(kh)[None, :] - pt  # [OH, KH]
    ix = np.arange(ow)[:, None] * sw + np.arange(kw)[None, :] - pl  # [OW, KW]
    vy = (iy >= 0) & (iy < h)
    vx = (ix >= 0) & (ix < w)
    valid = vy[:, None, :, None] & vx[None, :, None, :]
    lo_y, lo_x = max(0, -int(iy.min())), max(0, -int(ix.min()))
    hi_y, hi_x = max(0, int(iy.max()) - (h - 1)), max(0, int(ix.max()) - (w - 1))
    padded = np.pad(x.astype(np.int64), ((0, 0), (lo_y, hi_y), (lo_x, hi_x), (0, 0)), constant_values=fill)
    win = padded[:, (iy + lo_y)[:, None, :, None], (ix + lo_x)[None, :, None, :], :]
    return win, valid


def avgpool_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC average pool -> int8 [N, OH, OW, C]."""
    win, valid = _windows(np.asarray(input), 0, kernel_hw, stride_hw, pad_top_left, output_hw)
    total = win.sum(axis=(3, 4))  # [N, OH, OW, C]; padded entries are 0
    count = valid.sum(axis=(2, 3)).astype(np.int64)[None, :, :, None]  # [1, OH, OW, 1]
    if np.any(count == 0):
        raise ValueError("avgpool_s8: a pooling window lies entirely in the padding")
    half = count // 2
    # round half away from zero: magnitude rounded up at .5, sign restored (floor == trunc on non-negatives)
    avg = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    return np.clip(avg, int(act_min), int(act_max)).astype(np.int8)


def maxpool_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC max pool -> int8 [N, OH, OW, C]."""
    # fill below any int8 so padding never wins the max
    win, valid = _windows(np.asarray(input), -129, kernel_hw, stride_hw, pad_top_left, output_hw)
    if not np.all(valid.any(axis=(2, 3))):
        raise ValueError("maxpool_s8: a pooling window lies entirely in the padding")
    m = win.max(axis=(3, 4))
    return np.clip(m, int(act_min), int(act_max)).astype(np.int8)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
class _Pool(OpSpec):
    """Shared by MaxPool, AveragePool and GlobalAveragePool: NHWC int8 pooling that keeps the input's
    quantization parameters (as TFLite's int8 pooling does), so no requantization is needed."""

    kernel = ""

    def _geometry(self, node, graph):
        if node.op == "GlobalAveragePool":
            _, h, w, _ = graph.tensors[node.inputs[0]].shape
            return (h, w), (1, 1), [0, 0, 0, 0]
        a = node.attrs
        if int(a.get("ceil_mode", 0)):
            raise TinyaotError(f"{node.op} node {node.name!r}: ceil_mode=1 is not supported yet")
        if tuple(a.get("dilations", (1, 1))) != (1, 1):
            raise TinyaotError(f"{node.op} node {node.name!r}: dilated pooling is not supported")
        pads = list(a.get("pads", (0, 0, 0, 0)))
        if node.op == "AveragePool" and int(a.get("count_include_pad", 0)) and any(pads):
            raise TinyaotError(f"AveragePool node {node.name!r}: count_include_pad=1 with padding is not supported")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), pads

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        return [(n, *spatial_out((h, w), k, s, p), c)]

    def quantize(self, node, graph, ranges):
        q = graph.tensors[node.inputs[0]].quant
        graph.tensors[node.outputs[0]].quant = q
        node.attrs["act_min"], node.attrs["act_max"] = activation_clamp(q, node.attrs.get("activation"))

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        fn = maxpool_s8 if node.op == "MaxPool" else avgpool_s8
        return [fn(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]), output_hw=out[1:3],
                   act_min=node.attrs["act_min"], act_max=node.attrs["act_max"])]

    def scratch_bytes(self, node, graph):
        return int(node.attrs.get("scratch_bytes", 0))

    def macs(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return int(np.prod(graph.tensors[node.outputs[0]].shape) * k[0] * k[1])

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        code = f"""static const tinyaot_pool_params pool_params = {{
    .stride = {{{s[0]}, {s[1]}}}, .padding = {{{p[0]}, {p[1]}}}, .activation = {{{a['act_min']}, {a['act_max']}}}}};
static const tinyaot_dims input_dims = {c_dims(*x)}, filter_dims = {c_dims(1, k[0], k[1], 1)},
                          output_dims = {c_dims(*o)};
const tinyaot_context ctx = {{{{scratch}}, {{scratch_size}}}};
status |= {self.kernel}(&ctx, &pool_params, &input_dims, {{in0}}, &filter_dims, &output_dims, {{out0}});"""
        return KernelCall(self.kernel, code, [self.kernel + ".c"], [])

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p))
            if node.op != "MaxPool":
                attrs["count_include_pad"] = 0
            pool = helper.make_node("MaxPool" if node.op == "MaxPool" else "AveragePool", ins, ["pool_out"], **attrs)
            n2, i2, out = activation_nodes(node, "pool_out")
            return [pool] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


@register("MaxPool")
class MaxPool(_Pool):
    kernel = "tinyaot_max_pool_s8"


@register("AveragePool")
class AveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"


@register("GlobalAveragePool")
class GlobalAveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"
