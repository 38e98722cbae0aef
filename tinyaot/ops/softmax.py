"""Softmax: bit-exact numpy reference of TFLite's integer int8 softmax (s8 in, s8 out, scale 1/256, zero point -128).

Per row: d = x - max(x) <= 0; differences below diff_min give exp = 0 (output -128); the others are rescaled to
Q5.26 by (input_mult, input_left_shift) (see `fixedpoint.softmax_params`), exponentiated in fixed point
(`exp_on_negative_values`, Q0.31), summed as Q12.19, and each exp is multiplied by the fixed-point reciprocal of the
sum and rounded to 1/256 steps. The fixed-point exponent approximates exp to about 6e-8 absolute, far below the
1/256 output step, so against a float softmax the result differs by at most one output step (rounding ties).
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.fixedpoint import (
    SOFTMAX_ACCUM_INTEGER_BITS,
    exp_on_negative_values,
    get_reciprocal,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

# Each exp term is at most 1.0 = 2**19 in Q12.19, so 4095 terms keep the int32 sum below 2**31.
MAX_ROW_SIZE = (1 << SOFTMAX_ACCUM_INTEGER_BITS) - 1


def softmax_s8(input: np.ndarray, *, input_mult: int, input_left_shift: int, diff_min: int) -> np.ndarray:
    """int8 [rows, row_size] -> int8 [rows, row_size], softmax along the last axis."""
    x = np.asarray(input).astype(np.int64)
    if x.ndim != 2:
        raise ValueError(f"softmax_s8 expects [rows, row_size], got shape {x.shape}")
    if x.shape[1] > MAX_ROW_SIZE:
        raise ValueError(f"softmax_s8: row size {x.shape[1]} > {MAX_ROW_SIZE} would overflow the Q12.19 sum")
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= int(diff_min)
    # diff >= diff_min guarantees diff * 2**left_shift fits int32 (diff_min is chosen for that), so the
    # "greater than one" multiply needs no saturation before the high multiply.
    scaled = saturating_rounding_doubling_high_mul(np.where(used, diff, 0) << int(input_left_shift), int(input_mult))
    exps = exp_on_negative_values(scaled)  # Q0.31
    # sum of exps in Q12.19: each term is divided by 2**12 with rounding (gemmlowp Rescale)
    sum_of_exps = np.where(used, rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS), 0).sum(axis=1, keepdims=True)
    scale, num_bits_over_unit = get_reciprocal(sum_of_exps, SOFTMAX_ACCUM_INTEGER_BITS)
    # exp * (1/sum) in Q0.31, then down to units of 2**-8 (the 1/256 output scale)
    out = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scale, exps), num_bits_over_unit + 31 - 8) - 128
    out = np.where(used, np.clip(out, -128, 127), -128)
    return out.astype(np.int8)
