/*
 * tinyaot_fully_connected_s4: tinyaot_fully_connected_s8 with 4-bit weights: two's-complement nibbles in
 * [-7, 7], two per byte, low nibble first, row-major over the whole [out_ch][depth] filter (row o starts at nibble
 * o * depth, in the middle of a byte when depth is odd and o too).
 *
 * One sequential pass per output channel: each byte gives two weights by sign-extending its nibbles (SBFX); on DSP
 * cores eight weights per word are paired for SMLAD against SXTAB16-unpacked inputs.
 * DSP cores, even depth (rows start on a byte): two rows per pass. Eight nibbles of a word are sign-extended four
 * at a time without per-nibble shifts: (u << 4) & 0xF0F0F0F0 holds the even nibbles and u & 0xF0F0F0F0 the odd
 * ones, each in the top of its byte, and SXTB16 (with ROR #8) turns each into two int16 lanes 16 * (w0, w4),
 * 16 * (w2, w6), 16 * (w1, w5), 16 * (w3, w7). The inputs are paired to match, (x0, x4), (x2, x6), ..., with one
 * PKHBT/PKHTB and SXTAB16 (offset added), once per pass for both rows. The sums are 16 times the dot product,
 * shifted back exactly at the end of the row.
 * Results equal tinyaot_fully_connected_s8 on the unpacked weights, bit for bit (filter offset included).
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE int32_t s4_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                            int32_t x_off)
{
    const int32_t nib = row * depth;
    const uint8_t *p = (const uint8_t *)weights + (nib >> 1);
    int32_t acc = 0;
    int32_t j = 0;
    if (depth > 0 && (nib & 1)) { /* the row starts on a high nibble: one weight, then whole bytes */
        acc += ((int32_t)x[0] + x_off) * tinyaot_s4_hi(*p++);
        j = 1;
    }
#if TINYAOT_USE_DSP
    /* eight weights per word: SBFX pairs them as (w0, w2), (w1, w3), ... to match the input lanes SXTAB16 gives
       (x0, x2), (x1, x3) with the offset added, and SMLAD takes two products per instruction */
    const int32_t off2 = tinyaot_dup16(x_off);
    for (; j + 8 <= depth; j += 8) {
        int32_t wv;
        __builtin_memcpy(&wv, p, 4); /* one (unaligned) LDR */
        p += 4;
        const int32_t xa = tinyaot_read_s8x4(x + j);
        const int32_t xb = tinyaot_read_s8x4(x + j + 4);
        const uint32_t u = (uint32_t)wv;
        acc = __smlad(__sxtab16(off2, xa), tinyaot_pack16x2((int32_t)(u << 28) >> 28, (int32_t)(u << 20) >> 28), acc);
        acc = __smlad(tinyaot_sxtab16_ror8(off2, xa),
                      tinyaot_pack16x2((int32_t)(u << 24) >> 28, (int32_t)(u << 16) >> 28), acc);
        acc = __smlad(__sxtab16(off2, xb), tinyaot_pack16x2((int32_t)(u << 12) >> 28, (int32_t)(u << 4) >> 28), acc);
        acc = __smlad(tinyaot_sxtab16_ror8(off2, xb), tinyaot_pack16x2((int32_t)(u << 8) >> 28, (int32_t)u >> 28),
                      acc);
    }
#endif
    for (; j + 2 <= depth; j += 2) {
        const uint32_t byte = *p++;
        acc += ((int32_t)x[j] + x_off) * tinyaot_s4_lo(byte);
        acc += ((int32_t)x[j + 1] + x_off) * tinyaot_s4_hi(byte);
    }
    if (j < depth) {
        acc += ((int32_t)x[j] + x_off) * tinyaot_s4_lo(*p);
    }
    return acc;
}

#if TINYAOT_USE_DSP
#if TINYAOT_GNU
static inline int32_t s4_sxtb16_ror8(int32_t v)
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}
static inline int32_t s4_pack_hi(int32_t a, int32_t b) /* (a >> 16, b >> 16) as int16 lanes */
{
    int32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(b), "r"(a));
    return r;
}
#else
static inline int32_t s4_sxtb16_ror8(int32_t v) { return __sxtb16((int32_t)(((uint32_t)v >> 8) | ((uint32_t)v << 24))); }
static inline int32_t s4_pack_hi(int32_t a, int32_t b)
{
    return (int32_t)(((uint32_t)b & 0xFFFF0000u) | ((uint32_t)a >> 16));
}
#endif

/* a0 += row at p0, a1 += row at p1 (both byte aligned), depth positions. Per eight positions and row: one LDR,
   two masks, four SXTB16 and four SMLAD. The lanes hold 16 * w: |16 * w * (x + off)| <= 16 * 7 * 255, and the
   row's scaled sum stays below 2^31 for depth < 65 000 (checked by the caller). */
static TINYAOT_ALWAYS_INLINE void s4_dot2(const uint8_t *p0, const uint8_t *p1, int32_t depth, const int8_t *x,
                                          int32_t x_off, int32_t *a0, int32_t *a1)
{
    const int32_t off2 = tinyaot_dup16(x_off);
    const uint32_t m = 0xF0F0F0F0u;
    int32_t s0 = 0; /* 16 * the dot products */
    int32_t s1 = 0;
    int32_t j = 0;
    for (; j + 8 <= depth; j += 8, p0 += 4, p1 += 4) {
        const int32_t xa = tinyaot_read_s8x4(x + j);
        const int32_t xb = tinyaot_read_s8x4(x + j + 4);
        const int32_t lo = tinyaot_pack16x2(xa, xb); /* bytes x0 x1 x4 x5 */
        const int32_t hi = s4_pack_hi(xa, xb);       /* bytes x2 x3 x6 x7 */
        const int32_t x04 = __sxtab16(off2, lo);
        const int32_t x15 = tinyaot_sxtab16_ror8(off2, lo);
        const int32_t x26 = __sxtab16(off2, hi);
        const int32_t x37 = tinyaot_sxtab16_ror8(off2, hi);
        uint32_t u;
        __builtin_memcpy(&u, p0, 4);
        int32_t e = (int32_t)((u << 4) & m);
        int32_t o = (int32_t)(u & m);
        s0 = __smlad(x04, __sxtb16(e), s0);
        s0 = __smlad(x26, s4_sxtb16_ror8(e), s0);
        s0 = __smlad(x15, __sxtb16(o), s0);
        s0 = __smlad(x37, s4_sxtb16_ror8(o), s0);
        __builtin_memcpy(&u, p1, 4);
        e = (int32_t)((u << 4) & m);
        o = (int32_t)(u & m);
        s1 = __smlad(x04, __sxtb16(e), s1);
        s1 = __smlad(x26, s4_sxtb16_ror8(e), s1);
        s1 = __smlad(x15, __sxtb16(o), s1);
        s1 = __smlad(x37, s4_sxtb16_ror8(o), s1);
    }
    int32_t acc0 = *a0 + (s0 >> 4); /* exact: s0 is a multiple of 16 */
    int32_t acc1 = *a1 + (s1 >> 4);
    for (; j + 2 <= depth; j += 2) {
        const uint32_t b0 = *p0++;
        const uint32_t b1 = *p1++;
        const int32_t xe = (int32_t)x[j] + x_off;
        const int32_t xo = (int32_t)x[j + 1] + x_off;
        acc0 += xe * tinyaot_s4_lo(b0) + xo * tinyaot_s4_hi(b0);
        acc1 += xe * tinyaot_s4_lo(b1) + xo * tinyaot_s4_hi(b1);
    }
    *a0 = acc0;
    *a1 = acc1;
}

/* tinyaot_fc_dot2_fn: rows `row`, `row + 1` of the packed filter (depth / 2 bytes a row: depth is even). */
static void s4_rows2(const void *weights, int32_t row, int32_t depth, const int8_t *x, int32_t x_off, int32_t *a0,
                     int32_t *a1)
{
    const uint8_t *p0 = (const uint8_t *)weights + row * (depth >> 1);
    s4_dot2(p0, p0 + (depth >> 1), depth, x, x_off, a0, a1);
}
#endif

/* On DSP cores rows run in pairs when they start on whole bytes and the scaled sums of s4_dot2 cannot wrap. */
TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s4, uint8_t, 1, s4_dot, TINYAOT_IF_DSP(s4_rows2, NULL),
                             TINYAOT_IF_DSP((filter_dims->n & 1) == 0 && filter_dims->n < 65000, 0))
