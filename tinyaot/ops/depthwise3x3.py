"""The "dw3x3" variant of depthwise convolution: 3x3 filter, channel multiplier 1, no dilation, dense int8 weights
(templates/kernels/tinyaot_depthwise_conv_s8_3x3.c). Not an op file: ops/conv.py lists and renders it.

What the compiler prepares so the kernel does less per output:
- the weights regrouped per four channels, the nine taps of a group four bytes each (zero-padded last group): a
  permutation of the same bytes plus at most 27 padding bytes;
- one table of int32 per group of four channels (four biases, multipliers, radd, and the four e in the bytes of
  one word): e = -shift (a right shift, >= 1) and radd = 2^(e-1) + output_offset * 2^e, TFLite's rounding half and
  the output zero point in one add. 13 bytes per channel, one more than the generic kernel's bias, multiplier and
  shift.

The kernel computes TFLite's double rounding in that short form for a group of four channels when every channel
of it meets two bounds checked here (short_form): |acc| < 2^30 (so 2*acc feeds the rounding high multiply) and
|acc| + 2^(e-1) + 128 * 2^e < 2^31 (the rounding add), with |acc| <= |bias| + sum|w| * (128 + |input_offset|), and
e in 1..30. Other groups (a channel with a left shift or shift 0, or sums too large) are marked and take TFLite's
general requantization in the kernel, so any layer of the shape class is exact.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops import decoded
from tinyaot.ops.compressed import is_compressed
from tinyaot.ops.registry import IN0, OUT0, SCRATCH, ConstArray, KernelCall, Variant, variant_of

DW3X3 = "dw3x3"  # DSP cores: the input offset rides along in SXTAB16
DW3X3_FOLD = "dw3x3_fold"  # cores without DSP: interior pixels start from the folded bias (one add less per MAC)
DW3X3_VARIANTS = (DW3X3, DW3X3_FOLD)
KERNEL = "tinyaot_depthwise_conv_s8_3x3"

# Cost model: instructions executed under QEMU per MAC (counted as 9 per output value, border pixels included),
# measured on kws_dscnn's depthwise layers (3x3, 64 channels, 25x5, pads 1): 4.29 on a Cortex-M4 (DSP path),
# 5.43 on a Cortex-M3 (plain C, folded tables, SSAT, SMLAL); the generic kernel takes 9.8 and 12.1 there. Keyed by
# target.has_dsp.
COST_PER_MAC = {True: 4.3, False: 5.4}


def accumulator_bound(weights_1hwc: np.ndarray, bias, input_offset: int) -> np.ndarray:
    """Per output channel: |bias| + sum|w| * (128 + |input_offset|), an upper bound of |acc| at every step."""
    w = np.abs(np.asarray(weights_1hwc, dtype=np.int64)).reshape(-1, np.shape(weights_1hwc)[-1]).sum(axis=0)
    b = np.zeros_like(w) if bias is None else np.abs(np.asarray(bias, dtype=np.int64)).reshape(-1)
    return b + w * (128 + abs(int(input_offset)))


def applicable(weights_1hwc, bias, shift, input_offset: int, kernel_hw, dilation_hw, ch_mult: int) -> bool:
    """Whether the dw3x3 kernel computes this layer exactly: its shape class, and int32 sums (the bound that
    compress/bounds.py keeps, checked again). Channels outside the short requantization go the general way."""
    if tuple(kernel_hw) != (3, 3) or tuple(dilation_hw) != (1, 1) or ch_mult != 1:
        return False
    return bool(accumulator_bound(weights_1hwc, bias, input_offset).max(initial=0) < 2**31)


def short_form(bound: np.ndarray, shift, mult=None) -> np.ndarray:
    """Per channel: whether the kernel's short requantization is exact (a right shift e in 1..30, |acc| < 2^30 and
    |acc| + 2^(e-1) + 128 * 2^e < 2^31), or the multiplier is 0 (a channel whose output is its zero point whatever
    the sums: requantized as if e were 1, it gives output_offset too, since the high product is 0)."""
    e = -np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), bound.shape)
    ok = (e >= 1) & (e <= 30) & (bound < 2**30)
    ec = np.clip(e, 1, 30)
    ok = ok & (bound + (np.int64(1) << (ec - 1)) + 128 * (np.int64(1) << ec) < 2**31)
    if mult is not None:
        ok = ok | (np.broadcast_to(np.asarray(mult, np.int64).reshape(-1), bound.shape) == 0)
    return ok


def left_form(bound: np.ndarray, shift) -> np.ndarray:
    """Per channel: a shift s in 0..30 with |acc| * 2^(s+1) < 2^31 (the kernel's SRDHM(acc * 2^s, m) + output
    offset: the left shift never saturates and the doubled value fits int32)."""
    s = np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), bound.shape)
    return (s >= 0) & (s <= 30) & (bound * (np.int64(1) << np.clip(s + 1, 0, 31)) < 2**31)


MODE_LEFT, MODE_GENERAL = 0x40, 0x7F  # DW3_MODE_LEFT (+ s), DW3_MODE_GENERAL in the kernel


def arrange_weights(weights_1hwc: np.ndarray) -> np.ndarray:
    """[1, 3, 3, C] int8 -> per group of four channels the nine taps as four bytes each, tap-major (36 bytes per
    group); the last group padded with zero weights."""
    w = np.asarray(weights_1hwc).reshape(9, -1)
    c = w.shape[1]
    groups = -(-c // 4)
    padded = np.zeros((9, groups * 4), w.dtype)
    padded[:, :c] = w
    return np.ascontiguousarray(padded.reshape(9, groups, 4).transpose(1, 0, 2)).reshape(-1)


def channel_table(bias, mult, shift, output_offset: int, channels: int, folded_bias=None, short=None,
                  left=None) -> np.ndarray:
    """Per group of four channels 13 int32 as the kernel reads them: four biases, four multipliers, four radd, and
    the four e as the bytes of one word (channel j in byte j, little-endian); the last group padded with bias 0,
    multiplier 0, e 1. With `folded_bias` 17: those four after. `short` (per channel, default all): whether the
    short requantization applies. A group with a channel where it does not is marked slow (bit 31 of the e word)
    and its bytes say per channel: e (short), MODE_LEFT + s (`left`: radd holds the output offset) or MODE_GENERAL
    (radd holds the shift)."""
    groups = -(-channels // 4)
    b = np.zeros(groups * 4, np.int64)
    m = np.zeros(groups * 4, np.int64)
    sh = np.full(groups * 4, -1, np.int64)
    ok = np.ones(groups * 4, bool)
    z = np.zeros(groups * 4, bool)
    if bias is not None:
        b[:channels] = np.asarray(bias, np.int64).reshape(-1)
    m[:channels] = np.broadcast_to(np.asarray(mult, np.int64).reshape(-1), (channels,))
    sh[:channels] = np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), (channels,))
    sh = np.where(m == 0, -1, sh)  # multiplier 0: the output is the zero point, e = 1 gives it (short_form)
    if short is not None:
        ok[:channels] = np.asarray(short, bool).reshape(-1)
    if left is not None:
        z[:channels] = np.asarray(left, bool).reshape(-1) & ~ok[:channels]
    e = np.clip(-sh, 1, 30)
    radd = (np.int64(1) << (e - 1)) + int(output_offset) * (np.int64(1) << e)
    radd = np.where(ok, radd, np.where(z, int(output_offset), sh))
    mode = np.where(ok, e, np.where(z, MODE_LEFT + np.clip(sh, 0, 30), MODE_GENERAL)).reshape(groups, 4)
    slow = ~ok.reshape(groups, 4).all(axis=1)
    e_word = (mode << np.array([0, 8, 16, 24], np.int64)).sum(axis=1)  # bytes <= 0x7F
    e_word = np.where(slow, e_word - 2**31, e_word)  # bit 31 marks a slow group (as int32)
    rows = [b.reshape(groups, 4), m.reshape(groups, 4), radd.reshape(groups, 4), e_word.reshape(groups, 1)]
    if folded_bias is not None:
        f = np.zeros(groups * 4, np.int64)
        f[:channels] = np.asarray(folded_bias, np.int64).reshape(-1)
        rows.append(f.reshape(groups, 4))
    return np.concatenate(rows, axis=1).reshape(-1).astype(np.int32)


def render_dw3x3(cname: str, x_shape, o_shape, weights_1hwc, bias, mult, shift, stride_hw, pads, input_offset: int,
                 output_offset: int, act_min: int, act_max: int, folded: bool = False, tensor=None) -> KernelCall:
    """The layer's call of the dw3x3 kernel (flat arguments, generic call template). `tensor`: the weight tensor
    when its storage is int4 or clustered, decoded into the scratch first (tinyaot_depthwise_conv_s8_3x3_decoded)."""

    n, h, w, c = x_shape
    fb = None
    if folded:
        wsum = np.asarray(weights_1hwc, np.int64).reshape(-1, c).sum(axis=0)
        b = np.zeros(c, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
        fb = b + int(input_offset) * wsum  # within the accumulator bound that applicable() checked
    bound = accumulator_bound(weights_1hwc, bias, input_offset)
    table = channel_table(bias, mult, shift, output_offset, c, fb, short_form(bound, shift, mult),
                          left_form(bound, shift))
    layout = arrange_weights(weights_1hwc)
    consts = [ConstArray("int8_t", f"{cname}_weights", layout), ConstArray("int32_t", f"{cname}_qtab", table)]
    tail = [n, h, w, c, o_shape[1], o_shape[2], stride_hw[0], stride_hw[1], pads[0], pads[1], int(input_offset),
            int(output_offset), int(act_min), int(act_max), int(folded)]
    files = [KERNEL + ".c", "tinyaot_dw3_support.h"]
    if tensor is not None:  # the codes in the same layout, regions of four channels (36 taps)
        region, div, mod, cycle = decoded.block_layout(tensor, 36, 1)  # per tap, the four channels in turn
        codes = decoded.layout_codes(tensor, layout, region, div, mod, cname, cycle=cycle)
        args = [IN0, codes.arg, SCRATCH, 9 * c, f"{cname}_qtab", OUT0, *tail]
        return KernelCall(KERNEL + "_decoded", args=args, files=[KERNEL + "_decoded.c", *decoded.FILES, *files],
                          consts=codes.consts + consts[1:])
    args = [IN0, f"{cname}_weights", f"{cname}_qtab", OUT0, *tail]
    return KernelCall(KERNEL, args=args, files=files, consts=consts)


def dw3x3_variants(node, graph, target, macs: int) -> list:
    """[Variant(dw3x3, cost)] when the layer is a dense depthwise 3x3 the kernel computes exactly, on a known core;
    else []. (The generic kernel stays listed by Conv.variants.)"""
    a = node.attrs
    if target.core == "generic" or not a.get("depthwise"):
        return []
    wt = graph.tensors[node.inputs[1]]
    x = graph.tensors[node.inputs[0]].shape
    o = graph.tensors[node.outputs[0]].shape
    comp = is_compressed(wt)  # int4 / clustered weights decoded into the scratch (ops/decoded.py)
    if (comp and not (decoded.decodable(wt, 4, True) and o[3] % 4 == 0 and decoded.stack_ok(target))) or o[3] != x[3]:
        return []
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    if not applicable(wt.data, bias, a["output_shift"], a["input_offset"], tuple(a["kernel_shape"]),
                      tuple(a.get("dilations", (1, 1))), o[3] // x[3]):
        return []
    cost = macs * COST_PER_MAC[bool(target.has_dsp)] + (decoded.decode_cost(wt, run=1) if comp else 0.0)
    return [Variant(DW3X3 if target.has_dsp else DW3X3_FOLD, cost)]


def scratch_bytes(node, graph) -> int:
    """The decoded weights of a compressed layer (9 bytes per channel) unless they fit the kernel's stack tile
    (ops/decoded.py); dense weights need none."""
    w = graph.tensors[node.inputs[1]]
    return 9 * w.shape[3] if is_compressed(w) and not decoded.on_stack(9 * w.shape[3]) else 0


def render_node(node, graph, cname: str) -> KernelCall:
    """Conv.render for a layer whose variant is dw3x3."""
    a = node.attrs
    p = list(a.get("pads", (0, 0, 0, 0)))
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    return render_dw3x3(cname, graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape,
                        graph.tensors[node.inputs[1]].data, bias, a["output_mult"], a["output_shift"],
                        tuple(a.get("strides", (1, 1))), (p[0], p[1]), a["input_offset"], a["output_offset"],
                        a["act_min"], a["act_max"], folded=variant_of(node) == DW3X3_FOLD,
                        tensor=graph.tensors[node.inputs[1]] if is_compressed(graph.tensors[node.inputs[1]]) else None)
