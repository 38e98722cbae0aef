/*
 * What the two 3x3 depthwise paths share: tinyaot_depthwise_conv_s8_3x3.c (dense weights, its table prepared by
 * tinyaot/ops/depthwise3x3.py) and tinyaot_dw_quads_3x3 in tinyaot_nn_compressed.h (compressed weights, decoded
 * into a tile; its requantization constants computed at run time). One tap of four channels, the scheduling
 * attribute their unrolled tap loops need, and the short requantization, so both compute the same integers the
 * same way.
 *
 * Short requantization. For a right shift e in 1..30, |acc| < 2^30 and |acc| + 2^(e-1) + 128 * 2^e < 2^31 (each
 * caller checks these, with |acc| <= |bias| + 9 * 255 * 128 for any 3x3 window of int8 weights and inputs offset
 * into -255..255):
 *   TFLite's SaturatingRoundingDoublingHighMul(acc, m) = floor((acc*m + 2^30) / 2^31) = floor((2acc*m + 2^31) /
 *   2^32), the rounding high multiply of 2acc (SMMULR; 2acc fits int32 since |acc| < 2^30, and the saturating
 *   case needs acc = -2^31), of magnitude at most |acc| since m < 2^31;
 *   RoundingDivideByPOT(h, e) + output_offset, ties away from zero, = floor((h + radd - [h < 0]) / 2^e) with
 *   radd = 2^(e-1) + output_offset * 2^e (for h >= 0 round-half-up; for h < 0 the -1 turns a tie's floor away
 *   from zero and leaves other cases alone; output_offset * 2^e inside the floor adds output_offset outside it).
 * acc's sign stands for h's: they differ only when acc < 0 and h = 0, and there the -1 changes nothing, since
 * radd - 1 and radd (= 2^(e-1) mod 2^e) floor to the same multiple of 2^e. So the rounding constant
 * t = radd - [acc < 0] is ready before the multiply, and SMMLAR adds it to the rounded high product in the same
 * instruction: t + floor((2acc*m + 2^31) / 2^32), which fits int32 by the bounds. The result is before the clamp.
 */
#ifndef TINYAOT_DW3_SUPPORT_H
#define TINYAOT_DW3_SUPPORT_H

#include "tinyaot_nn_support.h"

/* GCC's pre-register-allocation scheduler hoists the nine taps' loads together and then spills accumulators and
   unpacked lanes (about 30 extra loads and stores per group of four channels on a Cortex-M4); without it the taps
   stay in order and fit the registers. */
#define TINYAOT_DW3_NOSCHED TINYAOT_NO_SCHEDULE

/* One tap of four channels into the caller's accumulators a0..a3: the four input bytes at p (channels c0..c3 of
   one pixel) times the four weights at wp. DSP: one word each, lanes (c0, c2) and (c1, c3) unpacked with the input
   offset added (SXTAB16 with the caller's off2, the offset in both halves) and multiplied lane by lane (SMLABB /
   SMLATT); plain C: byte by byte with the caller's in_off. Each product is at most 255 * 128 in magnitude. */
#if TINYAOT_USE_DSP
#define TINYAOT_DW3_MAC4(p, wp)                                                                                        \
    do {                                                                                                               \
        const int32_t xv_ = tinyaot_read_s8x4(p);                                                                      \
        const int32_t wv_ = tinyaot_read_s8x4(wp);                                                                     \
        const int32_t x02_ = __sxtab16(off2, xv_);                                                                     \
        const int32_t x13_ = tinyaot_sxtab16_ror8(off2, xv_);                                                          \
        const int32_t w02_ = __sxtb16(wv_);                                                                            \
        const int32_t w13_ = tinyaot_sxtb16_ror8(wv_);                                                                 \
        a0 = __smlabb(x02_, w02_, a0);                                                                                 \
        a2 = __smlatt(x02_, w02_, a2);                                                                                 \
        a1 = __smlabb(x13_, w13_, a1);                                                                                 \
        a3 = __smlatt(x13_, w13_, a3);                                                                                 \
    } while (0)
#else
#define TINYAOT_DW3_MAC4(p, wp)                                                                                        \
    do {                                                                                                               \
        const int8_t *xp_ = (p);                                                                                       \
        const int8_t *wp_ = (wp);                                                                                      \
        a0 += ((int32_t)xp_[0] + in_off) * wp_[0];                                                                     \
        a1 += ((int32_t)xp_[1] + in_off) * wp_[1];                                                                     \
        a2 += ((int32_t)xp_[2] + in_off) * wp_[2];                                                                     \
        a3 += ((int32_t)xp_[3] + in_off) * wp_[3];                                                                     \
    } while (0)
#endif

/* t + floor((x * m + 2^31) / 2^32): SMMLAR on DSP cores under GCC; elsewhere the same value from one SMLAL-shaped
   int64 sum, (t + hi) * 2^32 + low with t + hi in int32 by the callers' bounds, so no int64 step overflows. */
static TINYAOT_ALWAYS_INLINE int32_t tinyaot_dw3_mmlar(int32_t x, int32_t m, int32_t t)
{
#if TINYAOT_USE_DSP && TINYAOT_GNU
    int32_t v;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(v) : "r"(x), "r"(m), "r"(t));
    return v;
#else
    return (int32_t)(((int64_t)t * 4294967296LL + 2147483648LL + (int64_t)x * m) >> 32);
#endif
}

/* RoundingDivideByPOT(SRDHM(acc, mult), e) + output_offset, before the clamp, with radd = 2^(e-1) +
   output_offset * 2^e, under the bounds above (|acc| < 2^30: the doubled value fits int32; a channel of
   multiplier 0 may exceed it, its product is 0 whatever the doubled bits). */
static TINYAOT_ALWAYS_INLINE int32_t tinyaot_dw3_short_rq(int32_t acc, int32_t mult, int32_t radd,
                                                                          int32_t e)
{
    const int32_t acc2 = (int32_t)((uint32_t)acc << 1);
    return tinyaot_dw3_mmlar(acc2, mult, radd + (acc >> 31)) >> e;
}

#endif /* TINYAOT_DW3_SUPPORT_H */
