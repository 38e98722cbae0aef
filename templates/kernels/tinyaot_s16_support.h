/*
 * tinyaot 16x8 kernels (int16 activations, int8 weights): the shared requantization helpers.
 * Their numpy twins are in tinyaot/core/quant16.py and tinyaot/ops/s16.py.
 */
#ifndef TINYAOT_S16_SUPPORT_H
#define TINYAOT_S16_SUPPORT_H

#include "tinyaot_nn.h"

/* floor(v / 2^s) for 0 <= s <= 62 without shifting a negative value (implementation-defined in C99):
   for v < 0, floor(v / 2^s) = -floor((-v - 1) / 2^s) - 1, and -v - 1 = -(v + 1) cannot overflow. */
static inline int64_t tinyaot_floor_shift_s64(int64_t v, int32_t s)
{
    return v >= 0 ? (v >> s) : -((-(v + 1)) >> s) - 1;
}

/* TFLite's int64 MultiplyByQuantizedMultiplier (CMSIS-NN's arm_nn_requantize_s64), then the clamp:
   floor((acc * reduced_mult + 2^(total_shift - 1)) / 2^total_shift). Bounds: |acc| < 2^47 (checked per layer at
   compile time, tinyaot/compress/bounds.py), 0 <= reduced_mult <= 2^15 and 1 <= total_shift <= 62
   (tinyaot/core/quant16.py), so |acc * reduced_mult| < 2^62 and the rounding term 2^61 keep the sum in int64. */
static inline int16_t tinyaot_requantize_s16(int64_t acc, int32_t reduced_mult, int32_t total_shift, int32_t act_min,
                                             int32_t act_max)
{
    const int64_t v = acc * (int64_t)reduced_mult + ((int64_t)1 << (total_shift - 1));
    const int64_t q = tinyaot_floor_shift_s64(v, total_shift);
    return (int16_t)(q < act_min ? act_min : (q > act_max ? act_max : q));
}

/* int16 clamp of an int32 value */
static inline int16_t tinyaot_clamp_s16(int32_t v, int32_t act_min, int32_t act_max)
{
    return (int16_t)tinyaot_clamp_i32(v, act_min, act_max);
}

#endif /* TINYAOT_S16_SUPPORT_H */
