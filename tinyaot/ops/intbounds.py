"""Bounds on the int32 intermediates of the int8 kernels, for any int8 input: the pieces the op files' `int_bounds`
share (compress/bounds.py runs them over a quantized graph and explains the method).

Notation: an int8 input x is in [-128, 127] and io = -zero_point is the kernel's input offset, so
|x + io| <= max(128 - io, 127 + io); `input_magnitude` (128 + |io|) also bounds the partial sums of a kernel that
folds the offset out (io * sum(w) + sum(x * w)), so one bound serves every form.
"""
from __future__ import annotations

import numpy as np

from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier
from tinyaot.core.quant import INT32_MAX, input_magnitude

SOFTMAX_TERM_MAX = 1 << 19  # rdbpot(2**31 - 1, 12): the largest Q12.19 exponential


def weight_rows(values: np.ndarray, depthwise: bool) -> np.ndarray:
    """[out_ch, row_len] view: one row per output channel in the order a kernel visits its weights."""
    if depthwise:  # 1HWC: channel is the last axis; a row is the kh*kw taps of that channel
        return np.ascontiguousarray(values.reshape(-1, values.shape[-1]).T)
    return values.reshape(values.shape[0], -1)


def offset_input_max(input_offset: int) -> int:
    """max |x + input_offset| over int8 x: the exact largest offset input (add, sub, mul, concat, prelu)."""
    io = int(input_offset)
    return max(abs(-128 + io), abs(127 + io))


def channel_bounds(rows: np.ndarray, bias, input_offset: int, filter_offset: int = 0) -> np.ndarray:
    """A_c = |bias_c| + (sum|w_c| + n * |fo|) * (128 + |io|) per output channel, as Python ints in an object array
    (exact beyond int64, though no real layer gets near). rows: [out_ch, n] integer weights."""
    r = np.asarray(rows, np.int64)
    n = r.shape[1] if r.ndim == 2 else 0
    wsum = np.abs(r).sum(axis=1) if r.size else np.zeros(r.shape[0], np.int64)
    b = np.zeros(r.shape[0], np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    m = input_magnitude(input_offset)
    return np.array([abs(int(bc)) + (int(ws) + n * abs(int(filter_offset))) * m for bc, ws in zip(b, wsum)],
                    dtype=object)


def requantized_max(acc_bound: int, mult: int, shift: int) -> int:
    """max |requantize(acc)| over |acc| <= acc_bound (TFLite's MultiplyByQuantizedMultiplier as the C computes it:
    saturating left shift, rounding doubling high multiply, rounding right shift; monotone in acc)."""
    a = min(int(acc_bound), INT32_MAX)  # callers check acc_bound itself against int32 first
    v = multiply_by_quantized_multiplier(np.array([a, -a], np.int64), int(mult), int(shift))
    return int(np.abs(v).max())


def _per_channel(values, channels: int) -> list[int]:
    v = np.asarray(values, np.int64).reshape(-1)
    return [int(x) for x in (np.broadcast_to(v, (channels,)) if v.size == 1 else v)]


def epilogue(items: list, acc_bounds, mults, shifts, offset: int) -> None:
    """Append the requantization epilogue of each channel (tinyaot_requantize_s8, shared by every requantizing
    kernel): requantize(acc) is monotone in acc, so |requantize(+-A)| + |output_offset| must fit int32."""
    n = len(acc_bounds)
    for c, a, m, s in zip(range(n), acc_bounds, _per_channel(mults, n), _per_channel(shifts, n)):
        if a <= INT32_MAX:
            items.append((f"requantized output of channel {c} plus the output offset",
                          requantized_max(a, m, s) + abs(int(offset))))


def layer_bounds(node, graph, rows: np.ndarray, extra=()) -> list[tuple[str, int]]:
    """The int8 weighted layers' bounds (convolutions, transposed convolution, fully connected, dense or
    compressed: the kernels decode the final int8 values in `Tensor.data`), from their weight `rows` [out_ch, n]:
    per output channel A_c = |bias_c| + (sum_i |w_c,i| + n * |fo|) * (128 + |io|), fo the fully connected filter
    offset (0 elsewhere; the kernel adds fo * sum(x + io) to the bias first), then the kernel's `extra` items,
    then the epilogue."""
    a = node.attrs
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    io, fo = int(a["input_offset"]), int(a.get("filter_offset", 0))
    bounds = channel_bounds(rows, bias, io, fo)
    m = input_magnitude(io)
    items = []
    for c, bound in enumerate(bounds):
        b = 0 if bias is None else abs(int(np.asarray(bias).reshape(-1)[c]))
        items.append((f"accumulator of output channel {c} (|bias| {b:,} + (sum|w| "
                      f"{int(np.abs(rows[c].astype(np.int64)).sum()):,}"
                      + (f" + {rows.shape[1]} x |filter offset| {abs(fo)}" if fo else "")
                      + f") x max|x - zp| {m})", int(bound)))
    items += list(extra)
    epilogue(items, [int(b) for b in bounds], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


def shifted_sum_bounds(node) -> list[tuple[str, int]]:
    """Add / Sub: each operand (x + io) << left_shift is at most 255 * 2**left_shift; each is rescaled by a
    multiplier <= 1/2 (twice the larger input scale), and the two terms' sum (or difference) must fit."""
    a = node.attrs
    x1, x2 = offset_input_max(a["input1_offset"]), offset_input_max(a["input2_offset"])
    ls = int(a["left_shift"])
    v1, v2 = x1 << ls, x2 << ls
    items = [(f"input 1 shifted left by {ls}", v1), (f"input 2 shifted left by {ls}", v2)]
    if max(v1, v2) > INT32_MAX:
        return items
    t = requantized_max(v1, a["input1_mult"], a["input1_shift"]) + requantized_max(v2, a["input2_mult"],
                                                                                    a["input2_shift"])
    items.append(("sum of the two rescaled inputs", t))
    if t <= INT32_MAX:
        epilogue(items, [t], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


__all__ = ["SOFTMAX_TERM_MAX", "weight_rows", "offset_input_max", "channel_bounds", "requantized_max", "epilogue",
           "layer_bounds", "shifted_sum_bounds"]
