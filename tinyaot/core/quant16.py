"""The 16x8 scheme's numerics (TFLite's int16 activations with int8 weights), shared by the s16 ops.

Activations: int16, symmetric per tensor (zero point 0, as TFLite's 16x8 scheme requires), scale max|x| / 32767
over the calibrated range, so [-32767 * s, 32767 * s] covers it (-32768 is reachable only by saturation). Weights:
int8 symmetric per output channel, as in the int8 scheme. Bias: int64 at scale s_in * s_w[c]: with an int16 input
the accumulator unit is 256x finer than with int8, so biases that fit int32 at int8 may not (CMSIS-NN's s16 kernels
take an int64 bias for the same reason).

Requantization of an int64 accumulator is TFLite's `MultiplyByQuantizedMultiplier(int64_t, ...)`, the one CMSIS-NN's
s16 kernels use (`arm_nn_requantize_s64`): the Q0.31 multiplier is first rounded to 15 bits ("reduced multiplier",
(m + 2**15) >> 16, or 0x7FFF when that would reach 2**15), then acc * reduced is divided by 2**(15 - shift) with one
rounding, half toward +infinity (floor(x / 2**t + 1/2)). TFLite states its range assumption, |acc| < 2**47, which
`bounds.py` checks per layer for every input; then |acc * reduced| < 2**62, so the int64 product and the rounding
term cannot overflow. CMSIS-NN writes the same division as two shifts, (acc * m >> (14 - shift)) + 1 >> 1, which
floors twice and gives the same integer.

Part of the numerics core: imports nothing else of tinyaot but the core.
"""
from __future__ import annotations

import math

import numpy as np

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import ScaleError
from tinyaot.core.quant import QuantParams

Q16MIN, Q16MAX = -32768, 32767
ACC64_LIMIT = 1 << 47  # TFLite's stated input range of the int64 requantization (|acc| < 2**47)
RAISED16_TARGET = 1 << 46  # a channel whose accumulator bound passes this gets a larger weight scale
RAISED16_ZERO_UNITS = 1 << 40  # an all-zero weight channel's bias, in accumulator units


def activation_qparams16(lo: float, hi: float) -> QuantParams:
    """Symmetric int16 parameters of a tensor with calibrated range [lo, hi] (zero point 0)."""
    m = max(abs(float(lo)), abs(float(hi)))
    scale = m / Q16MAX
    if scale <= 0.0 or not np.isfinite(scale):
        scale = 1.0 / 32768  # an all-zero tensor: any scale represents it
    return QuantParams(np.asarray(np.float32(scale), np.float64), np.asarray(0, np.int64), None, 16)


def activation_clamp16(qp: QuantParams, activation) -> tuple[int, int]:
    """int16 clamp bounds of a fused activation (lo, hi) under symmetric output parameters `qp`."""
    lo, hi = activation if activation is not None else (-np.inf, np.inf)
    qlo = Q16MIN if not np.isfinite(lo) else int(np.clip(np.rint(lo / qp.s), Q16MIN, Q16MAX))
    qhi = Q16MAX if not np.isfinite(hi) else int(np.clip(np.rint(hi / qp.s), Q16MIN, Q16MAX))
    return qlo, qhi


def reduced_multiplier(real: float) -> tuple[int, int]:
    """(reduced multiplier, total shift) of a real scale for `requantize_s64`: the Q0.31 multiplier rounded to 15
    bits and the right shift 15 - shift. A scale of 2**14 or more gives a total shift <= 0, a left shift (see
    `requantize_s64`); it occurs where a layer's calibrated output range is (near) zero, e.g. a channel of dead
    ReLUs whose nominal output scale is 1/32768. Scales of 2**46 and more are refused."""
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ScaleError(f"the int16 requantization needs a finite non-negative scale, got {real!r}")
    if real == 0.0:
        return 0, 1
    # The Q0.31 mantissa as quantize_multiplier makes it, without its flush of scales below 2**-31 to zero: the
    # int64 path divides by up to 2**62, and a 16-bit layer can need that (an all-zero weight channel whose bias is
    # stored as 2**40 units maps it to an output of ~2**11 with a scale near 2**-29).
    mantissa, shift = math.frexp(real)
    mult = int(math.floor(mantissa * (1 << 31) + 0.5))
    if mult == (1 << 31):
        mult //= 2
        shift += 1
    reduced = (mult + (1 << 15)) >> 16 if mult < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    if total < -31:
        raise ScaleError(f"the rescaling factor {real!r} is too large for the int16 requantization (below 2**46)")
    if total > 62:
        return 0, 1  # the result rounds to 0 for every |acc| < 2**47
    return int(reduced), int(total)


def reduced_multiplier_array(reals) -> tuple[np.ndarray, np.ndarray]:
    pairs = [reduced_multiplier(r) for r in np.asarray(reals, np.float64).ravel()]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def requantize_s64(acc, reduced, total_shift) -> np.ndarray:
    """floor((acc * reduced + 2**(total_shift - 1)) / 2**total_shift) for total_shift >= 1, exact in int64 for
    |acc| < 2**47 (numpy's >> floors, as the C twin's shift of the magnitude does). For total_shift <= 0 (a left
    shift; see `reduced_multiplier`) acc * reduced * 2**-total_shift with acc * reduced first clipped to +-2**15:
    a clipped value gives a result of magnitude >= 2**15 either way, which every int16 clamp after it saturates
    identically, and the clip keeps the product below 2**46."""
    acc = np.asarray(acc, np.int64)
    r = np.asarray(reduced, np.int64)
    t = np.asarray(total_shift, np.int64)
    right = (acc * r + (np.int64(1) << np.maximum(t - 1, 0))) >> np.maximum(t, 0)
    left = np.clip(acc * r, -(1 << 15), 1 << 15) << np.maximum(-t, 0)
    return np.where(t >= 1, right, left)


def requantize_to_int16(acc, reduced, total_shift, act_min: int, act_max: int) -> np.ndarray:
    """The s16 MAC kernels' epilogue: int64 requantization, zero point 0, clamp to the activation range."""
    return np.clip(requantize_s64(acc, reduced, total_shift), int(act_min), int(act_max)).astype(np.int16)


def layer_weights16(w: np.ndarray, b: np.ndarray | None, axis: int, s_in: float, where: str):
    """int8 per-channel symmetric weights in [-127, 127] at their natural scales max|w_c| / 127, raised for a channel
    whose bias would not fit the int64 accumulator's 2**46 beside its weights (see below), and the int64 bias at
    s_in * s_w[c] (bounds.py checks |bias| + sum|w| * 32768 < 2**47 per channel).
    Returns (int8 weights, their QuantParams, int64 bias, the bias QuantParams)."""
    w64 = np.asarray(w, np.float64)
    channels = w64.shape[axis]
    moved = np.moveaxis(w64, axis, 0).reshape(channels, -1)
    bf = np.zeros(channels) if b is None else np.asarray(b, np.float64).reshape(-1)
    if not (np.all(np.isfinite(moved)) and np.all(np.isfinite(bf))):
        raise TinyaotError(f"{where}: weights or bias are not finite (inf or NaN)")
    amax = np.abs(moved).max(axis=1) if moved.size else np.zeros(channels)
    s_in = np.float64(s_in)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        # an all-zero channel: any scale is exact for its weights; one that makes its bias 2**40 units keeps it
        # to float32's precision, far inside the accumulator range
        natural = np.where(amax > 0, amax / 127.0, np.abs(bf) / (s_in * RAISED16_ZERO_UNITS))
        natural = np.where(natural > 0, natural, 1.0)
        scale = np.clip(natural, np.finfo(np.float32).tiny, np.finfo(np.float32).max).astype(np.float32)
    for _ in range(32):
        # A channel whose bias would pass RAISED16_TARGET beside its weights' share gets a larger weight scale (its
        # weights and bias quantized again), as the int8 scheme does for int32 (core/quant.py fit_channel_scales):
        # BatchNormalization with gamma near 0 folds into near-zero weights with a normal bias (vww_mobilenetv1_025
        # had a bias of 5.9e34 units at the natural scale). It costs precision only in weights that are ~0.
        s64 = scale.astype(np.float64)
        q = np.clip(np.rint(moved / s64[:, None]), -127, 127)
        bound = np.abs(np.rint(bf / (s_in * s64))) + np.abs(q).sum(axis=1) * 32768
        fix = bound > RAISED16_TARGET
        if not fix.any():
            break
        up = np.nextafter((s64 * (bound / RAISED16_TARGET)).astype(np.float32), np.float32(np.inf))
        scale = np.where(fix, up, scale).astype(np.float32)
    scale = scale.astype(np.float64)
    shape = [1] * w64.ndim
    shape[axis] = -1
    qw = np.clip(np.rint(w64 / scale.reshape(shape)), -127, 127).astype(np.int8)
    s_acc = s_in * scale
    qb = np.rint(bf / s_acc)
    if np.any(np.abs(qb) >= ACC64_LIMIT):
        c = int(np.flatnonzero(np.abs(qb) >= ACC64_LIMIT)[0])
        raise TinyaotError(f"{where}: the bias of output channel {c} is {abs(qb[c]):.3g} units of s_in * s_w, "
                           f"past the int16 kernels' 2**47 accumulator range")
    return (qw, QuantParams(scale, np.zeros(channels, np.int64), axis), qb.astype(np.int64),
            QuantParams(s_acc, np.zeros(channels, np.int64), 0))


# ---- one-rounding requantization of an exact int64 product (the s16 elementwise ops) --------------------------
EXACT_VALUE_LIMIT = 1 << 31  # |v| <= 2**31 for requantize_exact: |v * mult| < 2**62, the rounding term 2**61


def exact_multiplier(real: float) -> tuple[int, int]:
    """(mult, total_shift) with real ~= mult / 2**total_shift, mult the full Q0.31 mantissa in [2**30, 2**31) (not
    the 15-bit reduced one: the s16 elementwise ops multiply values of at most 2**31, so the whole mantissa fits
    the int64 product) and 1 <= total_shift <= 62. A scale so small that every |v| <= 2**31 rounds to 0 gives
    (0, 1); one of 2**30 or more is refused (no calibrated int16 layer needs it)."""
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ScaleError(f"the int16 requantization needs a finite non-negative scale, got {real!r}")
    if real == 0.0:
        return 0, 1
    mantissa, exp = math.frexp(real)
    mult = int(math.floor(mantissa * (1 << 31) + 0.5))
    if mult == (1 << 31):
        mult //= 2
        exp += 1
    total = 31 - exp
    if total < 1:
        raise ScaleError(f"the rescaling factor {real!r} is too large for the int16 requantization (below 2**30)")
    if total > 62:
        return 0, 1
    return int(mult), int(total)


def requantize_exact(v, mult, total_shift) -> np.ndarray:
    """floor((v * mult + 2**(total_shift - 1)) / 2**total_shift): one rounding, half toward +infinity, of v times
    the real scale mult / 2**total_shift. Exact in int64 for |v| <= 2**31 (|v * mult| < 2**62; see
    exact_multiplier); the C twin is tinyaot_requantize_exact_s64 in tinyaot_s16_support.h."""
    v = np.asarray(v, np.int64)
    t = np.int64(total_shift)
    return (v * np.int64(mult) + (np.int64(1) << (t - 1))) >> t
