"""PRelu with a constant slope (per channel, [C, 1, 1] or [C] in ONNX, or any shape broadcastable to the input):
bit-exact numpy int8 reference kernel and its parameters.

With v = x - zp_in, the output is zp_out + v * s_in / s_out for v >= 0 and zp_out + v * slope * s_in / s_out below,
each scale applied as a TFLite fixed-point multiplier after shifting v left by up to 23 bits (headroom, as TFLite's
ADD does: without it the second rounding of the tiny product is off by one on ~15% of inputs for some slopes, with
it the result is v * scale rounded once). The positive part shares one multiplier; the negative part has one per
slope value, its multiplier negated for a negative slope so that the fixed-point multiply produces the sign itself
(|v| << 23 < 2**31 and |mult| < 2**31, so nothing overflows; see the C kernel).

Why a multiplier pair per channel: flash. Per-channel tables (a 256-entry table per channel, like the LUT ops)
cost 256 bytes per channel; a multiplier and shift cost 8. TFLite's PRELU instead quantizes the slope to int8
(1 byte per channel plus one extra multiplier), but that rounds each slope to a step of its tensor's range, an error
that grows with |x| (for slopes in [0, 0.25], up to ~6% of a small slope); the multipliers keep each slope to 31 bits
for 7 more bytes per channel, which is exact to within onnxruntime's own rounding of the float layer.

The slope is materialised over the smallest block of consecutive physical axes it varies along: the input is
[outer][count][inner] and slope k applies to the middle index k. A per-channel slope in NHWC gives count = C,
inner = 1; a scalar slope count = 1.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import activation_nodes, out_params
from tinyaot.core.fixedpoint import HEADROOM_LEFT_SHIFT, multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.core.quant import INT32_MAX
from tinyaot.ops.intbounds import offset_input_max, requantized_max
from tinyaot.ops.registry import ConstArray, KernelCall, OpSpec, OracleLayer, register, Traits


def prelu_params(slopes, s_in: float, s_out: float) -> dict:
    """pos_mult/pos_shift for s_in / s_out, per slope value the signed neg_mult and neg_shift, and the left_shift
    all of them are applied after (see fixedpoint.multiplier_with_headroom: v is shifted left first so that the
    product keeps fractional bits and is rounded once; one shift for all, capped so every right shift <= 31)."""
    pos = quantize_multiplier(float(s_in) / float(s_out))
    neg = [quantize_multiplier(abs(float(a)) * float(s_in) / float(s_out)) for a in np.asarray(slopes).ravel()]
    shifts = [s for m, s in [pos] + neg if m != 0]
    left = max(0, min(HEADROOM_LEFT_SHIFT, 31 + min(shifts))) if shifts else 0
    sign = np.where(np.asarray(slopes, np.float64).ravel() < 0, -1, 1)
    return {"pos_mult": pos[0], "pos_shift": pos[1] - left if pos[0] else 0, "left_shift": left,
            "neg_mult": (np.array([m for m, _ in neg], np.int64) * sign).astype(np.int32),
            "neg_shift": np.array([s - left if m else 0 for m, s in neg], np.int32)}


def prelu_s8(input: np.ndarray, neg_mult, neg_shift, *, input_offset: int, output_offset: int, pos_mult: int,
             pos_shift: int, left_shift: int = 0, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 PRelu; neg_mult and neg_shift broadcast against the input (numpy rules)."""
    v = np.asarray(input, np.int64) + int(input_offset)
    up = v << int(left_shift)
    pos = multiply_by_quantized_multiplier(up, pos_mult, pos_shift)
    neg = multiply_by_quantized_multiplier(up, np.asarray(neg_mult, np.int64), np.asarray(neg_shift, np.int64))
    out = np.where(v >= 0, pos, neg) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


def slope_blocks(slope_shape, x_shape) -> tuple[int, int, int, tuple[int, int]]:
    """(outer, count, inner, (first, last) axis) of the block of axes the broadcast slope varies along."""
    rank = len(x_shape)
    s = (1,) * (rank - len(slope_shape)) + tuple(slope_shape)
    varying = [j for j in range(rank) if s[j] != 1]
    if not varying:
        return 1, 1, int(np.prod(x_shape, dtype=np.int64)), (rank, rank - 1)
    a, b = varying[0], varying[-1]
    prod = lambda dims: int(np.prod(dims, dtype=np.int64))  # noqa: E731
    return prod(x_shape[:a]), prod(x_shape[a:b + 1]), prod(x_shape[b + 1:]), (a, b)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("PRelu", traits=Traits(layout="elementwise", broadcast=True, quantized_constants=True,
                                  kernels=("tinyaot_prelu_s8",)))
class PRelu(OpSpec):
    alias_output_to_input = True  # element i is read before it is written

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def _slope(self, node, graph) -> np.ndarray:
        t = graph.tensors[node.inputs[1]]
        if not t.is_const:
            raise TinyaotError(f"PRelu node {node.name!r}: the slope must be a constant (a learned parameter)")
        return t.quant.dequantize(t.data) if t.quant is not None else np.asarray(t.data, np.float64)

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        slope = self._slope(node, graph)
        try:
            np.broadcast_shapes(slope.shape, tuple(x.shape))
        except ValueError:
            raise TinyaotError(f"PRelu node {node.name!r}: slope shape {list(slope.shape)} does not broadcast to "
                               f"input shape {list(x.shape)}") from None
        outer, count, inner, (a, b) = slope_blocks(slope.shape, x.shape)
        full = np.broadcast_to(slope.reshape((1,) * (len(x.shape) - slope.ndim) + slope.shape), x.shape)
        per_block = full[tuple(slice(None) if a <= j <= b else 0 for j in range(len(x.shape)))].reshape(-1)
        qo, lo, hi = out_params(node, graph, ranges)
        node.attrs.update(prelu_params(per_block, x.quant.s, qo.s), outer=outer, count=count, inner=inner,
                          input_offset=-x.quant.zp, output_offset=qo.zp, act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        a = node.attrs
        x = inputs[0].reshape(a["outer"], a["count"], a["inner"])
        y = prelu_s8(x, a["neg_mult"].reshape(1, -1, 1), a["neg_shift"].reshape(1, -1, 1),
                     input_offset=a["input_offset"], output_offset=a["output_offset"], pos_mult=a["pos_mult"],
                     pos_shift=a["pos_shift"], left_shift=a["left_shift"], act_min=a["act_min"], act_max=a["act_max"])
        return [y.reshape(inputs[0].shape)]

    def int_bounds(self, node, graph):
        """(x + io) << left_shift, then rescaled (by the positive or a channel's negative multiplier) plus the
        output offset, which the kernel adds itself."""
        a = node.attrs
        v = offset_input_max(a["input_offset"]) << int(a["left_shift"])
        items = [(f"input shifted left by {a['left_shift']}", v)]
        if v <= INT32_MAX:
            mults = [int(a["pos_mult"])] + [abs(int(m)) for m in np.asarray(a["neg_mult"]).reshape(-1)]
            shifts = [int(a["pos_shift"])] + [int(s) for s in np.asarray(a["neg_shift"]).reshape(-1)]
            worst = max(requantized_max(v, m, s) for m, s in zip(mults, shifts))
            items.append(("rescaled input plus the output offset", worst + abs(int(a["output_offset"]))))
        return items

    def render(self, node, graph, cname):
        a = node.attrs
        consts = [ConstArray("int32_t", f"{cname}_neg_mult", a["neg_mult"]),
                  ConstArray("int32_t", f"{cname}_neg_shift", a["neg_shift"])]
        keys = ("outer", "count", "inner", "input_offset", "output_offset", "left_shift", "pos_mult", "pos_shift",
                "act_min", "act_max")
        return KernelCall("tinyaot_prelu_s8", files=["tinyaot_prelu_s8.c"], consts=consts, template="layers/prelu.c.j2",
                          params={**{k: a[k] for k in keys}, "neg_mult": f"{cname}_neg_mult",
                                  "neg_shift": f"{cname}_neg_shift"})

    def params_bytes(self, node, graph):
        return 8 * int(node.attrs["count"]) + 8  # per slope: mult + shift; the shared positive pair

    def oracle(self, node, graph):
        # the float slope, as tinyaot uses it (in the physical layout to_nhwc gave it)
        slope = numpy_helper.from_array(self._slope(node, graph).astype(np.float32), node.name + "_slope")
        prelu = helper.make_node("PRelu", [node.inputs[0], slope.name], ["prelu_out"])
        n2, i2, out = activation_nodes(node, "prelu_out")
        return OracleLayer([prelu] + n2, [slope] + i2, out)
