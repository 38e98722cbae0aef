"""TFLite/CMSIS-NN fixed-point arithmetic as vectorised numpy int64 functions.

These are the numerics every int8 reference kernel in `tinyaot.ops` is built from, and the Python twins of the C
helpers in `templates/kernels/tinyaot_nn_support.h`. Values are carried in int64 so that no intermediate product of
two int32s can wrap; where the C code works in int32 the result is brought back into int32 range exactly where the C
does it (saturation or wrap are stated at each place), so the two stay bit-identical.

Requantization follows TFLite's two-rounding scheme: `SaturatingRoundingDoublingHighMul` (round to nearest of
`a*b / 2**31`, ties toward +infinity) and then `RoundingDivideByPOT` (round to nearest of `x / 2**e`, ties away from
zero). A single rounding or float arithmetic gives a different answer on some of the CMSIS-NN vectors, which
are the ground truth, so the double rounding is kept even though it is slightly less accurate.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

# Softmax fixed-point layout (TFLite): the scaled input difference is a Q5.26 number (5 integer bits, so the exp
# argument covers [-32, 0)), and the sum of exponentials is accumulated as Q12.19 (up to 4096 terms of value <= 1).
SOFTMAX_SCALED_DIFF_INTEGER_BITS = 5
SOFTMAX_ACCUM_INTEGER_BITS = 12


# --------------------------------------------------------------------------------------------------------------------
# Multiplier quantization (compile time, Python floats)
# --------------------------------------------------------------------------------------------------------------------
class ScaleError(ValueError):
    """A ratio of quantization scales that no fixed-point multiplier encodes (a model's ranges, not a bug):
    quantize_graph reports it naming the node."""


def _round_half_away(x: float) -> int:
    """TFLite's TfLiteRound: nearest integer, ties away from zero (Python's round() ties to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Encode a non-negative real scale as (mult, shift) with real ~= mult * 2**(shift - 31).

    mult is in [2**30, 2**31) for real > 0 (a Q0.31 mantissa in [0.5, 1)); shift may be positive (real >= 0.5) or
    negative. real == 0 gives (0, 0). Scales too small for a right shift of 31 are flushed to (0, 0), as TFLite does:
    the result would round to zero for any int32 accumulator anyway.
    """
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ScaleError(f"quantize_multiplier needs a finite non-negative scale, got {real!r}")
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)  # real = mantissa * 2**shift, mantissa in [0.5, 1)
    q = _round_half_away(mantissa * (1 << 31))
    if q == (1 << 31):  # mantissa rounded up to 1.0: renormalise so mult stays an int32
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        # mult * 2**shift would need more than 31 bits of left shift in the kernel; no int8 layer has such a scale.
        raise ScaleError(f"the rescaling factor {real!r} (a ratio of its quantization scales) is too large to "
                         "encode as a fixed-point multiplier (at most 2**30)")
    return int(q), int(shift)


def quantize_multiplier_array(reals) -> tuple[np.ndarray, np.ndarray]:
    """quantize_multiplier over an array of scales; returns (int32 mults, int32 shifts)."""
    pairs = [quantize_multiplier(r) for r in np.asarray(reals, dtype=np.float64).ravel()]
    mult = np.array([p[0] for p in pairs], dtype=np.int32)
    shift = np.array([p[1] for p in pairs], dtype=np.int32)
    return mult, shift


# --------------------------------------------------------------------------------------------------------------------
# Core fixed-point primitives (vectorised; inputs are int32-valued, computed in int64)
# --------------------------------------------------------------------------------------------------------------------
def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


# float64 holds every integer of magnitude up to 2**53 exactly, and a sum of products of such integers whose every
# partial sum stays within 2**53 is exact in any order of addition: the float64 matmul (BLAS) then gives the exact
# integer result, ~10x faster than numpy's int64 matmul, which has no BLAS (a 125x576 by 576x64 conv: 7.3 ms against
# 0.5 ms). The references' accumulators are int8/int16 products summed over at most tens of thousands of terms,
# far inside the bound; larger operands fall back to the int64 matmul.
EXACT_FLOAT_INT = 2.0 ** 53


def exact_matmul(a, b) -> np.ndarray:
    """a @ b (numpy matmul semantics) of integer-valued arrays, exact, as int64."""
    a, b = _i64(a), _i64(b)
    if a.size == 0 or b.size == 0:
        return np.matmul(a, b)
    k = a.shape[-1]
    bound = float(np.abs(a).max()) * float(np.abs(b).max()) * k
    if bound >= EXACT_FLOAT_INT:
        return np.matmul(a, b)
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)


def saturate_int32(x) -> np.ndarray:
    return np.clip(_i64(x), INT32_MIN, INT32_MAX)


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """round(a*b / 2**31) to nearest, ties toward +infinity; the one overflowing case (-2**31)**2 saturates.

    a*b of two int32s is at most 2**62 in magnitude, so the int64 product and the nudge cannot overflow. The
    division truncates toward zero (C semantics); with a nudge of +2**30 for non-negative products and 1 - 2**30 for
    negative ones, ties land on the upper neighbour on both sides (gemmlowp's definition, which TFLite uses).
    """
    a = _i64(a)
    b = _i64(b)
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    t = ab + nudge
    # truncating division by 2**31 (numpy's >> floors, so negative values are negated around it)
    q = np.where(t >= 0, t >> 31, -((-t) >> 31))
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, np.int64(INT32_MAX), q)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """round(x / 2**exponent), ties away from zero (x int32-valued).

    Floor shift plus a correction of one when the discarded remainder exceeds half (or reaches it, for negative x,
    so that ties go away from zero rather than up). Kernels use exponents 0..31 (TFLite's range); in int64 the same
    formula is exact up to 62, which softmax needs for very long rows (its C twin special-cases those).
    """
    x = _i64(x)
    e = _i64(exponent)
    if np.any(e < 0) or np.any(e > 62):
        raise ValueError("rounding_divide_by_pot exponent must be in [0, 62]")
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> e) + (remainder > threshold).astype(np.int64)


def saturating_left_shift(x, exponent) -> np.ndarray:
    """x * 2**exponent saturated to int32 (exponent >= 0). Also gemmlowp's SaturatingRoundingMultiplyByPOT for a
    positive exponent, which saturates in exactly this way."""
    return saturate_int32(_i64(x) << _i64(exponent))


def multiply_by_quantized_multiplier(acc, mult, shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier: acc * mult * 2**(shift-31) with two roundings.

    `mult` and `shift` broadcast against `acc` (per-channel arrays on the last axis, or scalars). A positive shift
    is applied as a left shift before the high multiply. TFLite does that shift in int32 where an overflow is
    undefined; here (and in the C twin) the shifted value saturates to int32 instead, which equals TFLite whenever
    TFLite's result is defined.
    """
    acc = _i64(acc)
    mult = _i64(mult)
    shift = _i64(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(saturating_left_shift(acc, left), mult), right)


def requantize_to_int8(acc, mult, shift, output_offset: int, act_min: int, act_max: int) -> np.ndarray:
    """The common kernel epilogue: rescale an int32 accumulator, add the output zero point, clamp, cast."""
    out = multiply_by_quantized_multiplier(acc, mult, shift) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


# --------------------------------------------------------------------------------------------------------------------
# Softmax helpers (gemmlowp fixed-point exp and reciprocal, as TFLite's integer softmax uses them)
# --------------------------------------------------------------------------------------------------------------------
def _q31(real: float) -> int:
    """A Q0.31 constant (or Q2.29 etc. when pre-scaled by the caller), rounded to nearest."""
    return _round_half_away(real * (1 << 31))


# exp(-2**k) for k = -2..4 as Q0.31: multiplied in for each set bit of the argument's integer/quarter part.
EXP_BARREL_CONSTANTS = tuple((k, _q31(math.exp(-(2.0 ** k)))) for k in range(-2, 5))
EXP_MINUS_ONE_EIGHTH_Q31 = _q31(math.exp(-1.0 / 8.0))
ONE_THIRD_Q31 = _q31(1.0 / 3.0)
# Newton-Raphson start point for 1/d, d in [1/2, 1]: x0 = 48/17 - 32/17 * d, both as Q2.29
NR_48_OVER_17_Q29 = _round_half_away(48.0 / 17.0 * (1 << 29))
NR_NEG_32_OVER_17_Q29 = -_round_half_away(32.0 / 17.0 * (1 << 29))


def _srdhm(a, b):
    return saturating_rounding_doubling_high_mul(a, b)


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(a) for a Q0.31 value a in [-1/4, 0): 4th-order Taylor expansion around -1/8, result Q0.31.

    With x = a + 1/8 (|x| <= 1/8) the polynomial terms are tiny, so int32 adds of them cannot overflow; every
    product is a Q0.31 fixed-point multiply (SRDHM) and every power-of-two division a RoundingDivideByPOT.
    """
    a = _i64(a)
    x = a + (1 << 28)  # + 1/8 in Q0.31
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(_srdhm(x4_over_4 + x3, ONE_THIRD_Q31) + x2, 1)  # x^4/24 + x^3/6 + x^2/2
    return EXP_MINUS_ONE_EIGHTH_Q31 + _srdhm(EXP_MINUS_ONE_EIGHTH_Q31, x + poly)


def exp_on_negative_values(a) -> np.ndarray:
    """exp(a) for a Q5.26 value a <= 0, result Q0.31 (a == 0 gives the Q0.31 "one", INT32_MAX).

    a is split into a remainder in [-1/4, 0) (evaluated by the Taylor polynomial) and a multiple of 1/4 whose bits
    each multiply in a constant exp(-2**k); values below -32 are not representable in Q5.26 so no clamp is needed.
    """
    a = _i64(a)
    frac_bits = 31 - SOFTMAX_SCALED_DIFF_INTEGER_BITS  # 26
    one_quarter = np.int64(1) << (frac_bits - 2)
    a_mod_quarter_minus_quarter = (a & (one_quarter - 1)) - one_quarter
    # Rescale Q5.26 -> Q0.31: a left shift by 5, saturating (the value is in [-1/4, 0) so it never saturates).
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_left_shift(a_mod_quarter_minus_quarter, SOFTMAX_SCALED_DIFF_INTEGER_BITS))
    remainder = a_mod_quarter_minus_quarter - a  # a non-negative multiple of 1/4
    for k, mult in EXP_BARREL_CONSTANTS:
        if SOFTMAX_SCALED_DIFF_INTEGER_BITS > k:
            bit = np.int64(1) << (frac_bits + k)
            result = np.where((remainder & bit) != 0, _srdhm(result, mult), result)
    return np.where(a == 0, np.int64(INT32_MAX), result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1/(1+a) for a Q0.31 value a in [0, 1), result Q0.31, by three Newton-Raphson steps on d = (1+a)/2.

    d is in [1/2, 1) so 1/d is in (1, 2]: x is carried as Q2.29. The result 1/(1+a) = x/2 is returned in Q0.31,
    i.e. the raw Q2.29 value shifted left by one (saturating: 1/(1+0) = 1 is not representable in Q0.31).
    """
    a = _i64(a)
    # RoundingHalfSum(a, one) with one = INT32_MAX: (a + one) / 2 rounded half away from zero, in int64.
    s = a + INT32_MAX
    half_denominator = np.where(s >= 0, (s + 1) >> 1, -((-s + 1) >> 1))
    x = NR_48_OVER_17_Q29 + _srdhm(half_denominator, NR_NEG_32_OVER_17_Q29)
    one_q29 = np.int64(1) << 29
    for _ in range(3):
        half_denominator_times_x = _srdhm(half_denominator, x)  # Q0.31 * Q2.29 -> Q2.29
        one_minus = one_q29 - half_denominator_times_x
        # Q2.29 * Q2.29 -> Q4.27; rescale to Q2.29 by a saturating left shift of 2
        x = x + saturating_left_shift(_srdhm(x, one_minus), 2)
    return saturating_left_shift(x, 1)


def get_reciprocal(x, x_integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """1/x for a positive Qm.(31-m) value x (m = x_integer_bits): returns (scale Q0.31, num_bits_over_unit) with
    1/x = scale * 2**-num_bits_over_unit. x is normalised to [1, 2) by its leading zeros, then 1/(1 + frac)."""
    x = _i64(x)
    # count leading zeros of x as a uint32
    headroom_plus_one = 32 - _bit_length_u32(x)
    num_bits_over_unit = x_integer_bits - headroom_plus_one
    shifted = ((x << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)  # (1+frac) - 1, as Q0.31 in [0, 1)
    return one_over_one_plus_x_for_x_in_0_1(shifted), num_bits_over_unit


def _bit_length_u32(x: np.ndarray) -> np.ndarray:
    x = _i64(x) & 0xFFFFFFFF
    n = np.zeros_like(x)
    for s in (16, 8, 4, 2, 1):
        big = x >= (np.int64(1) << s)
        n = n + np.where(big, s, 0)
        x = np.where(big, x >> s, x)
    return n + (x > 0)


def softmax_params(input_scale: float, beta: float = 1.0) -> tuple[int, int, int]:
    """(input_mult, input_left_shift, diff_min) for the int8 softmax kernel, as TFLite prepares them.

    The input difference (x - max) is rescaled to Q5.26 by input_mult * 2**input_left_shift / 2**31, so
    beta * input_scale = input_mult * 2**(input_left_shift - 31) / 2**26. diff_min is the most negative difference
    whose rescaled value still fits the int32 left shift; smaller differences contribute exp(...) = 0.
    """
    # TFLite caps the real multiplier at INT32_MAX and QuantizeMultiplier then saturates a shift above 30 to
    # (INT32_MAX, 30); capping at INT32_MAX / 2 gives exactly that pair (an input step above 16: every nonzero
    # int8 difference is then beyond diff_min and contributes exp = 0).
    real = min(float(beta) * float(input_scale) * (1 << (31 - SOFTMAX_SCALED_DIFF_INTEGER_BITS)), INT32_MAX / 2)
    mult, shift = quantize_multiplier(real)
    if shift < 0:
        # The kernel applies the multiplier as "greater than one" (left shift only). beta * input_scale < 2**-27
        # (a softmax whose calibrated input barely varies) folds the right shift into a smaller multiplier,
        # mult * 2**shift rounded: it keeps 30 + shift bits, and |diff| <= 255 then moves the Q5.26 argument by
        # under 2**-19, so every exp is 1 within its fixed-point step and the row comes out uniform, which is
        # the real softmax of such an input. A multiplier rounded to 0 gives exactly that.
        mult, shift = (mult + (1 << (-shift - 1))) >> -shift if shift > -32 else 0, 0
    max_input_rescaled = (
        ((1 << SOFTMAX_SCALED_DIFF_INTEGER_BITS) - 1)
        * (1 << (31 - SOFTMAX_SCALED_DIFF_INTEGER_BITS))
        / (1 << shift)
    )
    diff_min = -int(math.floor(max_input_rescaled))
    return mult, shift, diff_min


# --------------------------------------------------------------------------------------------------------------------
# Rescaling a small value (|v| <= 255, e.g. x - zero_point) by a real scale
# --------------------------------------------------------------------------------------------------------------------
HEADROOM_LEFT_SHIFT = 23  # 255 * 2**23 < 2**31


def multiplier_with_headroom(real: float) -> tuple[int, int, int]:
    """(mult, shift, left_shift) so that (v << left_shift) * mult * 2**(shift - 31) ~= v * real for |v| <= 255.

    MultiplyByQuantizedMultiplier on a value as small as an int8 difference keeps no fractional bits after its high
    multiply, so its second rounding (by the right shift) rounds an already rounded value: 57.25 can become
    114.5 -> 115 -> 57.5 -> 58. Shifting v left first (as TFLite's ADD does with its left_shift of 20) keeps up to 23
    fractional bits through the high multiply, and the result is v * real rounded once, to nearest, except within
    about 2**-23 of a tie. The left shift is capped so the total right shift stays within 31.
    """
    mult, shift = quantize_multiplier(real)
    if mult == 0:
        return 0, 0, 0
    left = max(0, min(HEADROOM_LEFT_SHIFT, 31 + shift))
    return mult, shift - left, left
