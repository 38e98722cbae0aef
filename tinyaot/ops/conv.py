"""Conv and depthwise conv: bit-exact numpy int8 reference kernels (TFLite/CMSIS-NN semantics).

Parameter conventions are CMSIS-NN's: `input_offset = -input_zero_point`, `output_offset = output_zero_point`, the
filter is symmetric (zero point 0). Padding is given as (top, left) together with the explicit output size, which
covers SAME, VALID and asymmetric pads alike; padded positions hold the input zero point, i.e. they contribute
nothing to `sum((x + input_offset) * w)`.

Accumulation is exact in int64 here; the C kernels accumulate in int32, so every layer's accumulator bound
|bias| + sum|w| * (128 + |input_offset|) is checked against int32 at compile time (tinyaot/compress/bounds.py),
and a channel whose bias alone would not fit gets a larger weight scale when quantized (compress/quantize.py).
"""
from __future__ import annotations

import numpy as np

from tinyaot.core.errors import TinyaotError

from tinyaot.core.fixedpoint import exact_matmul, requantize_to_int8
from onnx import helper
from tinyaot.core.quant import layer_weights, weight_qmax
from tinyaot.ops.common import (FLOAT_CHUNK, activation_grad, activation_nodes, col2im_patches, dequantized_const,
                                float_bias, float_const, fused_activation, im2col_patches, lift_window_1d, nhwc_oracle,
                                out_params, record_raised, set_const, spatial_out, fold_requant_table, tap_scatter,
                                window_taps)
from tinyaot.ops.fully_connected import interleave_quads
from tinyaot.ops.intbounds import layer_bounds, weight_rows
from tinyaot.ops.compressed import (CONV_PIXELS_AT_ONCE, DW_PIXELS_AT_ONCE, MVE_BLOCK, block2x1_arrays,
                                    block2x1_scratch_bytes, block_cost, block_scratch_bytes, compressed_filter, is_2x1,
                                    is_compressed, mve_2x1_const_rows, mve_2x1_segmented, mve_block2x1_positions,
                                    mve_block_cost,
                                    mve_block_ok)
from tinyaot.ops.compressed import conv_scratch_bytes as compressed_conv_scratch_bytes
from tinyaot.ops.depthwise3x3 import DW3X3_VARIANTS, dw3x3_variants, render_node as dw3x3_render
from tinyaot.ops.depthwise3x3 import scratch_bytes as dw3x3_scratch_bytes
from tinyaot.ops.mve_depthwise import MVE_DW, mve_dw_variants, render_node as mve_dw_render
from tinyaot.ops.mve_depthwise import scratch_bytes as mve_dw_scratch_bytes
from tinyaot.ops import mve as mve_conv  # Helium standard conv variants (mve-mac)
from tinyaot.ops import decoded  # int4 / clustered weights decoded for the dense variants
from tinyaot.core.fixedpoint import quantize_multiplier_array
from tinyaot.ops.registry import (ConstArray, FloatUnsupported, KernelCall, OpSpec, OracleLayer, register, RowWindow,
                                  Traits, Variant, variant_of)


def conv2d_scratch_bytes(kernel_hw, in_ch_per_group: int) -> int:
    """Bytes of scratch the C conv kernel can use (= tinyaot_convolve_s8_get_buffer_size): two int16 im2col columns
    of kh*kw*in_ch_per_group values, each rounded up to an even count so the second column stays 4-byte aligned.
    The kernel runs without it too (slower), so planning it is a speed/RAM trade, never a correctness one."""
    k = int(kernel_hw[0]) * int(kernel_hw[1]) * int(in_ch_per_group)
    return 2 * (k + k % 2) * 2


# ---- the "fold" variant of standard convolution (templates/kernels/tinyaot_convolve_s8_fold.c) ----
FOLD = "fold"


def fold_scratch_bytes(kernel_hw, in_ch: int) -> int:
    """= tinyaot_convolve_s8_fold_get_buffer_size: none when in_ch is a multiple of 4 (windows read in place), else
    the windows of two pixels as int16 values."""
    return 0 if in_ch % 4 == 0 else 4 * int(kernel_hw[0]) * int(kernel_hw[1]) * int(in_ch)


# Cost model, instructions executed under QEMU, keyed by target.has_dsp. Each table follows what the kernel's path
# does per unit of work, fitted on mps2-an386 (DSP; mps3-an547 runs the same code within 1 %) and mps2-an385:
# - fold in place (in_ch a multiple of 4): (per multiply-accumulate, per output value, per call of the 4x2 block
#   fold_mac_4x2_s8). A pixel pair calls it once per kernel row and block of four channels, a pair with a clipped
#   window once per tap of every row that is not one run (fold_block_calls). Fitted to 18 layers: the 1x1 of kws_dscnn
#   and vww_mobilenetv1_025, ic_resnet8's 3x3 and 1x1 s2, mnist8's padded 5x5 on 8 channels (within 8 %; per MAC
#   and per output alone left mnist8's 5x5, half its pairs clipped, 23 % under and ahead of the generic kernel).
# - the column paths (fold below a multiple of 4 input channels, generic below 8; thin first convs): (per MAC, per
#   output value, per window value copied into the int16 column, per copy run: one per kernel row that lies in the
#   input or in the padding, one per tap of a horizontally clipped row; column_runs). Fitted to the first convs of
#   kws_dscnn (10x4x1), ic_resnet8 and vww (3x3x3) and mnist8 (5x5x1), within 5 %. The copy is most of such a layer
#   (mnist8's 5x5x1 on M4: fold 982,207 instructions, the in-place table's terms 357,504 of them). Without it fold
#   was taken for that layer on the M55 (986,793 against mve_conv's 262,235), and for vww's and ic_resnet8's first
#   convs on the M3 (3,387,320 and 2,334,432 against the generic column's 3,016,010 and 2,275,260).
# - generic in place: (per MAC, per output value), fitted to the 1x1 layers of kws_dscnn (K = 64) and vww (K = 128):
#   2.59 / 2.08 per MAC on mps2-an386, 4.36 / 3.61 on mps2-an385.
_FOLD_COST = {True: (1.32, 17.6, 76.7), False: (2.60, 19.1, 69.5)}
_FOLD_COLUMN_COST = {True: (1.10, 27.2, 15.4, 53.2), False: (2.59, 27.8, 21.1, 39.0)}
# fold over decoded weights, in place (tinyaot_convolve_s8_fold_decoded.c): per block of four channels and pixel pair
# the pair's bookkeeping that the dense kernel pays once per pair
_DECODED_PAIR_BLOCK = 40.0
# scratch of a decoded tile: up to this many bytes of whole blocks (more blocks per tile, less per-pair work)
DECODED_TILE_BYTES = 1024
_GENERIC_COST = {True: (1.57, 65.0), False: (2.86, 96.0)}
# (generic without DSP: its column loop is not the in-place one, so per output value is fitted too; four layers,
# four coefficients)
_GENERIC_COLUMN_COST = {True: (1.30, 65.0, 17.1, 35.1), False: (2.52, 45.1, 11.5, 29.9)}


def _window_rows(in_shape, out_shape, kernel_hw, stride_hw, pad_top_left, dilation_hw):
    """Per output row and kernel row whether the input row is padding ([OH, KH]); per output column whether its
    kernel rows lie inside the input as one run (no horizontal dilation, [OW]); per output row and column whether
    the whole window is inside the input."""
    _, h, w, _ = in_shape
    _, oh, ow, _ = out_shape
    (kh, kw), (sh, sw), (pt, pl), (dh, dw) = kernel_hw, stride_hw, pad_top_left, dilation_hw
    iy = np.arange(oh)[:, None] * sh - pt + np.arange(kh)[None, :] * dh
    padded_row = (iy < 0) | (iy >= h)
    bx = np.arange(ow) * sw - pl
    run_cols = (dw == 1) & (bx >= 0) & (bx + kw <= w)
    by = np.arange(oh) * sh - pt
    inside = (((by >= 0) & (by + (kh - 1) * dh < h))[:, None]
              & ((bx >= 0) & (bx + (kw - 1) * dw < w))[None, :])
    return padded_row, run_cols, inside


def column_runs(in_shape, out_shape, kernel_hw, stride_hw, pad_top_left, dilation_hw) -> int:
    """Copy calls of the column paths (fold_fill / col_fill) over the layer: per output pixel and kernel row, one
    when the row is padding or one run of the input, else one per tap."""
    padded_row, run_cols, _ = _window_rows(in_shape, out_shape, kernel_hw, stride_hw, pad_top_left, dilation_hw)
    one = padded_row[:, None, :] | run_cols[None, :, None]  # [OH, OW, KH]
    return int(in_shape[0] * np.where(one, 1, kernel_hw[1]).sum())


def fold_block_calls(in_shape, out_shape, kernel_hw, stride_hw, pad_top_left, dilation_hw) -> int:
    """Calls of fold_mac_4x2_s8 on the in-place path (tinyaot_convolve_s8_fold.c fold_in_place), per block of four
    output channels: pixels go in pairs in raster order (a lone last one paired with itself); a pair of inside
    windows takes one call per kernel row, else a row that is one run for both pixels (inside, or padding no
    longer than the stack row of zero points, FOLD_ZP_BYTES) one call, any other row one per tap."""
    n, _, _, c = in_shape
    kh, kw = kernel_hw
    padded_row, run_cols, inside = _window_rows(in_shape, out_shape, kernel_hw, stride_hw, pad_top_left, dilation_hw)
    whole = (padded_row & (kw * c <= 256))[:, None, :] | (run_cols[None, :, None] & ~padded_row[:, None, :])
    whole &= dilation_hw[1] == 1  # a horizontally dilated row is never one run, padded or not
    whole = np.tile(whole.reshape(-1, kh), (n, 1))  # [pixels, KH]
    inside = np.tile(inside.reshape(-1), n) & (dilation_hw[1] == 1)
    if inside.size % 2:  # the lone last pixel pairs with itself
        whole, inside = np.concatenate([whole, whole[-1:]]), np.concatenate([inside, inside[-1:]])
    both = inside[0::2] & inside[1::2]
    rows_whole = whole[0::2] & whole[1::2]
    clipped = np.where(rows_whole, 1, kw).sum(axis=1)
    return int(np.where(both, kh, clipped).sum())


def _storage(graph, node) -> str:
    """The weight storage kind of a layer (compress/storage.py), "dense" when it has none."""
    st = graph.tensors[node.inputs[1]].storage
    return "dense" if st is None else st.kind


def conv_inplace_offset(in_shape, out_shape, stride_hw, pads, aligned_group: int = 0) -> int:
    """Smallest d >= 0 such that an NHWC output starting d bytes before its NHWC input is never written over an
    input byte still to be read, for a kernel that computes output pixels in raster order at most two at a time and
    reads only the windows of the pixels it computes (see Conv.inplace_offset). The first byte pixel r reads is at
    or after its clipped window origin (max(0, y*sh - pt), max(0, x*sw - pl)), a lower bound of what is still
    needed, so d is conservative. aligned_group = G > 0: the kernel computes groups of G pixels at once instead,
    aligned at multiples of G from each batch's first pixel (the compressed-weight kernels, tinyaot_nn.h)."""
    n, h, w, c_in = in_shape
    _, oh, ow, c_out = out_shape
    oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    row = np.maximum(oy * stride_hw[0] - pads[0], 0)
    col = np.maximum(ox * stride_hw[1] - pads[1], 0)
    first = ((np.arange(n)[:, None, None] * h + row[None]) * w + col[None]) * c_in
    first = first.reshape(-1).astype(np.int64)
    still_needed = np.minimum.accumulate(first[::-1])[::-1]  # min over pixel q and every later pixel
    q = np.arange(first.size, dtype=np.int64)
    written = np.minimum((q + 2) * c_out, first.size * c_out)  # everything up to the end of pair (q, q+1)
    if aligned_group:
        start = q - q % (oh * ow)  # the batch's first pixel
        written = np.minimum(start + ((q - start) // aligned_group + 1) * aligned_group, start + oh * ow) * c_out
    return int(max(0, int((written - still_needed).max())))


def conv2d_s8(
    input: np.ndarray,
    weights_ohwi: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    output_offset: int,
    stride_hw=(1, 1),
    pad_top_left=(0, 0),
    dilation_hw=(1, 1),
    output_hw,
    act_min: int = -128,
    act_max: int = 127,
    groups: int = 1,
) -> np.ndarray:
    """int8 NHWC conv. weights [out_ch, kh, kw, in_ch/groups]; bias int32 [out_ch] or None; output_mult/shift
    per output channel (length out_ch) or per tensor (length 1 / scalar). Returns int8 [N, OH, OW, out_ch]."""
    input = np.asarray(input)
    weights_ohwi = np.asarray(weights_ohwi)
    n, h, w, cin = input.shape
    cout, kh, kw, cin_g = weights_ohwi.shape
    if cin != cin_g * groups:
        raise ValueError(f"conv2d_s8: input has {cin} channels, filter expects {cin_g} x {groups} groups")
    if cout % groups:
        raise ValueError(f"conv2d_s8: {cout} output channels do not split into {groups} groups")
    cout_g = cout // groups
    xo = input.astype(np.int64) + int(input_offset)
    p = im2col_patches(xo, (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)
    oh, ow = p.shape[1], p.shape[2]
    # [N*OH*OW, G, KH*KW*Cg] x [G, KH*KW*Cg, Og] -> [G, N*OH*OW, Og] (exact: core/fixedpoint.exact_matmul)
    p = p.reshape(n * oh * ow, kh, kw, groups, cin_g).transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow, -1)
    wt = weights_ohwi.astype(np.int64).reshape(groups, cout_g, kh * kw * cin_g).transpose(0, 2, 1)
    acc = exact_matmul(p, wt).transpose(1, 0, 2).reshape(n, oh, ow, cout)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requantize_to_int8(acc, _per_channel(output_mult, cout), _per_channel(output_shift, cout),
                              output_offset, act_min, act_max)


def depthwise_conv2d_s8(
    input: np.ndarray,
    weights_1hwc: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    output_offset: int,
    ch_mult: int = 1,
    stride_hw=(1, 1),
    pad_top_left=(0, 0),
    dilation_hw=(1, 1),
    output_hw,
    act_min: int = -128,
    act_max: int = 127,
) -> np.ndarray:
    """int8 NHWC depthwise conv. weights [1, kh, kw, in_ch*ch_mult], output channel c*ch_mult + m reads input
    channel c. Returns int8 [N, OH, OW, in_ch*ch_mult]."""
    input = np.asarray(input)
    weights_1hwc = np.asarray(weights_1hwc)
    n, h, w, cin = input.shape
    _, kh, kw, cout = weights_1hwc.shape
    if cout != cin * ch_mult:
        raise ValueError(f"depthwise_conv2d_s8: {cout} output channels != {cin} inputs x ch_mult {ch_mult}")
    xo = input.astype(np.int64) + int(input_offset)
    p = im2col_patches(xo, (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)  # [N, OH, OW, KH, KW, Cin]
    oh, ow = p.shape[1], p.shape[2]
    wt = weights_1hwc.astype(np.int64).reshape(kh, kw, cin, ch_mult)
    acc = np.einsum("nhwyxc,yxcm->nhwcm", p, wt).reshape(n, oh, ow, cout)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requantize_to_int8(acc, _per_channel(output_mult, cout), _per_channel(output_shift, cout),
                              output_offset, act_min, act_max)


def _per_channel(values, channels: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.int64).reshape(-1)
    if v.size not in (1, channels):
        raise ValueError(f"expected 1 or {channels} quantization values, got {v.size}")
    return v


def conv_patches(node, graph, x: np.ndarray) -> np.ndarray:
    """im2col patches [N, OH, OW, KH, KW, C] of a Conv node's NHWC input `x` (padding 0: the offset-applied zero
    point, or the real zero of a float input)."""
    a = node.attrs
    pads = list(a.get("pads", (0, 0, 0, 0)))
    return im2col_patches(x, tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), (pads[0], pads[1]),
                          tuple(a.get("dilations", (1, 1))), graph.tensors[node.outputs[0]].shape[1:3])


def _taps(node, graph, x: np.ndarray):
    """window_taps of a Conv node's NHWC input (depthwise layers' float evaluation and backward pass)."""
    a = node.attrs
    pads = list(a.get("pads", (0, 0, 0, 0)))
    return window_taps(x, tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), (pads[0], pads[1]),
                       tuple(a.get("dilations", (1, 1))), graph.tensors[node.outputs[0]].shape[1:3])


def conv_weight_row_inputs(node, graph, x: np.ndarray) -> np.ndarray | None:
    """OpSpec.weight_row_inputs of a convolution (int8 or 16-bit): the patches its weight rows multiply."""
    w = graph.tensors[node.inputs[1]].shape
    if w[3] != x.shape[3]:  # grouped, or depthwise with a channel multiplier: rows are not input channels
        return None
    p = conv_patches(node, graph, x)
    if node.attrs.get("depthwise"):
        return p.reshape(-1, w[1] * w[2], w[3])
    return p.reshape(-1, w[1] * w[2] * w[3])


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Conv", traits=Traits(
    layout="spatial", layer_1d=True, sliding_window=True, fuses_activation=True, weighted_layer=True,
    quantized_constants=True, scratch=True,
    kernels=("tinyaot_convolve_s8", "tinyaot_convolve_s4", "tinyaot_convolve_s8_clustered",
             "tinyaot_convolve_s8_sparse", "tinyaot_convolve_s8_rle", "tinyaot_depthwise_conv_s8",
             "tinyaot_depthwise_conv_s4",
             "tinyaot_depthwise_conv_s8_clustered", "tinyaot_depthwise_conv_s8_sparse",
             "tinyaot_depthwise_conv_s8_rle", "tinyaot_convolve_s8_block")))
class Conv(OpSpec):
    """ONNX Conv (X, W, B; strides, pads, dilations, group, kernel_shape, auto_pad) in NHWC after `to_nhwc`:
    weights OHWI for standard and grouped convolution, 1HWC for depthwise (group == C_in > 1)."""

    def _geometry(self, node, graph):
        a = node.attrs
        return (tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0))),
                tuple(a.get("dilations", (1, 1))))

    def lift_1d(self, node, graph):
        lift_window_1d(node, graph, weighted=True)

    def layout(self, node, ctx):
        """NHWC, weights OHWI; group == C_in > 1 makes it depthwise, weights 1HWC."""
        c_in = ctx.logical[node.inputs[0]][1]
        group = int(node.attrs.get("group", 1))
        w = ctx.graph.tensors[node.inputs[1]].data
        if w.ndim != 4:
            raise TinyaotError(f"Conv node {node.name!r}: only 2-D convolution is supported")
        node.attrs.setdefault("kernel_shape", list(w.shape[2:]))
        if group == c_in and group > 1:
            node.attrs["depthwise"] = True
            perm = (1, 2, 3, 0)  # [C*m,1,kh,kw] -> [1,kh,kw,C*m]
        else:
            node.attrs["depthwise"] = False
            perm = (0, 2, 3, 1)  # OIHW -> OHWI
        node.inputs[1] = ctx.const_transposed(node.inputs[1], "_ohwi", perm)
        ctx.spatial(node)
        return True

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, h, w, _ = graph.tensors[node.inputs[0]].shape
        k, s, p, d = self._geometry(node, graph)
        wshape = graph.tensors[node.inputs[1]].shape
        out_c = wshape[3] if node.attrs["depthwise"] else wshape[0]
        return [(n, *spatial_out((h, w), k, s, p, d), out_c)]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        qo, lo, hi = out_params(node, graph, ranges)
        axis = 3 if node.attrs["depthwise"] else 0
        b = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        # float weights are quantized here; a pre-quantized model's int8 weights and int32 bias are kept as given
        qw, wq, qb, bias_q, _, raised = layer_weights(graph.tensors[node.inputs[1]], b, axis, x.quant.s,
                                                      f"Conv node {node.name!r}", input_offset=-x.quant.zp,
                                                      qmax=weight_qmax(node))
        record_raised(graph, node, raised)
        node.inputs[1:] = [set_const(graph, node.name + "_weights", qw, "int8", wq),
                           set_const(graph, node.name + "_bias", qb, "int32", bias_q)]
        # Effective scale per output channel, from the stored (float32) scales of the final tensors.
        mult, shift = quantize_multiplier_array(np.float64(x.quant.s) * wq.scale / np.float64(qo.s))
        node.attrs.update(output_mult=mult, output_shift=shift, input_offset=-x.quant.zp,
                          output_offset=qo.zp, act_min=lo, act_max=hi)

    def _kw(self, node, graph):
        k, s, p, d = self._geometry(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        return dict(input_offset=a["input_offset"], output_offset=a["output_offset"], stride_hw=s,
                    pad_top_left=(p[0], p[1]), dilation_hw=d, output_hw=out[1:3], act_min=a["act_min"],
                    act_max=a["act_max"])

    def reference(self, node, graph, inputs):
        x, w, b = inputs[0], inputs[1], inputs[2]
        a = node.attrs
        if a["depthwise"]:
            return [depthwise_conv2d_s8(x, w, b, a["output_mult"], a["output_shift"],
                                        ch_mult=w.shape[3] // x.shape[3], **self._kw(node, graph))]
        return [conv2d_s8(x, w, b, a["output_mult"], a["output_shift"], groups=x.shape[3] // w.shape[3],
                          **self._kw(node, graph))]

    def batches_reference(self, node, graph):
        return True  # conv2d_s8 / depthwise_conv2d_s8 take [N, H, W, C]

    def macs(self, node, graph):
        w = graph.tensors[node.inputs[1]].shape
        out = graph.tensors[node.outputs[0]].shape
        per_out = w[1] * w[2] * (1 if node.attrs["depthwise"] else w[3])
        return int(np.prod(out) * per_out)

    def weights_bytes(self, node, graph):
        w = graph.tensors[node.inputs[1]]  # as stored in flash: compression may pack it (compress/storage.py)
        return w.storage.nbytes(w.data) if w.storage is not None else w.nbytes

    def params_bytes(self, node, graph):
        out_c = graph.tensors[node.outputs[0]].shape[3]
        return graph.tensors[node.inputs[2]].nbytes + 8 * out_c  # bias + multiplier + shift per channel

    def _kernel(self, node):
        return "tinyaot_depthwise_conv_s8" if node.attrs["depthwise"] else "tinyaot_convolve_s8"

    def variants(self, node, graph, target):
        listed = [Variant("generic")]
        w = graph.tensors[node.inputs[1]]
        x = graph.tensors[node.inputs[0]].shape
        if _storage(graph, node) == "sparse_block":  # block kernels: the DSP/C one, and Helium's where it fits
            pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:3]))
            listed = [Variant("generic", block_cost(w, pixels, bool(target.has_dsp), True))]
            if mve_block_ok(w, target):
                listed.append(Variant(MVE_BLOCK, mve_block_cost(w, pixels, not self._block_in_place(node, graph))))
            return tuple(listed)
        # the generic kernel plans its im2col below 8 input channels (not 1x1)
        small = w.shape[3] < 8 and not (w.shape[1] == 1 and w.shape[2] == 1)
        # in place (in_ch a multiple of 4: no scratch) for any window: 1x1 and ic_resnet8's 3x3 layers measured
        # faster than the generic kernel on mps2-an386 and mps2-an385; other in_ch take the column path, whose
        # scratch the variant choice weighs against the arena (pipeline/variants.py)
        inplace = w.shape[3] % 4 == 0 and w.shape[3] <= 256  # a padded tap: in_ch zero points from the stack
        comp = is_compressed(w)  # int4 / clustered weights run fold decoded (ops/decoded.py), others not at all
        # (one codebook per channel: on the in-place layout of whole blocks, decoded run by run)
        cycled = inplace and w.shape[0] % 4 == 0
        if (target.core != "generic" and not node.attrs.get("depthwise")
                and (not comp or (decoded.decodable(w, 4, cycled) and decoded.stack_ok(target)))
                and w.shape[3] == x[3] and (inplace or w.shape[3] % 4 != 0)
                and self._fold_table(node, graph) is not None):
            # standard convolution, one group, dense weights: the fold kernel (any core; DSP or plain C inside)
            o = graph.tensors[node.outputs[0]].shape
            macs, outs = self.macs(node, graph), int(np.prod(o))
            k, s, p, d = self._geometry(node, graph)
            geo = (x, o, k, s, (p[0], p[1]), d)
            dsp = bool(target.has_dsp)

            def column_cost(table):
                # the window values copied (per pixel, the whole window) and the copy calls
                per_mac, per_out, per_value, per_run = table[dsp]
                values = outs // o[3] * int(np.prod(w.shape[1:]))
                return macs * per_mac + outs * per_out + values * per_value + column_runs(*geo) * per_run

            per_mac, per_out = _GENERIC_COST[dsp]
            generic = column_cost(_GENERIC_COLUMN_COST) if small else macs * per_mac + outs * per_out
            if w.shape[3] % 4 == 0:
                per_mac, per_out, per_call = _FOLD_COST[dsp]
                fold = macs * per_mac + outs * per_out + fold_block_calls(*geo) * -(-o[3] // 4) * per_call
            else:
                fold = column_cost(_FOLD_COLUMN_COST)
            if comp:
                # each weight decoded once; in place, every block runs over every pixel pair (locate, loop)
                fold += decoded.decode_cost(w, run=4) + (_DECODED_PAIR_BLOCK * (outs // o[3] + 1) // 2 * -(-o[3] // 4)
                                                  if w.shape[3] % 4 == 0 else 0)
                generic = None  # the compressed kernels: not modelled (--tune measures them)
            listed = [Variant("generic", generic), Variant(FOLD, fold)]
        listed += mve_dw_variants(node, graph, target, self.macs(node, graph))  # Helium depthwise (mve_depthwise.py)
        listed += dw3x3_variants(node, graph, target, self.macs(node, graph))  # depthwise 3x3 (depthwise3x3.py)
        listed += mve_conv.conv_variants(node, graph, target, self.macs(node, graph))  # Helium conv (mve.py)
        return tuple(listed)

    def _fold_table(self, node, graph):
        """The fold kernel's requantization table for this layer (ops/common.py), None where it is not exact."""
        a = node.attrs
        return fold_requant_table(graph.tensors[node.inputs[2]].data, graph.tensors[node.inputs[1]].data,
                                  a["input_offset"], a["output_mult"], a["output_shift"], a["output_offset"])

    def _block_in_place(self, node, graph) -> bool:
        """Whether tinyaot_convolve_s8_block_mve reads the input in place (1x1, no padding, in_ch a multiple of 4)."""
        w = graph.tensors[node.inputs[1]].shape
        return w[1] == 1 and w[2] == 1 and not any(node.attrs.get("pads", (0, 0, 0, 0))) and w[3] % 4 == 0

    def scratch_bytes(self, node, graph):
        if variant_of(node) in DW3X3_VARIANTS:  # compressed weights decoded there
            return dw3x3_scratch_bytes(node, graph)
        if variant_of(node) == MVE_DW:
            return mve_dw_scratch_bytes(node, graph)
        if variant_of(node) in mve_conv.CONV_VARIANTS:
            return mve_conv.conv_scratch_bytes(node, graph)
        if variant_of(node) == FOLD:
            w = graph.tensors[node.inputs[1]].shape
            if is_compressed(graph.tensors[node.inputs[1]]):  # tinyaot_convolve_s8_fold_decoded.c
                k = int(np.prod(w[1:]))
                if w[3] % 4 == 0:  # a tile of whole blocks of four channels: the stack tile, else up to
                    # DECODED_TILE_BYTES of scratch (ops/decoded.py)
                    if decoded.on_stack(4 * k):
                        return 0
                    return 4 * k * max(1, min(-(-w[0] // 4), DECODED_TILE_BYTES // (4 * k)))
                return -(-w[0] * k // 4) * 4 + fold_scratch_bytes(w[1:3], w[3])
            return fold_scratch_bytes(w[1:3], w[3])
        # The im2col scratch pays when the input has few channels (a window then is many short runs: the
        # DS-CNN first layer, 10x4 taps of 1 channel, drops from 6.5 to 3.4 instructions per MAC on an M4) and
        # slightly loses on wide ones (3x3x16: 2.15 -> 2.26), so it is planned only below 8 input channels.
        if node.attrs.get("depthwise"):
            return 0
        w = graph.tensors[node.inputs[1]].shape  # OHWI
        if _storage(graph, node) == "sparse_block":  # the two-pixel column (tinyaot_block_support.h)
            wt = graph.tensors[node.inputs[1]]
            if is_2x1(graph.tensors[node.inputs[1]]) and variant_of(node) != MVE_BLOCK:
                # the column and the positions decoded once per call
                return block2x1_scratch_bytes(int(np.prod(w[1:])), block2x1_arrays(wt.storage)[2])
            if variant_of(node) == MVE_BLOCK:  # two int8 columns unless read in place (tinyaot_mve_block.h)
                cols = 0 if self._block_in_place(node, graph) else 2 * (-(-int(np.prod(w[1:])) // 4) * 4)
                # the 2x1 kernel's positions decoded once per call (tinyaot_mve_block2x1.h), unless in flash
                if not is_2x1(wt):
                    return cols
                seg = mve_2x1_segmented(wt)  # (a 1x1 layer's constant block-rows count in its stream's bytes)
                return cols + mve_block2x1_positions(wt.storage, seg, constants=np.zeros(w[0], np.int8) if
                                                     mve_2x1_const_rows(w, seg) else None)[1]
            return block_scratch_bytes(int(np.prod(w[1:])))
        if is_compressed(graph.tensors[node.inputs[1]]):  # its four-pixel column shares each decoded weight
            return compressed_conv_scratch_bytes(w[1:3], w[3])
        if w[3] >= 8 or (w[1] == 1 and w[2] == 1):
            return 0
        return conv2d_scratch_bytes(w[1:3], w[3])

    def row_window(self, node, graph):
        if graph.tensors[node.inputs[0]].dtype != "int8":
            return None
        k, s, p, d = self._geometry(node, graph)
        return RowWindow(k[0], s[0], p[0], d[0])

    def inplace_offset(self, node, graph):
        """Both C kernels visit output pixels in raster order, at most two at a time (the conv's two-pixel paths),
        and once a pixel pair is written they never read its windows again. So the output may overlap the input
        when every output byte written by the end of pair (q, q+1) lies below the first input byte that pixel q or
        any later pixel still reads. Grouped (not depthwise) convolutions are excluded: the im2col path runs
        group by group over all pixels, re-reading early pixels after writing late ones."""
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        if not node.attrs["depthwise"] and graph.tensors[node.inputs[1]].shape[3] != x[3]:
            return None
        if variant_of(node) == FOLD and is_compressed(graph.tensors[node.inputs[1]]) and \
                graph.tensors[node.inputs[1]].shape[3] % 4 == 0:
            return None  # decoded block by block: every block reads every window
        if not mve_conv.decoded_inplace_ok(node, graph):
            return None  # decoded tile by tile: every tile reads every window
        group = 0  # compressed weights: aligned groups of pixels at once (tinyaot/ops/compressed.py)
        if (is_compressed(graph.tensors[node.inputs[1]]) and _storage(graph, node) != "sparse_block"
                and variant_of(node) == "generic"):  # (the dense variants' decoded forms keep their own order)
            group = DW_PIXELS_AT_ONCE if node.attrs["depthwise"] else CONV_PIXELS_AT_ONCE
        return conv_inplace_offset(x, o, *self._geometry(node, graph)[1:3], aligned_group=group)

    def render(self, node, graph, cname):
        a = node.attrs
        k, s, p, d = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        w = graph.tensors[node.inputs[1]].shape
        o = graph.tensors[node.outputs[0]].shape
        kernel = self._kernel(node)
        dw = a["depthwise"]
        if variant_of(node) in DW3X3_VARIANTS:
            return dw3x3_render(node, graph, cname)
        if variant_of(node) == MVE_DW:
            return mve_dw_render(node, graph, cname, (k, s, p, d))
        # compressed weights: that kind's kernel, the storage's arrays as constants (tinyaot/ops/compressed.py)
        cf = compressed_filter(graph.tensors[node.inputs[1]], cname, "depthwise" if dw else "conv",
                               layer=dict(bias=graph.tensors[node.inputs[2]].data, input_offset=a["input_offset"],
                                          mult=a["output_mult"], shift=a["output_shift"],
                                          output_offset=a["output_offset"]),
                               helium=variant_of(node) == MVE_BLOCK)
        if cf is not None:
            kernel = cf.kernel
        weights = cf.consts if cf is not None else [ConstArray("int8_t", f"{cname}_weights",
                                                               graph.tensors[node.inputs[1]].data)]
        bias = graph.tensors[node.inputs[2]].data
        if variant_of(node) == FOLD and not dw:
            # input offset folded into the bias, weights rearranged for the kernel's 4x2 block (compile time)
            kernel = "tinyaot_convolve_s8_fold"
            wd = graph.tensors[node.inputs[1]].data
            layout = interleave_quads(wd.reshape(wd.shape[0], -1))
            # (bias: the folded one of _fold_table, below)
            weights = [ConstArray("int8_t", f"{cname}_weights", layout)]
            if cf is not None:  # int4 / clustered: the codes in the same layout, decoded block by block
                kernel = "tinyaot_convolve_s8_fold_decoded"
                wt = graph.tensors[node.inputs[1]]
                region, div, mod, cycle = decoded.block_layout(wt, 4 * int(np.prod(w[1:])), 4)
                codes = decoded.layout_codes(wt, layout, region, div, mod, cname, cycle=cycle)
                weights = codes.consts
                cf = None
                params_filter = codes.arg
        mult, shift = a["output_mult"], a["output_shift"]
        if kernel.startswith("tinyaot_convolve_s8_fold"):  # {mult, radd} pairs and right shifts (fold_support.h)
            bias, mult, shift = self._fold_table(node, graph)
        if cf is not None and cf.requant is not None:  # block kernels: folded bias, their requantization
            bias, mult, shift = cf.requant
        consts = weights + [ConstArray("int32_t", f"{cname}_bias", bias),
                            ConstArray("int32_t", f"{cname}_mult", mult),
                            ConstArray("int32_t", f"{cname}_shift", shift)]
        params = {"ptype": "tinyaot_dw_conv_params" if dw else "tinyaot_conv_params", "context": True,
                  "input_offset": a["input_offset"], "output_offset": a["output_offset"], "stride": s[:2],
                  "padding": p[:2], "dilation": d[:2], "activation": [a["act_min"], a["act_max"]],
                  "ch_mult": o[3] // x[3] if dw else None, "mult": f"{cname}_mult", "shift": f"{cname}_shift",
                  "input_dims": list(x), "filter_dims": list(w), "bias_dims": [1, 1, 1, o[3]],
                  "output_dims": list(o), "filter": cf.arg if cf is not None else f"{cname}_weights",
                  "bias": f"{cname}_bias"}
        files = cf.files if cf is not None else [kernel + ".c"]
        if kernel == "tinyaot_convolve_s8_fold":
            files = ["tinyaot_fold_support.h", "tinyaot_fold_conv.h"] + files
        if kernel == "tinyaot_convolve_s8_fold_decoded":  # (its column path calls the dense fold kernel)
            params["filter"] = params_filter
            files = ["tinyaot_fold_support.h", "tinyaot_fold_conv.h", *decoded.FILES, "tinyaot_convolve_s8_fold.c",
                     *files]
        if variant_of(node) in mve_conv.CONV_VARIANTS:
            return mve_conv.render_conv(node, graph, cname, params)
        return KernelCall(kernel, files=files, consts=consts, template="layers/conv.c.j2", params=params)

    def int_bounds(self, node, graph):
        w = np.asarray(graph.tensors[node.inputs[1]].data)
        return layer_bounds(node, graph, weight_rows(w, bool(node.attrs.get("depthwise"))))

    def layer_class(self, node):
        if node.attrs.get("depthwise"):
            return "depthwise"
        return "conv 1x1" if tuple(node.attrs.get("kernel_shape", ())) == (1, 1) else "conv"

    # ---- compression, refitting and float evaluation (compress/prune.py, compress/refit.py) ----
    def compression_kind(self, node):
        return "depthwise" if node.attrs.get("depthwise") else "conv"

    def pre_activation(self, node, graph, x):
        return np.concatenate([self._pre_activation(node, graph, x[s:s + FLOAT_CHUNK])
                               for s in range(0, len(x), FLOAT_CHUNK)])

    def _pre_activation(self, node, graph, x):
        w, b = float_const(graph, node, 1, x), float_const(graph, node, 2, x)
        if node.attrs.get("depthwise"):  # 1HWC, output channel c * multiplier + m reads input channel c
            mult = w.shape[3] // x.shape[3]
            y = None
            for i, j, tap in _taps(node, graph, x):
                part = (tap if mult == 1 else np.repeat(tap, mult, axis=-1)) * w[0, i, j]
                y = part if y is None else y + part
        else:
            p = conv_patches(node, graph, x)
            groups = x.shape[3] // w.shape[3]
            n, oh, ow, kh, kw, _ = p.shape
            cols = p.reshape(n * oh * ow, kh, kw, groups, -1).transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow,
                                                                                               -1)
            wt = w.reshape(groups, w.shape[0] // groups, -1).transpose(0, 2, 1)
            y = np.matmul(cols, wt).transpose(1, 0, 2).reshape(n, oh, ow, -1)
        return y if b is None else y + b

    def evaluate_float(self, node, graph, inputs):
        return [fused_activation(node, self.pre_activation(node, graph, inputs[0]))]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        """Standard convolution through the forward pass's im2col patches: weight gradient grad^T @ patches, input
        gradient grad @ W scattered back through the same windows (col2im); depthwise one kernel tap at a time."""
        x = inputs[0]
        w = float_const(graph, node, 1, x)
        depthwise = bool(node.attrs.get("depthwise"))
        if not depthwise and w.shape[3] != x.shape[3]:
            raise FloatUnsupported(f"no backward pass for the grouped Conv node {node.name!r}")
        g = activation_grad(node, outputs[0], grad_out[0])
        kernel, stride, pads, dilation = self._geometry(node, graph)
        gw, gx = np.zeros_like(w), np.empty(x.shape, w.dtype)
        for s in range(0, len(x), FLOAT_CHUNK):
            gs = g[s:s + FLOAT_CHUNK]
            if depthwise:  # 1HWC: output channel c * mult + m reads input channel c
                mult = w.shape[3] // x.shape[3]
                flat = gs.reshape(-1, w.shape[3])
                for i, j, tap in _taps(node, graph, x[s:s + FLOAT_CHUNK]):
                    t = (tap if mult == 1 else np.repeat(tap, mult, axis=-1)).reshape(-1, w.shape[3])
                    gw[0, i, j] += np.einsum("mc,mc->c", t, flat)
                gx[s:s + FLOAT_CHUNK] = tap_scatter(
                    len(gs), x.shape[1:3], x.shape[3], kernel, stride, (pads[0], pads[1]), dilation, gs.shape[1:3],
                    lambda i, j: (gs * w[0, i, j]).reshape(*gs.shape[:3], -1, mult).sum(axis=-1))
                continue
            p = conv_patches(node, graph, x[s:s + FLOAT_CHUNK])
            m = gs.shape[0] * gs.shape[1] * gs.shape[2]
            gm = gs.reshape(m, -1)
            gw += (gm.T @ p.reshape(m, -1)).reshape(w.shape)
            gp = (gm @ w.reshape(w.shape[0], -1)).reshape(p.shape)
            gx[s:s + FLOAT_CHUNK] = col2im_patches(gp, x.shape[1:3], kernel, stride, (pads[0], pads[1]), dilation)
        params = {1: gw}
        if len(node.inputs) > 2 and node.inputs[2]:
            params[2] = g.sum(axis=(0, 1, 2)).reshape(graph.tensors[node.inputs[2]].shape)
        return [gx] + [None] * (len(inputs) - 1), params

    def weight_row_inputs(self, node, graph, x):
        return conv_weight_row_inputs(node, graph, x)

    def out_channel_axis(self, node, graph):
        """Standard convolution only (OHWI: output channels on axis 0); a depthwise or grouped one ties channels
        of its input to its output instead."""
        if node.attrs.get("depthwise") or \
                graph.tensors[node.inputs[1]].shape[3] != graph.tensors[node.inputs[0]].shape[3]:
            return None
        return 0

    def input_channels_prunable(self, node, graph, t, channels):
        return graph.tensors[t].shape[-1] == channels

    def prune_input_channels(self, node, graph, channels, keep, gone, value):
        cw = np.asarray(graph.tensors[node.inputs[1]].data, np.float64)  # OHWI: input channels on the last axis
        cb = float_bias(graph, node, cw.shape[0]) + cw[..., gone].sum(axis=(1, 2)) @ value
        return cw[..., keep], cb

    def channel_ties(self, node, graph, t, channels):
        """A depthwise convolution with channel multiplier 1 and float weights: channel c of its input becomes
        channel c of its output, and its weights and bias lose the same channels."""
        if not node.attrs.get("depthwise") or t not in (node.inputs[0], node.outputs[0]):
            return None
        x, out = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
        w = graph.tensors[node.inputs[1]]
        if len(x) == 4 and x[-1] == channels and out[-1] == channels and w.quant is None and w.shape[3] == channels:
            return [node.inputs[0], node.outputs[0]]
        return None

    def removed_channel_value(self, node, graph, values, gone):
        dw = np.asarray(graph.tensors[node.inputs[1]].data)
        db = float_bias(graph, node, dw.shape[3])
        return fused_activation(node, db[gone] + values[0] * dw[..., gone].reshape(-1, len(gone)).sum(axis=0))

    def prune_tie(self, node, graph, channels, keep):
        dw = np.asarray(graph.tensors[node.inputs[1]].data)
        return [(2, float_bias(graph, node, channels)[keep]), (1, dw[..., keep])]

    def oracle(self, node, graph):
        a = node.attrs
        w = graph.tensors[node.inputs[1]]
        b = graph.tensors[node.inputs[2]]
        # back to ONNX's OIHW: OHWI -> OIHW, 1HWC -> [C, 1, kh, kw]
        w_oihw = w.data.transpose(3, 0, 1, 2) if a["depthwise"] else w.data.transpose(0, 3, 1, 2)
        wq = type(w.quant)(w.quant.scale, w.quant.zero_point, 0)

        def core(ins):
            n1, i1, wf = dequantized_const(node.name + "_w", np.ascontiguousarray(w_oihw), wq)
            n2, i2, bf = dequantized_const(node.name + "_b", b.data, b.quant)
            k, s, p, d = self._geometry(node, graph)
            group = graph.tensors[node.inputs[0]].shape[3] // (1 if a["depthwise"] else w.shape[3])
            conv = helper.make_node("Conv", [ins[0], wf, bf], ["conv_out"], kernel_shape=list(k), strides=list(s),
                                    pads=list(p), dilations=list(d), group=group)
            n3, i3, out = activation_nodes(node, "conv_out")
            return n1 + n2 + [conv] + n3, i1 + i2 + i3, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)
