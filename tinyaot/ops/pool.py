"""Average and max pooling: bit-exact numpy int8 reference kernels (TFLite int8 semantics).

Max pooling and padded average pooling keep the input's scale and zero point (no requantization). An average pool
without padding requantizes to its own calibrated output parameters (`avgpool_requant_s8`, TFLite's integer MEAN):
averaging over a window narrows the range, and ResNet-8's global 8x8 pool spans 0..4.2 where its input spans
0..30.5, so at the input's scale its output would use ~35 int8 levels, which alone moved 6 of 100 CIFAR top-1
answers away from the float model's. Padding is (top, left) plus the explicit output
size. Padded positions are excluded: max ignores them and the average divides by the number of real inputs in the
window, rounding sum/count to nearest with ties away from zero (TFLite's integer average pool; round-half-to-even or
counting the padding each change some CMSIS-NN expected outputs). ONNX's count_include_pad=1 with padding is
the one exception (`avgpool_count_pad_s8`): there padded cells hold real zero and count in the divisor. ceil_mode=1
only changes the output size: windows reaching past the input are cut like padding.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from tinyaot.core.quant import input_magnitude
from tinyaot.ops.intbounds import epilogue
from tinyaot.core.fixedpoint import quantize_multiplier, requantize_to_int8
from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import (activation_grad, activation_nodes, col2im_patches, fused_activation, fused_clamp,
                                im2col_patches, lift_window_1d, nhwc_oracle, out_params, spatial_out)
from tinyaot.ops.registry import (GENERIC_VARIANT, KernelCall, OpSpec, OracleLayer, register, RowWindow, Traits,
                                  Variant, variant_of)


def pool_windows(x: np.ndarray, fill: int, kernel_hw, stride_hw, pad_top_left, output_hw):
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
    win, valid = pool_windows(np.asarray(input), 0, kernel_hw, stride_hw, pad_top_left, output_hw)
    total = win.sum(axis=(3, 4))  # [N, OH, OW, C]; padded entries are 0
    count = valid.sum(axis=(2, 3)).astype(np.int64)[None, :, :, None]  # [1, OH, OW, 1]
    if np.any(count == 0):
        raise ValueError("avgpool_s8: a pooling window lies entirely in the padding")
    half = count // 2
    # round half away from zero: magnitude rounded up at .5, sign restored (floor == trunc on non-negatives)
    avg = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    return np.clip(avg, int(act_min), int(act_max)).astype(np.int8)


def avgpool_requant_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), output_hw, input_offset: int,
                       output_offset: int, mult: int, shift: int, act_min: int = -128,
                       act_max: int = 127) -> np.ndarray:
    """int8 NHWC average pool without padding onto new output parameters: the window sum of (x + input_offset),
    requantized by (mult, shift) = s_in / (s_out * kh * kw), plus output_offset -> int8 [N, OH, OW, C]."""
    win, valid = pool_windows(np.asarray(input), 0, kernel_hw, stride_hw, (0, 0), output_hw)
    if not valid.all():
        raise ValueError("avgpool_requant_s8: a pooling window leaves the input (this kernel has no padding)")
    acc = (win + int(input_offset)).sum(axis=(3, 4))
    return requantize_to_int8(acc, mult, shift, output_offset, act_min, act_max)


def avgpool_count_pad_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pads, output_hw, input_offset: int,
                         act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC average pool counting padded cells in the divisor (ONNX count_include_pad=1), keeping the input's
    parameters. pads = (top, left, bottom, right). A padded cell holds real 0, i.e. x + input_offset == 0, so the
    sum of (x + input_offset) over the real cells is divided by the window's cells inside the padded input (a
    ceil_mode window reaching past the end padding counts only up to it, as onnxruntime does), rounded half away
    from zero, and the zero point added back."""
    x = np.asarray(input)
    pt, pl, pb, pr = pads
    win, _ = pool_windows(x, -int(input_offset), kernel_hw, stride_hw, (pt, pl), output_hw)  # fill = zero point
    total = (win + int(input_offset)).sum(axis=(3, 4))
    counts = []
    for a, (size, pad_lo, pad_hi) in enumerate(((x.shape[1], pt, pb), (x.shape[2], pl, pr))):
        start = np.arange(output_hw[a]) * stride_hw[a] - pad_lo
        counts.append(np.minimum(start + kernel_hw[a], size + pad_hi) - start)
    count = (counts[0][:, None] * counts[1][None, :]).astype(np.int64)[None, :, :, None]
    half = count // 2
    avg = np.where(total > 0, (total + half) // count, -((-total + half) // count)) - int(input_offset)
    return np.clip(avg, int(act_min), int(act_max)).astype(np.int8)


def maxpool_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC max pool -> int8 [N, OH, OW, C]."""
    # fill below any int8 so padding never wins the max
    win, valid = pool_windows(np.asarray(input), -129, kernel_hw, stride_hw, pad_top_left, output_hw)
    if not np.all(valid.any(axis=(2, 3))):
        raise ValueError("maxpool_s8: a pooling window lies entirely in the padding")
    m = win.max(axis=(3, 4))
    return np.clip(m, int(act_min), int(act_max)).astype(np.int8)


# Helium (MVE) variants (offered only with target.has_mve): max pooling (tinyaot_max_pool_s8_mve.c, sixteen int8
# lanes) and the requantizing average pool (tinyaot_avgpool_s8_mve.c, int16 sums); the same arguments and integers
# as the generic kernels. Cost model: instructions under QEMU on mps3-an547 per output pixel, per window tap of
# sixteen channels and per output value, fitted to the shared models' pools: average (kws_dscnn 25x5x64 4,747,
# ic_resnet8 8x8x64 2,493, vww 3x3x256 2,400) and max (mnist8's 2x2 pools over 28x28x8 22,196 and 14x14x16 2,642).
MVE_POOL = "mve_pool"
MVE_MAX_COST = (100.0, 4.0, 0.0)  # per pixel, per tap of 16 channels, per output value
MVE_AVG_COST = (0.0, 9.0, 4.0)
MVE_POOL_FILES = {"tinyaot_avgpool_requant_s8_mve": "tinyaot_avgpool_s8_mve.c"}


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
        if tuple(a.get("dilations", (1, 1))) != (1, 1):
            raise TinyaotError(f"{node.op} node {node.name!r}: dilated pooling is not supported")
        pads = list(a.get("pads", (0, 0, 0, 0)))
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), pads

    def layer_class(self, node):
        return "pooling"

    def lift_1d(self, node, graph):
        if self.traits.sliding_window:  # a global pool reads per channel: nothing to change
            lift_window_1d(node, graph, weighted=False)

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        ceil = bool(int(node.attrs.get("ceil_mode", 0)))
        shape = (n, *spatial_out((h, w), k, s, p, ceil_mode=ceil), c)
        given = tuple(graph.tensors[node.outputs[0]].shape)
        if ceil and shape != given:
            # onnx's shape inference keeps a last ceil_mode window that starts in the end padding; onnxruntime
            # (and PyTorch) drop it. The model would not run as its ONNX shapes say, so stop with the reason.
            raise TinyaotError(f"{node.op} node {node.name!r}: with ceil_mode=1 its last window starts in the end "
                               f"padding; ONNX shape inference gives output {list(given[1:3])} but onnxruntime "
                               f"computes {list(shape[1:3])}. Reduce the end pads")
        return [shape]

    def position_mean(self, node, graph):
        if node.op == "MaxPool" or node.attrs.get("activation") or graph.layout != "NHWC":
            return False
        _, h, w, _ = graph.tensors[node.inputs[0]].shape
        k, _, pads = self._geometry(node, graph)
        return tuple(k) == (h, w) and not any(pads)  # one window over the whole input

    def _counts_pad(self, node, graph) -> bool:
        """count_include_pad=1 changes the divisor only where there is padding."""
        return node.op == "AveragePool" and bool(int(node.attrs.get("count_include_pad", 0))) and any(
            self._geometry(node, graph)[2])

    def _requantizes(self, node, graph, ranges) -> bool:
        """Average pools without padding get their own output parameters (see the module docstring); a padded
        window would divide by a count that varies per output, which a single multiplier cannot encode."""
        k, s, p = self._geometry(node, graph)
        x, o = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
        # a ceil_mode window reaching past the input is not full either
        full = all((o[1 + a] - 1) * s[a] + k[a] <= x[1 + a] for a in range(2))
        return node.op != "MaxPool" and not any(p) and full and node.outputs[0] in ranges

    def quantize(self, node, graph, ranges):
        q = graph.tensors[node.inputs[0]].quant
        node.attrs.pop("requantize", None)
        if self._requantizes(node, graph, ranges):
            qo, lo, hi = out_params(node, graph, ranges)
            k, _, _ = self._geometry(node, graph)
            mult, shift = quantize_multiplier(np.float64(q.s) / (np.float64(qo.s) * k[0] * k[1]))
            node.attrs.update(requantize=True, input_offset=-q.zp, output_offset=qo.zp, output_mult=mult,
                              output_shift=shift, act_min=lo, act_max=hi)
            return
        graph.tensors[node.outputs[0]].quant = q
        node.attrs["act_min"], node.attrs["act_max"] = fused_clamp(node, q)

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        if a.get("requantize"):
            return [avgpool_requant_s8(inputs[0], kernel_hw=k, stride_hw=s, output_hw=out[1:3],
                                       input_offset=a["input_offset"], output_offset=a["output_offset"],
                                       mult=a["output_mult"], shift=a["output_shift"], act_min=a["act_min"],
                                       act_max=a["act_max"])]
        if self._counts_pad(node, graph):
            return [avgpool_count_pad_s8(inputs[0], kernel_hw=k, stride_hw=s, pads=p, output_hw=out[1:3],
                                         input_offset=-graph.tensors[node.inputs[0]].quant.zp,
                                         act_min=a["act_min"], act_max=a["act_max"])]
        fn = maxpool_s8 if node.op == "MaxPool" else avgpool_s8
        return [fn(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]), output_hw=out[1:3],
                   act_min=node.attrs["act_min"], act_max=node.attrs["act_max"])]

    def batches_reference(self, node, graph):
        return True  # every pooling function takes [N, H, W, C]

    def scratch_bytes(self, node, graph):
        return int(node.attrs.get("scratch_bytes", 0))

    def int_bounds(self, node, graph):
        """Average pooling: the window sum io * kh * kw + sum(x) is at most (128 + |io|) * kh * kw (plain average
        pooling sums x alone: 128 * kh * kw); max pooling only compares."""
        a = node.attrs
        if node.op == "MaxPool":
            return []
        k, _, _ = self._geometry(node, graph)
        taps = int(k[0]) * int(k[1])
        if a.get("requantize") or self._counts_pad(node, graph):
            # the offset is added once per tap (avgpool_requant: per window, io * kh * kw; count_pad likewise)
            io = int(a.get("input_offset", -graph.tensors[node.inputs[0]].quant.zp))
            s = input_magnitude(io) * taps
        else:
            s = 128 * taps  # plain average pooling sums the int8 values themselves
        items = [(f"window sum of {taps} taps", s)]
        if a.get("requantize"):
            epilogue(items, [s], a["output_mult"], a["output_shift"], a["output_offset"])
        return items

    def variants(self, node, graph, target):
        listed = [Variant(GENERIC_VARIANT)]
        x = graph.tensors[node.inputs[0]]
        if not target.has_mve or x.dtype != "int8":
            return tuple(listed)
        k, _, _ = self._geometry(node, graph)
        o = graph.tensors[node.outputs[0]].shape
        pixels = int(np.prod(o[:3]))
        counts = (pixels, pixels * k[0] * k[1] * -(-o[3] // 16), pixels * o[3])
        if node.op == "MaxPool":
            listed.append(Variant(MVE_POOL, float(np.dot(counts, MVE_MAX_COST))))
        elif node.attrs.get("requantize") and -128 <= node.attrs["input_offset"] <= 128:
            listed.append(Variant(MVE_POOL, float(np.dot(counts, MVE_AVG_COST))))
        return tuple(listed)

    def row_window(self, node, graph):
        if node.op == "GlobalAveragePool" or graph.tensors[node.inputs[0]].dtype != "int8":
            return None
        k, s, p = self._geometry(node, graph)
        return RowWindow(k[0], s[0], p[0], 1)

    def macs(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return int(np.prod(graph.tensors[node.outputs[0]].shape) * k[0] * k[1])

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        params = {"stride": [s[0], s[1]], "padding": [p[0], p[1]], "activation": [a["act_min"], a["act_max"]],
                  "input_dims": list(x), "filter_dims": [1, k[0], k[1], 1], "output_dims": list(o), "variant": "plain"}
        kernel = self.kernel
        mve = variant_of(node) == MVE_POOL  # the same call with the Helium kernel
        if a.get("requantize"):
            kernel = "tinyaot_avgpool_requant_s8_mve" if mve else "tinyaot_avgpool_requant_s8"
            params.update(variant="requant", input_offset=a["input_offset"], output_offset=a["output_offset"],
                          output_mult=a["output_mult"], output_shift=a["output_shift"])
        elif self._counts_pad(node, graph):
            kernel = "tinyaot_avgpool_count_pad_s8"
            params.update(variant="count_pad", pad_end=[p[2], p[3]],
                          input_offset=-graph.tensors[node.inputs[0]].quant.zp)
        elif mve:
            kernel = "tinyaot_max_pool_s8_mve"
        files = [MVE_POOL_FILES.get(kernel, kernel + ".c")] + (["tinyaot_mve_support.h"] if mve else [])
        return KernelCall(kernel, files=files, template="layers/pool.c.j2", params=params)

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p),
                         ceil_mode=int(node.attrs.get("ceil_mode", 0)))
            pre, inits = [], []
            if node.op != "MaxPool":
                attrs["count_include_pad"] = 0
            if self._counts_pad(node, graph):
                # count_include_pad=1 as its definition: zero padding, then an average of what the window covers.
                # onnxruntime's fused int8 pool (QLinearAveragePool) divides a ceil_mode window that reaches past
                # the end padding by the full kernel size, unlike its own float AveragePool and ONNX's reference;
                # an explicit Pad keeps the oracle on the definition (tests/ops/test_pool.py checks both agree).
                inits = [numpy_helper.from_array(np.array([0, 0, p[0], p[1], 0, 0, p[2], p[3]], np.int64),
                                                 node.name + "_pads")]
                pre = [helper.make_node("Pad", [ins[0], inits[0].name], ["pool_padded"])]
                ins, attrs["pads"] = ["pool_padded"], [0, 0, 0, 0]
            pool = helper.make_node("MaxPool" if node.op == "MaxPool" else "AveragePool", ins, ["pool_out"], **attrs)
            n2, i2, out = activation_nodes(node, "pool_out")
            return pre + [pool] + n2, inits + i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


    def evaluate_float(self, node, graph, inputs):
        if int(node.attrs.get("ceil_mode", 0)):
            return super().evaluate_float(node, graph, inputs)
        return [fused_activation(node, self._float_pool(node, graph, inputs[0]))]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        if int(node.attrs.get("ceil_mode", 0)):
            return super().backward_float(node, graph, inputs, outputs, grad_out)
        g = activation_grad(node, outputs[0], grad_out[0])
        return [self._float_pool_grad(node, graph, inputs[0], g)], {}

    def _float_pool_grad(self, node, graph, x, g):
        """The input gradient of _float_pool (AveragePool): each window's share spread evenly over the inputs it
        averaged."""
        kernel, stride, pad, dil, out_hw = self._float_windows(node, graph)
        if int(node.attrs.get("count_include_pad", 0)):
            share = g / float(np.prod(node.attrs["kernel_shape"]))
        else:
            share = g / im2col_patches(np.ones_like(x[:1]), kernel, stride, pad, dil, out_hw).sum(axis=(3, 4))
        gp = np.broadcast_to(share[:, :, :, None, None, :], (*g.shape[:3], *kernel, g.shape[3]))
        return col2im_patches(gp, x.shape[1:3], kernel, stride, pad, dil)

    def _float_windows(self, node, graph) -> tuple:
        """im2col_patches' geometry arguments for the float pools."""
        a = node.attrs
        pads = list(a.get("pads", (0, 0, 0, 0)))
        return (tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), (pads[0], pads[1]), (1, 1),
                graph.tensors[node.outputs[0]].shape[1:3])

    def _float_pool(self, node, graph, x):
        """The average over each window (AveragePool): of the real inputs it covers, or of the whole kernel with
        count_include_pad."""
        geometry = self._float_windows(node, graph)
        total = im2col_patches(x, *geometry).sum(axis=(3, 4))
        if int(node.attrs.get("count_include_pad", 0)):
            return total / float(np.prod(node.attrs["kernel_shape"]))
        return total / im2col_patches(np.ones_like(x[:1]), *geometry).sum(axis=(3, 4))


@register("MaxPool", traits=Traits(layout="spatial", layer_1d=True, sliding_window=True, fuses_activation=True,
                                   per_channel=True, kernels=("tinyaot_max_pool_s8", "tinyaot_max_pool_s8_mve")))
class MaxPool(_Pool):
    kernel = "tinyaot_max_pool_s8"

    def _float_pool(self, node, graph, x):
        # shift every input above the zero padding, so padding never wins
        shift = 1.0 - float(x.min())
        return im2col_patches(x + shift, *self._float_windows(node, graph)).max(axis=(3, 4)) - shift

    def _float_pool_grad(self, node, graph, x, g):
        # all of a window's gradient to its (first) largest input
        geometry = self._float_windows(node, graph)
        p = im2col_patches(x + (1.0 - float(x.min())), *geometry)
        n, oh, ow, kh, kw, c = p.shape
        first = p.reshape(n, oh, ow, kh * kw, c).argmax(axis=3)
        gp = np.where(np.arange(kh * kw)[:, None] == first[:, :, :, None, :], g[:, :, :, None, :], 0.0)
        return col2im_patches(gp.reshape(p.shape), x.shape[1:3], *geometry[:4])


@register("AveragePool", traits=Traits(layout="spatial", layer_1d=True, sliding_window=True, fuses_activation=True,
                                       per_channel=True, scratch=True,
                                       kernels=("tinyaot_avgpool_s8", "tinyaot_avgpool_requant_s8",
                                                "tinyaot_avgpool_count_pad_s8", "tinyaot_avgpool_requant_s8_mve")))
class AveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"


@register("GlobalAveragePool", traits=Traits(layout="spatial", layer_1d=True, fuses_activation=True, per_channel=True,
                                             scratch=True,
                                             kernels=("tinyaot_avgpool_s8", "tinyaot_avgpool_requant_s8",
                                                      "tinyaot_avgpool_count_pad_s8",
                                                      "tinyaot_avgpool_requant_s8_mve")))
class GlobalAveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"

    def _float_pool(self, node, graph, x):
        return x.mean(axis=(1, 2), keepdims=True)

    def _float_pool_grad(self, node, graph, x, g):
        return np.broadcast_to(g / float(x.shape[1] * x.shape[2]), x.shape).copy()
