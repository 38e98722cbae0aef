/*
 * Helpers shared by the "fold" kernels (tinyaot_convolve_s8_fold.c, tinyaot_fully_connected_s8_fold.c): a shorter
 * requantization for the common case, same integers as tinyaot_requantize_s8.
 */
#ifndef TINYAOT_FOLD_SUPPORT_H
#define TINYAOT_FOLD_SUPPORT_H

#include "tinyaot_nn_support.h"

/*
 * tinyaot_requantize_s8 (TFLite's double rounding), with a shorter path on DSP cores for right shifts e = -shift in
 * [1, 23] (nearly every layer): h = SRDHM(acc, mult) (mult is never -2^31, so no saturating case), then
 * round(h / 2^e) ties away from zero as floor((h + 2^(e-1) - [h < 0]) / 2^e): for h >= 0 that is rounding half up,
 * for h = -m < 0 it is -floor((m + 2^(e-1)) / 2^e), both away from zero. The add of 2^(e-1) saturates (QADD): it
 * saturates only when h > 2^31 - 1 - 2^(e-1), whose exact result (2^(31-e) or more) and the saturated one
 * (2^(31-e) - 1) are both at least 255 for e <= 23, so both clamp to the same act_max (|out_offset| <= 128). The
 * subtraction of [h < 0] cannot overflow: for h < 0 the sum is below 2^(e-1). Other shifts: the general routine.
 */
static inline int8_t tinyaot_fold_requantize_s8(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset,
                                                int32_t act_min, int32_t act_max)
{
#if TINYAOT_USE_DSP
    const uint32_t e1 = (uint32_t)(-shift) - 1u; /* e - 1; shift > 0 wraps to a large value */
    if (e1 < 23u) {
        const int32_t h = (int32_t)(((int64_t)acc * (int64_t)mult + ((int64_t)1 << 30)) >> 31);
        const int32_t r = (__qadd(h, (int32_t)1 << e1) + (h >> 31)) >> (e1 + 1u);
        return (int8_t)tinyaot_clamp_i32(r + out_offset, act_min, act_max);
    }
#endif
    return tinyaot_requantize_s8(acc, mult, shift, out_offset, act_min, act_max);
}

#endif /* TINYAOT_FOLD_SUPPORT_H */
