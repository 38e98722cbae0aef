/*
 * tinyaot int8 kernels: Helium (MVE) helpers shared by the *_mve kernels (Cortex-M55 and other v8.1-M cores with
 * the integer M-profile Vector Extension).
 *
 * Everything here is compiled only when the core has integer MVE (__ARM_FEATURE_MVE bit 0) and neither TINYAOT_NO_MVE
 * nor TINYAOT_PORTABLE is defined; TINYAOT_USE_MVE says which. On every other core this header defines TINYAOT_USE_MVE 0 and nothing
 * else, so an _mve kernel file falls back to (or compiles out in favour of) the scalar/DSP code.
 *
 * Requantization is bit-identical to tinyaot_requantize (tinyaot_nn_support.h) and to
 * multiply_by_quantized_multiplier (tinyaot/core/fixedpoint.py), lane by lane:
 *   1. a positive shift is applied first as a saturating left shift (VQSHL by a per-lane register amount; a lane
 *      whose shift is <= 0 is shifted by 0), as tinyaot_sat_shl does;
 *   2. SaturatingRoundingDoublingHighMul is VQRDMULH: (2*a*b + 2^31) >> 32 = floor((a*b + 2^30) / 2^31), the same
 *      round-to-nearest with ties toward +infinity as tinyaot_srdhm, saturating the one overflowing case
 *      (-2^31) * (-2^31) exactly as gemmlowp does;
 *   3. RoundingDivideByPOT (ties away from zero) is VRSHL by a negative amount, which rounds ties toward +infinity,
 *      after subtracting one from the negative lanes that are shifted: for x = -(k * 2^e + r), 0 <= r < 2^e, e >= 1,
 *      floor((x - 1 + 2^(e-1)) / 2^e) = -k - [r >= 2^(e-1)], the nearest integer to x / 2^e with ties away from
 *      zero; non-negative lanes keep VRSHL's rounding, whose ties go up, also away from zero. The subtraction
 *      saturates (VQADD), which only matters for x = -2^31: an exact multiple of 2^e, for which
 *      floor((-2^31 + 2^(e-1)) / 2^e) = -2^(31-e) is the exact quotient.
 * VRSHL and VQSHL compute in wider precision internally, so no lane can wrap. Shifts are in [-31, 30]
 * (quantize_multiplier's range), so every shift amount is within the instructions' range.
 *
 * Pitfall (GCC 12, measured): the compiler models a predicated store (vstrbq_p_s32 etc.) as writing all of its
 * bytes, so it may delete an earlier plain store, in the same function, to bytes the predicate leaves untouched.
 * Kernels here only ever let a tail store's unwritten bytes overlap data written later (the next pixel), never
 * earlier; code that needs otherwise must put a compiler barrier between the two stores.
 */
#ifndef TINYAOT_MVE_SUPPORT_H
#define TINYAOT_MVE_SUPPORT_H

#include "tinyaot_nn_support.h"

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(TINYAOT_NO_MVE) && !defined(TINYAOT_PORTABLE)
#define TINYAOT_USE_MVE 1
#include <arm_mve.h>

#define TINYAOT_MVE_INLINE static TINYAOT_ALWAYS_INLINE

/* Per-lane shifts split into the left part (max(shift, 0)) and the right part as a non-positive VRSHL amount
   (min(shift, 0)). Kernels that requantize many vectors with the same four channels split once and call
   tinyaot_mve_requantize_split. */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_shift_left(int32x4_t shift)
{
    return vmaxq_s32(shift, vdupq_n_s32(0));
}

TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_shift_right(int32x4_t shift)
{
    return vminq_s32(shift, vdupq_n_s32(0));
}

/* RoundingDivideByPOT by -right (right <= 0 per lane), ties away from zero; see the header comment, step 3.
   (x & right) has its sign bit set exactly when x < 0 and the lane is shifted (right < 0). */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_rdbpot(int32x4_t x, int32x4_t right)
{
    const int32x4_t fixup = vshrq_n_s32(vandq_s32(x, right), 31); /* -1 or 0 */
    return vrshlq_s32(vqaddq_s32(x, fixup), right);
}

/* tinyaot_requantize on four lanes, with the shifts already split (left >= 0, right <= 0 per lane). */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_requantize_split(int32x4_t acc, int32x4_t mult, int32x4_t left,
                                                          int32x4_t right)
{
    const int32x4_t hi = vqrdmulhq_s32(vqshlq_s32(acc, left), mult);
    return tinyaot_mve_rdbpot(hi, right);
}

/* tinyaot_requantize on four lanes: per-lane multipliers and shifts (per-channel quantization). */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_requantize(int32x4_t acc, int32x4_t mult, int32x4_t shift)
{
    return tinyaot_mve_requantize_split(acc, mult, tinyaot_mve_shift_left(shift), tinyaot_mve_shift_right(shift));
}

/* tinyaot_requantize on four lanes with one multiplier and shift for all of them (per-tensor quantization): the
   scalar-operand forms VQSHL (register), VQRDMULH (scalar) and VRSHL (register) need no vector of shifts. */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_requantize_n(int32x4_t acc, int32_t mult, int32_t shift)
{
    if (shift > 0) {
        acc = vqshlq_r_s32(acc, shift);
    }
    int32x4_t hi = vqrdmulhq_n_s32(acc, mult);
    if (shift < 0) {
        hi = vqaddq_s32(hi, vshrq_n_s32(hi, 31)); /* -1 on negative lanes: ties away from zero */
        hi = vrshlq_n_s32(hi, shift);
    }
    return hi;
}

/* The kernel epilogue on four lanes: add the output zero point (saturating, so no lane can wrap even for absurd
   scales; for int8 layers the requantized value is within a few hundred and the add is exact, as in
   tinyaot_requantize_s8) and clamp to the activation range. The result lies in [act_min, act_max] within int8,
   ready for a narrowing store (vstrbq_s32 / vstrbq_p_s32). */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_offset_clamp(int32x4_t v, int32_t out_offset, int32_t act_min,
                                                      int32_t act_max)
{
    v = vqaddq_n_s32(v, out_offset);
    v = vmaxq_s32(v, vdupq_n_s32(act_min));
    return vminq_s32(v, vdupq_n_s32(act_max));
}

/* Per-channel requantization of four consecutive channels starting at channel c of n_ch (tail lanes past n_ch are
   loaded as zero and must not be stored: use the same predicate, vctp32q(n_ch - c), for the store). */
TINYAOT_MVE_INLINE int32x4_t tinyaot_mve_requantize_s8x4(int32x4_t acc, const int32_t *mult, const int32_t *shift,
                                                         mve_pred16_t p, int32_t out_offset, int32_t act_min,
                                                         int32_t act_max)
{
    const int32x4_t m = vldrwq_z_s32(mult, p);
    const int32x4_t s = vldrwq_z_s32(shift, p);
    return tinyaot_mve_offset_clamp(tinyaot_mve_requantize(acc, m, s), out_offset, act_min, act_max);
}

#else
#define TINYAOT_USE_MVE 0
#endif

#endif /* TINYAOT_MVE_SUPPORT_H */
