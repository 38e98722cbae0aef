"""The "dw3x3" variant of depthwise convolution: 3x3 filter, channel multiplier 1, no dilation, dense int8 weights
(templates/kernels/tinyaot_depthwise_conv_s8_3x3.c). Not an op file: ops/conv.py lists and renders it.

What the compiler prepares so the kernel does less per output:
- the weights regrouped per four channels, the nine taps of a group four bytes each (zero-padded last group): a
  permutation of the same bytes plus at most 27 padding bytes;
- one table of int32 per group of four channels (four biases, multipliers, radd, and the four e in the bytes of
  one word): e = -shift (a right shift, >= 1) and radd = 2^(e-1) + output_offset * 2^e, TFLite's rounding half and
  the output zero point in one add. 13 bytes per channel, one more than the generic kernel's bias, multiplier and
  shift.

The kernel computes TFLite's double rounding exactly under two bounds checked here per channel (otherwise the
variant is not offered): |acc| < 2^30 (so 2*acc feeds the rounding high multiply SMMULR) and
|acc| + 2^(e-1) + 128 * 2^e < 2^31 (the rounding add), with |acc| <= |bias| + sum|w| * (128 + |input_offset|).
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.registry import IN0, OUT0, ConstArray, KernelCall, variant_of

DW3X3 = "dw3x3"  # DSP cores: the input offset rides along in SXTAB16
DW3X3_FOLD = "dw3x3_fold"  # cores without DSP: interior pixels start from the folded bias (one add less per MAC)
DW3X3_VARIANTS = (DW3X3, DW3X3_FOLD)
KERNEL = "tinyaot_depthwise_conv_s8_3x3"

# Cost model: instructions executed under QEMU per MAC (counted as 9 per output value, border pixels included),
# measured on kws_dscnn's depthwise layers (3x3, 64 channels, 25x5, pads 1): 4.42 on a Cortex-M4 (DSP path),
# 6.45 on a Cortex-M3 (plain C, folded tables); the generic kernel takes 9.8 and 12.1 there. Keyed by
# target.has_dsp.
COST_PER_MAC = {True: 4.4, False: 6.5}


def accumulator_bound(weights_1hwc: np.ndarray, bias, input_offset: int) -> np.ndarray:
    """Per output channel: |bias| + sum|w| * (128 + |input_offset|), an upper bound of |acc| at every step."""
    w = np.abs(np.asarray(weights_1hwc, dtype=np.int64)).reshape(-1, np.shape(weights_1hwc)[-1]).sum(axis=0)
    b = np.zeros_like(w) if bias is None else np.abs(np.asarray(bias, dtype=np.int64)).reshape(-1)
    return b + w * (128 + abs(int(input_offset)))


def applicable(weights_1hwc, bias, shift, input_offset: int, kernel_hw, dilation_hw, ch_mult: int) -> bool:
    """Whether the dw3x3 kernel computes this layer exactly (shape class and the two bounds above)."""
    if tuple(kernel_hw) != (3, 3) or tuple(dilation_hw) != (1, 1) or ch_mult != 1:
        return False
    e = -np.asarray(shift, dtype=np.int64).reshape(-1)
    if e.size == 0 or e.min() < 1 or e.max() > 30:
        return False
    bound = accumulator_bound(weights_1hwc, bias, input_offset)
    if e.size == 1:
        e = np.full(bound.shape, int(e[0]))
    return bool(bound.max() < 2**30 and (bound + (1 << (e - 1)) + 128 * (1 << e)).max() < 2**31)


def arrange_weights(weights_1hwc: np.ndarray) -> np.ndarray:
    """[1, 3, 3, C] int8 -> per group of four channels the nine taps as four bytes each, tap-major (36 bytes per
    group); the last group padded with zero weights."""
    w = np.asarray(weights_1hwc).reshape(9, -1)
    c = w.shape[1]
    groups = -(-c // 4)
    padded = np.zeros((9, groups * 4), w.dtype)
    padded[:, :c] = w
    return np.ascontiguousarray(padded.reshape(9, groups, 4).transpose(1, 0, 2)).reshape(-1)


def channel_table(bias, mult, shift, output_offset: int, channels: int, folded_bias=None) -> np.ndarray:
    """Per group of four channels 13 int32 as the kernel reads them: four biases, four multipliers, four radd, and
    the four e as the bytes of one word (channel j in byte j, little-endian); the last group padded with bias 0,
    multiplier 0, e 1. With `folded_bias` 17: those four after."""
    groups = -(-channels // 4)
    b = np.zeros(groups * 4, np.int64)
    m = np.zeros(groups * 4, np.int64)
    e = np.ones(groups * 4, np.int64)
    if bias is not None:
        b[:channels] = np.asarray(bias, np.int64).reshape(-1)
    m[:channels] = np.broadcast_to(np.asarray(mult, np.int64).reshape(-1), (channels,))
    e[:channels] = np.broadcast_to(-np.asarray(shift, np.int64).reshape(-1), (channels,))
    radd = (np.int64(1) << (e - 1)) + int(output_offset) * (np.int64(1) << e)
    e_word = (e.reshape(groups, 4) << np.array([0, 8, 16, 24], np.int64)).sum(axis=1)  # e <= 30: no sign bit
    rows = [b.reshape(groups, 4), m.reshape(groups, 4), radd.reshape(groups, 4), e_word.reshape(groups, 1)]
    if folded_bias is not None:
        f = np.zeros(groups * 4, np.int64)
        f[:channels] = np.asarray(folded_bias, np.int64).reshape(-1)
        rows.append(f.reshape(groups, 4))
    return np.concatenate(rows, axis=1).reshape(-1).astype(np.int32)


def render_dw3x3(cname: str, x_shape, o_shape, weights_1hwc, bias, mult, shift, stride_hw, pads, input_offset: int,
                 output_offset: int, act_min: int, act_max: int, folded: bool = False) -> KernelCall:
    """The layer's call of the dw3x3 kernel (flat arguments, generic call template)."""

    n, h, w, c = x_shape
    fb = None
    if folded:
        wsum = np.asarray(weights_1hwc, np.int64).reshape(-1, c).sum(axis=0)
        b = np.zeros(c, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
        fb = b + int(input_offset) * wsum  # within the accumulator bound that applicable() checked
    consts = [ConstArray("int8_t", f"{cname}_weights", arrange_weights(weights_1hwc)),
              ConstArray("int32_t", f"{cname}_qtab", channel_table(bias, mult, shift, output_offset, c, fb))]
    args = [IN0, f"{cname}_weights", f"{cname}_qtab", OUT0, n, h, w, c, o_shape[1], o_shape[2], stride_hw[0],
            stride_hw[1], pads[0], pads[1], int(input_offset), int(act_min), int(act_max), int(folded)]
    return KernelCall(KERNEL, args=args, files=[KERNEL + ".c"], consts=consts)


def dw3x3_variants(node, graph, target, macs: int) -> list:
    """[Variant(dw3x3, cost)] when the layer is a dense depthwise 3x3 the kernel computes exactly, on a known core;
    else []. (The generic kernel stays listed by Conv.variants.)"""
    from tinyaot.ops.compressed import is_compressed
    from tinyaot.ops.registry import Variant

    a = node.attrs
    if target.core == "generic" or not a.get("depthwise"):
        return []
    wt = graph.tensors[node.inputs[1]]
    x = graph.tensors[node.inputs[0]].shape
    o = graph.tensors[node.outputs[0]].shape
    if is_compressed(wt) or o[3] != x[3]:
        return []
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    if not applicable(wt.data, bias, a["output_shift"], a["input_offset"], tuple(a["kernel_shape"]),
                      tuple(a.get("dilations", (1, 1))), o[3] // x[3]):
        return []
    return [Variant(DW3X3 if target.has_dsp else DW3X3_FOLD, macs * COST_PER_MAC[bool(target.has_dsp)])]


def render_node(node, graph, cname: str) -> KernelCall:
    """Conv.render for a layer whose variant is dw3x3."""
    a = node.attrs
    p = list(a.get("pads", (0, 0, 0, 0)))
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    return render_dw3x3(cname, graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape,
                        graph.tensors[node.inputs[1]].data, bias, a["output_mult"], a["output_shift"],
                        tuple(a.get("strides", (1, 1))), (p[0], p[1]), a["input_offset"], a["output_offset"],
                        a["act_min"], a["act_max"], folded=variant_of(node) == DW3X3_FOLD)
