/*
 * tinyaot int8 kernels: fixed-point helpers shared by the kernels (C twins of tinyaot/ops/fixedpoint.py).
 *
 * Arithmetic is TFLite's: requantization is SaturatingRoundingDoublingHighMul (round to nearest, ties toward
 * +infinity) followed by RoundingDivideByPOT (round to nearest, ties away from zero). The CMSIS-NN/TFLite test
 * vectors are only matched bit for bit with these two roundings, so no single-rounding shortcut is taken.
 *
 * Assumptions (true of GCC and Clang on every Cortex-M and on the host): int32_t is two's complement and `>>` of a
 * negative signed value is an arithmetic (flooring) shift.
 *
 * Inner products: every kernel computes sum((x + input_offset) * w) in int32. With x + input_offset in
 * [-255, 255] and w in [-128, 127] each product is at most 32640 in magnitude, so an int32 accumulator holds
 * 65 000 products plus a bias without overflow, far more than any layer's kh*kw*cin on a microcontroller.
 *
 * When the core has the DSP extension (Cortex-M4/M7/M33/M55: __ARM_FEATURE_DSP) the inner products use SXTB16/SXTAB16
 * to unpack four int8 values into two pairs of int16 and SMLAD to multiply-accumulate a pair per instruction. Both
 * paths compute the same exact integer sum (no intermediate can wrap, see above), so they are bit-identical.
 * Define TINYAOT_NO_DSP (or TINYAOT_PORTABLE, see tinyaot_compiler.h) to force the plain C path.
 */
#ifndef TINYAOT_NN_SUPPORT_H
#define TINYAOT_NN_SUPPORT_H

#include <stdint.h>
#include <string.h>

#include "tinyaot_compiler.h"
#include "tinyaot_nn_types.h"

#if defined(__ARM_FEATURE_DSP) && !defined(__ARM_BIG_ENDIAN) && !defined(TINYAOT_NO_DSP) && !defined(TINYAOT_PORTABLE)
#define TINYAOT_USE_DSP 1
#include <arm_acle.h>
#else
#define TINYAOT_USE_DSP 0
#endif

#define TINYAOT_INT32_MAX ((int32_t)0x7FFFFFFF)
#define TINYAOT_INT32_MIN (-TINYAOT_INT32_MAX - 1)

static inline int32_t tinyaot_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int32_t tinyaot_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }

static inline int32_t tinyaot_clamp_i32(int32_t x, int32_t lo, int32_t hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* SSAT #8 (ARMv7-M and up, GCC or Clang: callers test __ARM_FEATURE_SAT && TINYAOT_GNU). GCC's builtin directly:
 * GCC 12's arm_acle.h __ssat macro converts the builtin's unsigned result to int32_t implicitly, a -Wsign-conversion
 * warning inside the macro that the caller cannot cast away. The same instruction either way. */
#if defined(__ARM_FEATURE_SAT) && TINYAOT_GCC
#define TINYAOT_SSAT8(v) ((int32_t)__builtin_arm_ssat((v), 8))
#elif defined(__ARM_FEATURE_SAT) && TINYAOT_GNU
#define TINYAOT_SSAT8(v) __ssat((v), 8)
#endif

/*
 * SaturatingRoundingDoublingHighMul: round(a * b / 2^31) to nearest, ties toward +infinity, as in gemmlowp/TFLite
 * (there: a nudge of +2^30 or 1 - 2^30 by sign, then a truncating division). The product of two int32 is at most
 * 2^62 in magnitude, so the int64 product plus 2^30 cannot overflow. The only result outside int32,
 * (-2^31) * (-2^31) / 2^31 = 2^31, saturates.
 */
static inline int32_t tinyaot_srdhm(int32_t a, int32_t b)
{
    if (a == TINYAOT_INT32_MIN && b == TINYAOT_INT32_MIN) {
        return TINYAOT_INT32_MAX;
    }
    /* Equivalent form that compiles to SMULL + ADDS/ADC + two shifts: for a negative product -(k * 2^31 + r),
       truncating (p + 1 - 2^30) / 2^31 and flooring (p + 2^30) / 2^31 both give -k - [r > 2^30]. */
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
}

/*
 * round(x / 2^exponent), ties away from zero, for exponent in [0, 31]: a flooring shift, plus one when the
 * discarded bits exceed half (for negative x: reach half, so that ties move away from zero, not up).
 */
static inline int32_t tinyaot_rdbpot(int32_t x, int32_t exponent)
{
    const int32_t mask = (int32_t)(((uint32_t)1 << exponent) - 1u);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/*
 * x * 2^exponent saturated to int32, exponent in [0, 31]. The bounds are written so that no shift of a negative
 * value is needed: x * 2^e fits exactly when -2^(31-e) <= x <= (2^31-1) >> e.
 */
static inline int32_t tinyaot_sat_shl(int32_t x, int32_t exponent)
{
    const int32_t hi = TINYAOT_INT32_MAX >> exponent;
    const int32_t lo = -hi - 1;
    if (x > hi) {
        return TINYAOT_INT32_MAX;
    }
    if (x < lo) {
        return TINYAOT_INT32_MIN;
    }
    return (int32_t)((uint32_t)x << exponent);
}

/*
 * TFLite's MultiplyByQuantizedMultiplier: acc * mult * 2^(shift - 31), two roundings. A positive shift is applied
 * before the high multiply; TFLite does that shift in int32 where overflow is undefined, here it saturates (the
 * result equals TFLite's wherever TFLite's is defined, and tinyaot/ops/fixedpoint.py does the same).
 * mult must not be -2^31 (quantized multipliers, in [2^30, 2^31), and their negations never are): then acc * mult
 * can never be the one saturating case of SRDHM (both operands -2^31), so that check is left out of this
 * per-output path and the rounding is the same floor((p + 2^30) / 2^31) as in tinyaot_srdhm.
 */
static inline int32_t tinyaot_requantize(int32_t acc, int32_t mult, int32_t shift)
{
    int32_t right = -shift;
    if (shift > 0) {
        acc = tinyaot_sat_shl(acc, shift);
        right = 0;
    }
    const int32_t hi = (int32_t)(((int64_t)acc * (int64_t)mult + ((int64_t)1 << 30)) >> 31);
    return tinyaot_rdbpot(hi, right);
}

/* The common kernel epilogue: rescale, add the output zero point, clamp to the activation range (within int8). */
static inline int8_t tinyaot_requantize_s8(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset,
                                           int32_t act_min, int32_t act_max)
{
    /* |requantized| <= 2^31 - 1 only for absurd scales; for int8 layers it is within a few hundred, so adding the
       offset (|offset| <= 128) cannot overflow. */
    const int32_t v = tinyaot_requantize(acc, mult, shift) + out_offset;
    return (int8_t)tinyaot_clamp_i32(v, act_min, act_max);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Inner products. x + x_off must lie in int16 (true for int8 x and |x_off| <= 128), see the overflow note above.
 * ------------------------------------------------------------------------------------------------------------- */
#if TINYAOT_USE_DSP
/* Four bytes copied: a 4-byte memcpy is the defined way to load or store possibly unaligned data and compiles to a
   single LDR or STR (Cortex-M3 and up access unaligned words). GCC's builtin is named explicitly because under
   -ffreestanding plain memcpy is an out-of-line call, which would cost more than the SIMD saves. */
static inline void tinyaot_copy4(void *dst, const void *src)
{
#if TINYAOT_GNU
    __builtin_memcpy(dst, src, 4);
#else
    memcpy(dst, src, 4);
#endif
}

/* Four int8 values as one little-endian word. */
static inline int32_t tinyaot_read_s8x4(const int8_t *p)
{
    int32_t v;
    tinyaot_copy4(&v, p);
    return v;
}

/* Two int16 values as one word (lane 0 = p[0]), and back. */
static inline int32_t tinyaot_read_s16x2(const int16_t *p)
{
    int32_t v;
    tinyaot_copy4(&v, p);
    return v;
}

static inline void tinyaot_write_s16x2(int16_t *p, int32_t v)
{
    tinyaot_copy4(p, &v);
}

/* Bytes 1 and 3 sign-extended into the two 16-bit lanes: SXTB16 with its built-in rotation. GCC does not fold a
   rotate into the SXTB16/SXTAB16 builtins, and a separate shift costs an instruction per word in every inner loop;
   the asm is not volatile, so the compiler still schedules and eliminates it like any expression. */
#if TINYAOT_GNU
static inline int32_t tinyaot_sxtb16_ror8(int32_t x)
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}
static inline int32_t tinyaot_sxtab16_ror8(int32_t a, int32_t x)
{
    int32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
    return r;
}
#else
/* Without GNU inline assembly: the rotation as a shift (bytes 1 and 3 move to 0 and 2; what lands in bytes 1 and 3
   is not read), one instruction more per word. */
static inline int32_t tinyaot_sxtb16_ror8(int32_t x) { return __sxtb16((int32_t)((uint32_t)x >> 8)); }
static inline int32_t tinyaot_sxtab16_ror8(int32_t a, int32_t x) { return __sxtab16(a, (int32_t)((uint32_t)x >> 8)); }
#endif

/* x_off in both 16-bit lanes, for SXTAB16 (sign-extend bytes 0 and 2 and add lane-wise). */
static inline int32_t tinyaot_dup16(int32_t v)
{
    return (int32_t)(((uint32_t)v & 0xFFFFu) * 0x00010001u);
}
#endif

/* acc + sum_{i<n} (x[i] + x_off) * w[i] */
static inline int32_t tinyaot_dot_s8(const int8_t *x, const int8_t *w, int32_t n, int32_t x_off, int32_t acc)
{
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(x_off);
    for (; n >= 4; n -= 4) {
        const int32_t xv = tinyaot_read_s8x4(x);
        const int32_t wv = tinyaot_read_s8x4(w);
        x += 4;
        w += 4;
        /* lanes (x0, x2) and (x1, x3), offset added; the filter unpacked the same way so lanes pair up */
        const int32_t x02 = __sxtab16(off2, xv);
        const int32_t x13 = tinyaot_sxtab16_ror8(off2, xv);
        acc = __smlad(x02, __sxtb16(wv), acc);
        acc = __smlad(x13, tinyaot_sxtb16_ror8(wv), acc);
    }
#else
    for (; n >= 4; n -= 4) {
        acc += ((int32_t)x[0] + x_off) * w[0];
        acc += ((int32_t)x[1] + x_off) * w[1];
        acc += ((int32_t)x[2] + x_off) * w[2];
        acc += ((int32_t)x[3] + x_off) * w[3];
        x += 4;
        w += 4;
    }
#endif
    for (; n > 0; n--) {
        acc += ((int32_t)*x++ + x_off) * *w++;
    }
    return acc;
}

/* Two filters against one input run (the input is loaded and offset once): acc[j] += sum (x[i] + x_off) * wj[i] */
static inline void tinyaot_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int32_t n, int32_t x_off,
                                   int32_t *acc0, int32_t *acc1)
{
    int32_t a0 = *acc0;
    int32_t a1 = *acc1;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(x_off);
    for (; n >= 4; n -= 4) {
        const int32_t xv = tinyaot_read_s8x4(x);
        x += 4;
        const int32_t x02 = __sxtab16(off2, xv);
        const int32_t x13 = tinyaot_sxtab16_ror8(off2, xv);
        const int32_t wa = tinyaot_read_s8x4(w0);
        const int32_t wb = tinyaot_read_s8x4(w1);
        w0 += 4;
        w1 += 4;
        a0 = __smlad(x02, __sxtb16(wa), a0);
        a0 = __smlad(x13, tinyaot_sxtb16_ror8(wa), a0);
        a1 = __smlad(x02, __sxtb16(wb), a1);
        a1 = __smlad(x13, tinyaot_sxtb16_ror8(wb), a1);
    }
#else
    for (; n >= 2; n -= 2) {
        const int32_t xa = (int32_t)x[0] + x_off;
        const int32_t xb = (int32_t)x[1] + x_off;
        x += 2;
        a0 += xa * w0[0] + xb * w0[1];
        a1 += xa * w1[0] + xb * w1[1];
        w0 += 2;
        w1 += 2;
    }
#endif
    for (; n > 0; n--) {
        const int32_t xa = (int32_t)*x++ + x_off;
        a0 += xa * *w0++;
        a1 += xa * *w1++;
    }
    *acc0 = a0;
    *acc1 = a1;
}

/*
 * Two input runs (two output pixels) against two filters (two output channels): every load is used twice.
 * acc[2*p + j] += sum (xp[i] + x_off) * wj[i]
 */
static inline void tinyaot_dot2x2_s8(const int8_t *xa, const int8_t *xb, const int8_t *w0, const int8_t *w1,
                                     int32_t n, int32_t x_off, int32_t acc[4])
{
    int32_t a00 = acc[0];
    int32_t a01 = acc[1];
    int32_t a10 = acc[2];
    int32_t a11 = acc[3];
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(x_off);
    for (; n >= 4; n -= 4) {
        const int32_t wv0 = tinyaot_read_s8x4(w0);
        const int32_t wv1 = tinyaot_read_s8x4(w1);
        w0 += 4;
        w1 += 4;
        const int32_t w0_02 = __sxtb16(wv0);
        const int32_t w0_13 = tinyaot_sxtb16_ror8(wv0);
        const int32_t w1_02 = __sxtb16(wv1);
        const int32_t w1_13 = tinyaot_sxtb16_ror8(wv1);
        const int32_t xva = tinyaot_read_s8x4(xa);
        xa += 4;
        int32_t x02 = __sxtab16(off2, xva);
        int32_t x13 = tinyaot_sxtab16_ror8(off2, xva);
        a00 = __smlad(x02, w0_02, a00);
        a00 = __smlad(x13, w0_13, a00);
        a01 = __smlad(x02, w1_02, a01);
        a01 = __smlad(x13, w1_13, a01);
        const int32_t xvb = tinyaot_read_s8x4(xb);
        xb += 4;
        x02 = __sxtab16(off2, xvb);
        x13 = tinyaot_sxtab16_ror8(off2, xvb);
        a10 = __smlad(x02, w0_02, a10);
        a10 = __smlad(x13, w0_13, a10);
        a11 = __smlad(x02, w1_02, a11);
        a11 = __smlad(x13, w1_13, a11);
    }
#endif
    for (; n > 0; n--) {
        const int32_t pa = (int32_t)*xa++ + x_off;
        const int32_t pb = (int32_t)*xb++ + x_off;
        const int32_t f0 = *w0++;
        const int32_t f1 = *w1++;
        a00 += pa * f0;
        a01 += pa * f1;
        a10 += pb * f0;
        a11 += pb * f1;
    }
    acc[0] = a00;
    acc[1] = a01;
    acc[2] = a10;
    acc[3] = a11;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Window clipping for conv and pooling: the taps k in [0, k_size) with 0 <= base + k * dilation < size, returned
 * as [*k_begin, *k_end) so that kernels loop over valid taps only (padding contributes nothing).
 * ------------------------------------------------------------------------------------------------------------- */
static inline void tinyaot_valid_taps(int32_t base, int32_t k_size, int32_t dilation, int32_t size, int32_t *k_begin,
                                      int32_t *k_end)
{
    int32_t b = 0;
    int32_t e = k_size;
    if (base < 0) {
        b = (-base + dilation - 1) / dilation; /* first k with base + k*d >= 0 */
    }
    if (base + (k_size - 1) * dilation >= size) {
        e = size - base <= 0 ? 0 : (size - base + dilation - 1) / dilation; /* first k with base + k*d >= size */
    }
    if (e < b) {
        e = b;
    }
    *k_begin = b;
    *k_end = e;
}

/* The sum of one channel over a clipped window: `rows` x `cols` taps from r, rows `row_skip` bytes apart, taps
   `ch` bytes apart (NHWC). |sum| <= 128 * rows * cols: int32 is exact for any window that fits in memory. */
static inline int32_t tinyaot_window_sum_s8(const int8_t *r, int32_t rows, int32_t cols, int32_t row_skip,
                                            int32_t ch)
{
    int32_t s = 0;
    int32_t ky;
    for (ky = 0; ky < rows; ky++, r += row_skip) {
        const int8_t *p = r;
        int32_t kx;
        for (kx = 0; kx < cols; kx++, p += ch) {
            s += *p;
        }
    }
    return s;
}

/* sum / count (count > 0) rounded to nearest, ties away from zero, as TFLite's average pooling rounds: C division
   truncates toward zero, so half the count is added to or subtracted from the sum first. */
static inline int32_t tinyaot_div_round_away(int32_t sum, int32_t count)
{
    const int32_t half = count / 2;
    return sum > 0 ? (sum + half) / count : (sum - half) / count;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Softmax fixed point (gemmlowp's, as TFLite's integer softmax uses it). Qm.n below means m integer bits and n
 * fractional bits in an int32. Constants are round(value * 2^fractional_bits).
 * ------------------------------------------------------------------------------------------------------------- */
#define TINYAOT_SOFTMAX_DIFF_INT_BITS 5  /* scaled input difference: Q5.26, exp argument in [-32, 0] */
#define TINYAOT_SOFTMAX_ACCUM_INT_BITS 12 /* sum of exps: Q12.19, up to 4095 terms of value <= 1 */

/* exp(a) for a in [-1/4, 0) (Q0.31), result Q0.31: Taylor series around -1/8 up to x^4, x = a + 1/8. |x| <= 1/8, so
   the powers of x and their sums are small and plain int32 additions cannot overflow. */
static inline int32_t tinyaot_exp_on_interval_m025_0(int32_t a)
{
    const int32_t exp_m1_8 = 1895147668; /* exp(-1/8) in Q0.31 */
    const int32_t one_third = 715827883; /* 1/3 in Q0.31 */
    const int32_t x = a + (1 << 28);     /* + 1/8 */
    const int32_t x2 = tinyaot_srdhm(x, x);
    const int32_t x3 = tinyaot_srdhm(x2, x);
    const int32_t x4 = tinyaot_srdhm(x2, x2);
    const int32_t x4_over_4 = tinyaot_rdbpot(x4, 2);
    /* x^4/24 + x^3/6 + x^2/2 = ((x^4/4 + x^3) / 3 + x^2) / 2 */
    const int32_t poly = tinyaot_rdbpot(tinyaot_srdhm(x4_over_4 + x3, one_third) + x2, 1);
    return exp_m1_8 + tinyaot_srdhm(exp_m1_8, x + poly);
}

/* exp(a) for a <= 0 in Q5.26, result Q0.31 (exp(0) = 1 is returned as INT32_MAX, the largest Q0.31 value). The
   argument is split into a remainder in [-1/4, 0) and a multiple of 1/4; each set bit 2^k of the latter multiplies
   in the constant exp(-2^k). Bits above 2^4 cannot be set in Q5.26, so no range clamp is needed. */
static inline int32_t tinyaot_exp_on_negative_values(int32_t a)
{
    static const int32_t exp_pow2[7] = {
        1672461947, /* exp(-1/4) */
        1302514674, /* exp(-1/2) */
        790015084,  /* exp(-1)   */
        290630308,  /* exp(-2)   */
        39332535,   /* exp(-4)   */
        720401,     /* exp(-8)   */
        242,        /* exp(-16)  */
    };
    const int32_t frac_bits = 31 - TINYAOT_SOFTMAX_DIFF_INT_BITS; /* 26 */
    const int32_t one_quarter = (int32_t)1 << (frac_bits - 2);
    const int32_t a_mod_q_minus_q = (a & (one_quarter - 1)) - one_quarter; /* in [-1/4, 0) */
    /* Q5.26 -> Q0.31: a left shift by 5; the value is within [-1/4, 0) so this never saturates. */
    int32_t result = tinyaot_exp_on_interval_m025_0(tinyaot_sat_shl(a_mod_q_minus_q, TINYAOT_SOFTMAX_DIFF_INT_BITS));
    const int32_t remainder = a_mod_q_minus_q - a; /* >= 0, a multiple of 1/4 */
    int32_t k;
    for (k = 0; k < 7; k++) {
        if (remainder & ((int32_t)1 << (frac_bits - 2 + k))) {
            result = tinyaot_srdhm(result, exp_pow2[k]);
        }
    }
    return a == 0 ? TINYAOT_INT32_MAX : result;
}

/* 1/(1 + a) for a in [0, 1) (Q0.31), result Q0.31. With d = (1 + a)/2 in [1/2, 1), 1/d in (1, 2] is refined by three
   Newton-Raphson steps x <- x + x(1 - d x) from x0 = 48/17 - 32/17 d, carried in Q2.29; 1/(1 + a) = x/2. */
static inline int32_t tinyaot_one_over_one_plus_x(int32_t a)
{
    /* (a + 1) / 2 rounded half away, where "1" is INT32_MAX; a >= 0 so the int64 sum is positive */
    const int32_t half_den = (int32_t)(((int64_t)a + TINYAOT_INT32_MAX + 1) / 2);
    const int32_t c48_17 = 1515870810;     /* 48/17 in Q2.29 */
    const int32_t cm32_17 = -1010580540;   /* -32/17 in Q2.29 */
    const int32_t one_q29 = (int32_t)1 << 29;
    int32_t x = c48_17 + tinyaot_srdhm(half_den, cm32_17);
    int i;
    for (i = 0; i < 3; i++) {
        const int32_t half_den_times_x = tinyaot_srdhm(half_den, x);       /* Q2.29 */
        const int32_t one_minus = one_q29 - half_den_times_x;              /* Q2.29 */
        x = x + tinyaot_sat_shl(tinyaot_srdhm(x, one_minus), 2);           /* Q4.27 -> Q2.29 */
    }
    /* 1/(1+a) = x/2: the raw Q2.29 value read as Q1.30, rescaled to Q0.31 by a saturating doubling (1/(1+0) = 1
       is not representable in Q0.31 and saturates to INT32_MAX) */
    return tinyaot_sat_shl(x, 1);
}

/* Count of leading zero bits of a nonzero 32-bit value. */
static inline int32_t tinyaot_clz_u32(uint32_t v)
{
#if TINYAOT_GNU
    return (int32_t)__builtin_clz(v);
#else
    int32_t n = 0;
    while (!(v & 0x80000000u)) {
        v <<= 1;
        n++;
    }
    return n;
#endif
}

/* The softmax kernels' steps (tinyaot_softmax_s8.c says how), shared by the int8, int16-input and strided ones. */

/* exp(d) in Q0.31 of a difference d = x - max in [diff_min, 0], rescaled to Q5.26 by mult * 2^shift (diff_min
   keeps d * 2^shift in int32, so the left shift needs no saturation). */
static inline int32_t tinyaot_softmax_exp(int32_t diff, int32_t mult, int32_t shift)
{
    return tinyaot_exp_on_negative_values(tinyaot_srdhm(diff * ((int32_t)1 << shift), mult));
}

/* The reciprocal in Q0.31 of a row's sum of exps (Q12.19). sum >= 2^19 (the max element contributes exp(0)), so it
   has a leading one bit below bit 31: sum * 2^headroom is in [2^31, 2^32), as Q1.31 that is 1 + f, and 1/sum is
   1/(1+f) * 2^-bits_over_unit (tinyaot_softmax_shift). */
static inline int32_t tinyaot_softmax_recip(int32_t sum)
{
    const int32_t headroom = tinyaot_clz_u32((uint32_t)sum);
    const int32_t frac = (int32_t)(((uint32_t)sum << headroom) - 0x80000000u); /* f in Q0.31 */
    return tinyaot_one_over_one_plus_x(frac);
}

/* The right shift that turns an exp (Q0.31) times the reciprocal of the row's sum into units of 2^-8: a divide by
   2^(bits_over_unit + 23), bits_over_unit = 12 - headroom. */
static inline int32_t tinyaot_softmax_shift(int32_t sum)
{
    return TINYAOT_SOFTMAX_ACCUM_INT_BITS - tinyaot_clz_u32((uint32_t)sum) + 31 - 8;
}

/* The rows of a softmax over contiguous rows of any signed integer type (int8: tinyaot_softmax_s8, int16:
   tinyaot_softmax_s16_s8): per row the max (from lowest, the type's least value), the sum of exps of the differences
   to it, and each probability exp * recip rounded to 1/256 (int8, zero point -128; a divide by 2^32 or more of a
   value below 2^31 rounds to 0, in rows of over 512 near-equal values). Element i is read before out[i] is written
   (after the max and the sum are complete). */
#define TINYAOT_SOFTMAX_ROWS(in_type, input, num_rows, row_size, lowest, mult, shift, diff_min, output)               \
    do {                                                                                                              \
        int32_t r_;                                                                                                   \
        for (r_ = 0; r_ < (num_rows); r_++) {                                                                         \
            const in_type *in = (input) + r_ * (row_size);                                                            \
            int8_t *out = (output) + r_ * (row_size);                                                                 \
            int32_t max = (lowest);                                                                                   \
            int32_t i;                                                                                                \
            for (i = 0; i < (row_size); i++) {                                                                        \
                max = tinyaot_max_i32(max, in[i]);                                                                    \
            }                                                                                                         \
            int32_t sum = 0; /* Q12.19 */                                                                             \
            for (i = 0; i < (row_size); i++) {                                                                        \
                const int32_t diff = (int32_t)in[i] - max;                                                            \
                if (diff >= (diff_min)) {                                                                             \
                    sum += tinyaot_rdbpot(tinyaot_softmax_exp(diff, mult, shift), TINYAOT_SOFTMAX_ACCUM_INT_BITS);    \
                }                                                                                                     \
            }                                                                                                         \
            const int32_t recip = tinyaot_softmax_recip(sum);                                                         \
            const int32_t out_shift = tinyaot_softmax_shift(sum);                                                     \
            for (i = 0; i < (row_size); i++) {                                                                        \
                const int32_t diff = (int32_t)in[i] - max;                                                            \
                if (diff >= (diff_min)) {                                                                             \
                    const int32_t e = tinyaot_softmax_exp(diff, mult, shift);                                         \
                    const int32_t p = tinyaot_srdhm(recip, e); /* >= 0 */                                             \
                    const int32_t q = out_shift > 31 ? 0 : tinyaot_rdbpot(p, out_shift);                              \
                    out[i] = (int8_t)tinyaot_clamp_i32(q - 128, -128, 127);                                           \
                } else {                                                                                              \
                    out[i] = -128;                                                                                    \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
    } while (0)

#endif /* TINYAOT_NN_SUPPORT_H */
