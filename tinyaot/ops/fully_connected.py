"""Fully connected: bit-exact numpy int8 reference kernel (TFLite/CMSIS-NN semantics).

`acc[b, o] = sum_d (x[b, d] + input_offset) * (w[o, d] + filter_offset) + bias[o]`, then requantized per tensor
(mult/shift of length 1) or per output channel. CMSIS conventions: offsets are negated zero points for input and
filter, the plain zero point for the output. The C kernel accumulates in int32, safe while
depth * 255 * 255 + |bias| < 2**31 (about 33 000 inputs with a nonzero filter offset, 65 000 without).
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.fixedpoint import requantize_to_int8


def fully_connected_s8(
    input: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    filter_offset: int = 0,
    output_offset: int,
    act_min: int = -128,
    act_max: int = 127,
) -> np.ndarray:
    """input int8 [batches, depth]; weights int8 [out, depth]; bias int32 [out] or None -> int8 [batches, out]."""
    x = np.asarray(input).astype(np.int64) + int(input_offset)
    wt = np.asarray(weights).astype(np.int64) + int(filter_offset)
    if x.ndim != 2 or wt.ndim != 2 or x.shape[1] != wt.shape[1]:
        raise ValueError(f"fully_connected_s8: input {x.shape} and weights {wt.shape} do not match")
    out_ch = wt.shape[0]
    acc = x @ wt.T
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    mult = np.asarray(output_mult, dtype=np.int64).reshape(-1)
    shift = np.asarray(output_shift, dtype=np.int64).reshape(-1)
    if mult.size not in (1, out_ch) or shift.size != mult.size:
        raise ValueError(f"fully_connected_s8: expected 1 or {out_ch} multipliers/shifts, got {mult.size}/{shift.size}")
    return requantize_to_int8(acc, mult, shift, output_offset, act_min, act_max)
