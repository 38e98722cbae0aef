/*
 * tinyaot 16x8 kernels (int16 activations, int8 weights): the shared requantization helpers.
 * Their numpy twins are in tinyaot/core/quant16.py and the 16-bit op files (tinyaot/ops/conv_s16.py, ...).
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
   compile time, tinyaot/compress/bounds.py), 0 <= reduced_mult <= 2^15 and -31 <= total_shift <= 62
   (tinyaot/core/quant16.py), so |acc * reduced_mult| < 2^62 and the rounding term 2^61 keep the sum in int64.
   total_shift <= 0 is a left shift (a layer whose calibrated output range is ~0): acc * reduced_mult is clipped to
   +-2^15 first (any such value saturates the int16 clamp either way), so the product stays below 2^46. */
static inline int16_t tinyaot_requantize_s16(int64_t acc, int32_t reduced_mult, int32_t total_shift, int32_t act_min,
                                             int32_t act_max)
{
    int64_t q;
    if (total_shift >= 1) {
        q = tinyaot_floor_shift_s64(acc * (int64_t)reduced_mult + ((int64_t)1 << (total_shift - 1)), total_shift);
    } else {
        q = acc * (int64_t)reduced_mult;
        q = q > 32768 ? 32768 : (q < -32768 ? -32768 : q);
        q *= (int64_t)1 << -total_shift;
    }
    return (int16_t)(q < act_min ? act_min : (q > act_max ? act_max : q));
}

/* The s16 elementwise ops' one-rounding requantization (tinyaot/core/quant16.py requantize_exact):
   floor((v * mult + 2^(total_shift - 1)) / 2^total_shift), unclamped. Bounds: |v| <= 2^31 (each caller states why),
   0 <= mult < 2^31 and 1 <= total_shift <= 62 (checked by the kernels), so |v * mult| < 2^62 and the sum with the
   rounding term (<= 2^61) stays inside int64. */
static inline int64_t tinyaot_requantize_exact_s64(int64_t v, int32_t mult, int32_t total_shift)
{
    return tinyaot_floor_shift_s64(v * (int64_t)mult + ((int64_t)1 << (total_shift - 1)), total_shift);
}

/* int16 clamp of an int64 value */
static inline int16_t tinyaot_clamp64_s16(int64_t v, int32_t act_min, int32_t act_max)
{
    return (int16_t)(v < act_min ? act_min : (v > act_max ? act_max : v));
}

/* Most terms an int32 partial sum of int16 x int8 products may take: 516 * 32768 * 127 = 2,147,352,576 < 2^31 - 1.
   The kernels sum runs of at most this many products in int32 and add each run to their int64 accumulator. */
#define TINYAOT_S16_INT32_TERMS 516

#if TINYAOT_USE_DSP
/* Four int16 inputs as the SMLAD lane pairs (x0, x2) and (x1, x3), matching SXTB16's unpacking of four int8 weights
   into (w0, w2) and (w1, w3): the pack-halfword forms GCC turns into PKHBT and PKHTB. */
static inline void tinyaot_s16x4_pairs(const int16_t *x, int32_t *x02, int32_t *x13)
{
    const uint32_t a = (uint32_t)tinyaot_read_s16x2(x);
    const uint32_t b = (uint32_t)tinyaot_read_s16x2(x + 2);
    *x02 = (int32_t)((a & 0xFFFFu) | (b << 16));
    *x13 = (int32_t)((b & 0xFFFF0000u) | (a >> 16));
}

/* acc + x0 w0 + x1 w1 + x2 w2 + x3 w3 with two SMLADs (each adds two 16 x 16 products to the int32 sum; every
   partial sum is one of at most TINYAOT_S16_INT32_TERMS products, so none overflows) */
static inline int32_t tinyaot_smlad4_s16_s8(int32_t x02, int32_t x13, const int8_t *w, int32_t acc)
{
    const int32_t wv = tinyaot_read_s8x4(w);
    acc = __smlad(x02, __sxtb16(wv), acc);
    return __smlad(x13, tinyaot_sxtb16_ror8(wv), acc);
}
#endif

/* sum_{i < n} x[i] * w[i] for n <= TINYAOT_S16_INT32_TERMS (see above: no int32 overflow), two at a time */
static inline int32_t tinyaot_dot_s16_s8(const int16_t *x, const int8_t *w, int32_t n)
{
    int32_t s0 = 0, s1 = 0, i = 0;
#if TINYAOT_USE_DSP
    for (; i + 4 <= n; i += 4) {
        int32_t x02, x13;
        tinyaot_s16x4_pairs(x + i, &x02, &x13);
        s0 = tinyaot_smlad4_s16_s8(x02, x13, w + i, s0);
    }
#endif
    for (; i + 2 <= n; i += 2) {
        s0 += (int32_t)x[i] * w[i];
        s1 += (int32_t)x[i + 1] * w[i + 1];
    }
    if (i < n) {
        s0 += (int32_t)x[i] * w[i];
    }
    return s0 + s1; /* |s0| + |s1| is the bound above, so the sum fits too */
}

/* int64 sum_{i < n} x[i] * w[i] for any n: int32 runs of TINYAOT_S16_INT32_TERMS */
static inline int64_t tinyaot_dot_s16_s8_long(const int16_t *x, const int8_t *w, int32_t n)
{
    int64_t acc = 0;
    while (n > 0) {
        const int32_t run = n < TINYAOT_S16_INT32_TERMS ? n : TINYAOT_S16_INT32_TERMS;
        acc += tinyaot_dot_s16_s8(x, w, run);
        x += run;
        w += run;
        n -= run;
    }
    return acc;
}

/* int16 clamp of an int32 value */
static inline int16_t tinyaot_clamp_s16(int32_t v, int32_t act_min, int32_t act_max)
{
    return (int16_t)tinyaot_clamp_i32(v, act_min, act_max);
}

#endif /* TINYAOT_S16_SUPPORT_H */
