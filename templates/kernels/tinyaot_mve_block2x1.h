/*
 * tinyaot int8 kernels: the Helium (MVE) core of the 2x1 block-sparse convolution (tinyaot_convolve_s8_block2x1_mve.c).
 *
 * Weights: per pair of output channels its kept window positions (tinyaot/compress/pattern.py "block2x1"). Flash
 * holds per pair a bitmap of them and their weights (tinyaot/ops/compressed.py mve_block2x1_values), cut into a
 * first group of m positions (1 .. 16; 0 for an empty pair) and F whole groups of 16: first the first group's
 * weights (its m weights of the pair's first channel, then its m of the second), then per whole group the 16 weights
 * of the first channel and the 16 of the second. The entry decodes the bitmaps once per call into the stream of
 * positions this loop reads (tinyaot_mve_b2x1_positions, in the scratch): per block-row of four channels its two
 * channel pairs in turn (a missing second pair: an empty one), each as m (one byte), the first group's m positions
 * (one byte each: rows of at most 256 positions), F (one byte) and the whole groups' 16 * F positions: 2 bytes and
 * one per kept position. Requantization words, entry and row loop: tinyaot_mve_block.h's.
 *
 * A group is one byte gather per column, VLDRB.U8 Qd, [Rn, Qoffsets], and one 16-lane VMLADAVA per channel and
 * pixel: per group and two pixels 1 offset load, 2 gathers, 2 weight loads and 4 VMLADAV(A) for 64 multiply-adds.
 * The first group starts the sums, its gathers and weight loads predicated on its m lanes (VCTP.8: the others load
 * 0 and read nothing; its 16 offsets are read whole, those past m from the bytes after it): 7 instructions more per
 * channel pair than a whole group.
 *
 * Longer rows (K > 256: ic_resnet8's 3x3x32 and 3x3x64 layers; the _long loops and entry) are cut into S segments
 * of 256 positions (32 bitmap bytes): per channel pair each segment as above (its positions relative to the
 * segment's first, its m and F counting its own positions, no filler block), a byte 0 before each later segment
 * and a last byte S; flash holds the pair's weights segment by segment in the same order (mve_block2x1_values(st,
 * segmented=True)). Between segments both column pointers advance by 256, at the last byte they go back; a later
 * segment's first group accumulates (VMLADAVA): per later segment and pixel pair ~20 instructions more.
 *
 * Overflow: as tinyaot_mve_gemm.h (each sum a subset of the dense products plus the folded bias).
 */
#ifndef TINYAOT_MVE_BLOCK2X1_H
#define TINYAOT_MVE_BLOCK2X1_H

#include "tinyaot_mve_block.h"
#include "tinyaot_block2x1_decode.h"

/* In a stream the compiler put in flash (short rows; the entry's decoded 0), a whole block-row of four channels
   with nothing kept may be this byte (no pair's m reaches it) and the row's four outputs, requantized at compile
   time from its biases and saturated to int8 (ops/compressed.py mve_block2x1_stream): the row loops then only
   clamp them to the activation bounds and store them, for every pixel (vww's 97-99 % sparse 1x1 layers have
   such rows in 9 of 32 to 43 of 64). */
#define TINYAOT_MVE_B2X1_CONST_ROW 255

/* Per bitmap byte v the positions of its set bits (one byte each, lowest first, 0 past them) in words 2v, 2v + 1,
   and their count: the Helium kernel's decoder takes a byte at a time (~10 instructions against ~16 by nibbles;
   2 KB of flash on the M55, whose 2x1 layers decode thousands of bitmap bytes a call: ic_resnet8 4,176). */
static const uint32_t tinyaot_mve_b2x1_byte_pos[512] = {
    0x0u, 0x0u, 0x0u, 0x0u, 0x1u, 0x0u, 0x100u, 0x0u, 0x2u, 0x0u, 0x200u, 0x0u, 0x201u, 0x0u, 0x20100u, 0x0u,
    0x3u, 0x0u, 0x300u, 0x0u, 0x301u, 0x0u, 0x30100u, 0x0u, 0x302u, 0x0u, 0x30200u, 0x0u, 0x30201u, 0x0u,
    0x3020100u, 0x0u, 0x4u, 0x0u, 0x400u, 0x0u, 0x401u, 0x0u, 0x40100u, 0x0u, 0x402u, 0x0u, 0x40200u, 0x0u,
    0x40201u, 0x0u, 0x4020100u, 0x0u, 0x403u, 0x0u, 0x40300u, 0x0u, 0x40301u, 0x0u, 0x4030100u, 0x0u, 0x40302u, 0x0u,
    0x4030200u, 0x0u, 0x4030201u, 0x0u, 0x3020100u, 0x4u, 0x5u, 0x0u, 0x500u, 0x0u, 0x501u, 0x0u, 0x50100u, 0x0u,
    0x502u, 0x0u, 0x50200u, 0x0u, 0x50201u, 0x0u, 0x5020100u, 0x0u, 0x503u, 0x0u, 0x50300u, 0x0u, 0x50301u, 0x0u,
    0x5030100u, 0x0u, 0x50302u, 0x0u, 0x5030200u, 0x0u, 0x5030201u, 0x0u, 0x3020100u, 0x5u, 0x504u, 0x0u,
    0x50400u, 0x0u, 0x50401u, 0x0u, 0x5040100u, 0x0u, 0x50402u, 0x0u, 0x5040200u, 0x0u, 0x5040201u, 0x0u,
    0x4020100u, 0x5u, 0x50403u, 0x0u, 0x5040300u, 0x0u, 0x5040301u, 0x0u, 0x4030100u, 0x5u, 0x5040302u, 0x0u,
    0x4030200u, 0x5u, 0x4030201u, 0x5u, 0x3020100u, 0x504u, 0x6u, 0x0u, 0x600u, 0x0u, 0x601u, 0x0u, 0x60100u, 0x0u,
    0x602u, 0x0u, 0x60200u, 0x0u, 0x60201u, 0x0u, 0x6020100u, 0x0u, 0x603u, 0x0u, 0x60300u, 0x0u, 0x60301u, 0x0u,
    0x6030100u, 0x0u, 0x60302u, 0x0u, 0x6030200u, 0x0u, 0x6030201u, 0x0u, 0x3020100u, 0x6u, 0x604u, 0x0u,
    0x60400u, 0x0u, 0x60401u, 0x0u, 0x6040100u, 0x0u, 0x60402u, 0x0u, 0x6040200u, 0x0u, 0x6040201u, 0x0u,
    0x4020100u, 0x6u, 0x60403u, 0x0u, 0x6040300u, 0x0u, 0x6040301u, 0x0u, 0x4030100u, 0x6u, 0x6040302u, 0x0u,
    0x4030200u, 0x6u, 0x4030201u, 0x6u, 0x3020100u, 0x604u, 0x605u, 0x0u, 0x60500u, 0x0u, 0x60501u, 0x0u,
    0x6050100u, 0x0u, 0x60502u, 0x0u, 0x6050200u, 0x0u, 0x6050201u, 0x0u, 0x5020100u, 0x6u, 0x60503u, 0x0u,
    0x6050300u, 0x0u, 0x6050301u, 0x0u, 0x5030100u, 0x6u, 0x6050302u, 0x0u, 0x5030200u, 0x6u, 0x5030201u, 0x6u,
    0x3020100u, 0x605u, 0x60504u, 0x0u, 0x6050400u, 0x0u, 0x6050401u, 0x0u, 0x5040100u, 0x6u, 0x6050402u, 0x0u,
    0x5040200u, 0x6u, 0x5040201u, 0x6u, 0x4020100u, 0x605u, 0x6050403u, 0x0u, 0x5040300u, 0x6u, 0x5040301u, 0x6u,
    0x4030100u, 0x605u, 0x5040302u, 0x6u, 0x4030200u, 0x605u, 0x4030201u, 0x605u, 0x3020100u, 0x60504u, 0x7u, 0x0u,
    0x700u, 0x0u, 0x701u, 0x0u, 0x70100u, 0x0u, 0x702u, 0x0u, 0x70200u, 0x0u, 0x70201u, 0x0u, 0x7020100u, 0x0u,
    0x703u, 0x0u, 0x70300u, 0x0u, 0x70301u, 0x0u, 0x7030100u, 0x0u, 0x70302u, 0x0u, 0x7030200u, 0x0u,
    0x7030201u, 0x0u, 0x3020100u, 0x7u, 0x704u, 0x0u, 0x70400u, 0x0u, 0x70401u, 0x0u, 0x7040100u, 0x0u,
    0x70402u, 0x0u, 0x7040200u, 0x0u, 0x7040201u, 0x0u, 0x4020100u, 0x7u, 0x70403u, 0x0u, 0x7040300u, 0x0u,
    0x7040301u, 0x0u, 0x4030100u, 0x7u, 0x7040302u, 0x0u, 0x4030200u, 0x7u, 0x4030201u, 0x7u, 0x3020100u, 0x704u,
    0x705u, 0x0u, 0x70500u, 0x0u, 0x70501u, 0x0u, 0x7050100u, 0x0u, 0x70502u, 0x0u, 0x7050200u, 0x0u,
    0x7050201u, 0x0u, 0x5020100u, 0x7u, 0x70503u, 0x0u, 0x7050300u, 0x0u, 0x7050301u, 0x0u, 0x5030100u, 0x7u,
    0x7050302u, 0x0u, 0x5030200u, 0x7u, 0x5030201u, 0x7u, 0x3020100u, 0x705u, 0x70504u, 0x0u, 0x7050400u, 0x0u,
    0x7050401u, 0x0u, 0x5040100u, 0x7u, 0x7050402u, 0x0u, 0x5040200u, 0x7u, 0x5040201u, 0x7u, 0x4020100u, 0x705u,
    0x7050403u, 0x0u, 0x5040300u, 0x7u, 0x5040301u, 0x7u, 0x4030100u, 0x705u, 0x5040302u, 0x7u, 0x4030200u, 0x705u,
    0x4030201u, 0x705u, 0x3020100u, 0x70504u, 0x706u, 0x0u, 0x70600u, 0x0u, 0x70601u, 0x0u, 0x7060100u, 0x0u,
    0x70602u, 0x0u, 0x7060200u, 0x0u, 0x7060201u, 0x0u, 0x6020100u, 0x7u, 0x70603u, 0x0u, 0x7060300u, 0x0u,
    0x7060301u, 0x0u, 0x6030100u, 0x7u, 0x7060302u, 0x0u, 0x6030200u, 0x7u, 0x6030201u, 0x7u, 0x3020100u, 0x706u,
    0x70604u, 0x0u, 0x7060400u, 0x0u, 0x7060401u, 0x0u, 0x6040100u, 0x7u, 0x7060402u, 0x0u, 0x6040200u, 0x7u,
    0x6040201u, 0x7u, 0x4020100u, 0x706u, 0x7060403u, 0x0u, 0x6040300u, 0x7u, 0x6040301u, 0x7u, 0x4030100u, 0x706u,
    0x6040302u, 0x7u, 0x4030200u, 0x706u, 0x4030201u, 0x706u, 0x3020100u, 0x70604u, 0x70605u, 0x0u, 0x7060500u, 0x0u,
    0x7060501u, 0x0u, 0x6050100u, 0x7u, 0x7060502u, 0x0u, 0x6050200u, 0x7u, 0x6050201u, 0x7u, 0x5020100u, 0x706u,
    0x7060503u, 0x0u, 0x6050300u, 0x7u, 0x6050301u, 0x7u, 0x5030100u, 0x706u, 0x6050302u, 0x7u, 0x5030200u, 0x706u,
    0x5030201u, 0x706u, 0x3020100u, 0x70605u, 0x7060504u, 0x0u, 0x6050400u, 0x7u, 0x6050401u, 0x7u,
    0x5040100u, 0x706u, 0x6050402u, 0x7u, 0x5040200u, 0x706u, 0x5040201u, 0x706u, 0x4020100u, 0x70605u,
    0x6050403u, 0x7u, 0x5040300u, 0x706u, 0x5040301u, 0x706u, 0x4030100u, 0x70605u, 0x5040302u, 0x706u,
    0x4030200u, 0x70605u, 0x4030201u, 0x70605u, 0x3020100u, 0x7060504u
};
static const uint8_t tinyaot_mve_b2x1_byte_count[256] = {
    0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 5, 1, 2, 2, 3, 2, 3,
    3, 4, 2, 3, 3, 4, 3, 4, 4, 5, 2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 6, 1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4,
    3, 4, 4, 5, 2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 6, 2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 6, 3, 4,
    4, 5, 4, 5, 5, 6, 4, 5, 5, 6, 5, 6, 6, 7, 1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 5, 2, 3, 3, 4, 3, 4, 4, 5,
    3, 4, 4, 5, 4, 5, 5, 6, 2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 6, 3, 4, 4, 5, 4, 5, 5, 6, 4, 5, 5, 6, 5, 6,
    6, 7, 2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 6, 3, 4, 4, 5, 4, 5, 5, 6, 4, 5, 5, 6, 5, 6, 6, 7, 3, 4, 4, 5,
    4, 5, 5, 6, 4, 5, 5, 6, 5, 6, 6, 7, 4, 5, 5, 6, 5, 6, 6, 7, 5, 6, 6, 7, 6, 7, 7, 8
};

/* One bitmap byte v at base (its first position in every byte): its set bits' positions at ix (8 bytes written);
   returns ix past them. */
static TINYAOT_ALWAYS_INLINE uint8_t *tinyaot_mve_b2x1_byte(uint8_t *ix, uint32_t v, uint32_t base)
{
    const uint32_t t0 = tinyaot_mve_b2x1_byte_pos[2 * v] + base;
    const uint32_t t1 = tinyaot_mve_b2x1_byte_pos[2 * v + 1] + base;
    memcpy(ix, &t0, 4);
    memcpy(ix + 4, &t1, 4);
    return ix + tinyaot_mve_b2x1_byte_count[v];
}

/* The set bits' positions of rb bitmap bytes (at most 32: positions below 256) into ix, one byte each; returns their
   count. Writes up to 7 bytes past them. */
static inline int32_t tinyaot_mve_b2x1_bits_dense(const uint8_t *bm, int32_t rb, uint8_t *ix)
{
    uint8_t *const start = ix;
    const uint8_t *const end = bm + rb;
    uint32_t base = 0; /* the byte's first position, in every byte of the word */
    while (bm < end) {
        ix = tinyaot_mve_b2x1_byte(ix, *bm++, base);
        base += 0x08080808u;
    }
    return (int32_t)(ix - start);
}

/* The same for sparse bitmaps: a zero word (32 positions, none kept) costs ~6 instructions, a zero byte ~3 (vww's
   1x1 layers keep 1-10 % of their blocks: there the per-call decode was a third of their instructions). */
static inline int32_t tinyaot_mve_b2x1_bits_sparse(const uint8_t *bm, int32_t rb, uint8_t *ix)
{
    uint8_t *const start = ix;
    const uint8_t *const end = bm + rb;
    const uint8_t *const end4 = bm + (rb & ~3);
    uint32_t base = 0; /* the byte's first position, in every byte of the word */
    uint32_t w, v;
    int32_t b;
    while (bm < end4) {
        memcpy(&w, bm, 4);
        bm += 4;
        if (w == 0u) {
            base += 0x20202020u;
            continue;
        }
        for (b = 0; b < 4; b++, w >>= 8, base += 0x08080808u) {
            v = w & 255u;
            if (v != 0u) {
                ix = tinyaot_mve_b2x1_byte(ix, v, base);
            }
        }
    }
    for (; bm < end; bm++, base += 0x08080808u) {
        ix = tinyaot_mve_b2x1_byte(ix, *bm, base);
    }
    return (int32_t)(ix - start);
}

/* A channel pair's kept positions from rb bitmap bytes (at most 32) into ix: the sparse decoder when the previous
   pair kept fewer than one position in 8 (the two give the same bytes; the dense one has no zero tests). */
static TINYAOT_ALWAYS_INLINE int32_t tinyaot_mve_b2x1_bits(const uint8_t *bm, int32_t rb, uint8_t *ix, int sparse)
{
    return sparse ? tinyaot_mve_b2x1_bits_sparse(bm, rb, ix) : tinyaot_mve_b2x1_bits_dense(bm, rb, ix);
}

/* A pair's (or segment's) header in place: its n positions were decoded at dst + 2; the first m of them move back
   one byte to follow dst[0] = m, and dst[1 + m] = f, the count of whole groups after them. */
static TINYAOT_ALWAYS_INLINE void tinyaot_mve_b2x1_header(uint8_t *dst, int32_t m, int32_t f)
{
#if !TINYAOT_USE_MVE
    int32_t i;
#endif
    dst[0] = (uint8_t)m;
#if TINYAOT_USE_MVE
    vstrbq_p_u8(dst + 1, vld1q_u8(dst + 2), vctp8q((uint32_t)m)); /* (16 read, m written) */
#else
    for (i = 1; i <= m; i++) {
        dst[i] = dst[i + 1];
    }
#endif
    dst[1 + m] = (uint8_t)f;
}

/* The stream (above) of out_c channels' bitmaps (ceil(k / 8) bytes per channel pair) into dst; returns its bytes:
   per channel pair (a last block-row's missing one included) 2 + its kept positions (an odd count's filler
   included); the 16 bytes after them are zeroed (the last first group's offsets are read whole), up to 20 written. */
static inline int32_t tinyaot_mve_b2x1_positions(const uint8_t *bm, int32_t out_c, int32_t k, uint8_t *dst)
{
    const int32_t rb = (k + 7) / 8;
    const int32_t pairs = (out_c + 1) / 2;
    const int32_t padded = 2 * ((out_c + 3) / 4);
    uint8_t *const start = dst;
    int32_t p, n, f, m;
    int sparse = 0; /* decode the next pair with the sparse decoder (tinyaot_mve_b2x1_bits) */
    for (p = 0; p < padded; p++) {
        /* the positions two bytes on; the first m of them then move back one, before F */
        n = p < pairs ? tinyaot_mve_b2x1_bits(bm + p * rb, rb, dst + 2, sparse) : 0;
        sparse = 8 * n < k;
        if (n & 1) { /* an odd count: its filler block, the last position again (weights 0) */
            dst[2 + n] = dst[1 + n];
            n++;
        }
        f = n > 0 ? (n - 1) >> 4 : 0;
        m = n - 16 * f;
        tinyaot_mve_b2x1_header(dst, m, f);
        dst += 2 + n;
    }
    memset(dst, 0, 16);
    return (int32_t)(dst - start);
}

/* The segmented stream (rows past 256 positions; above) of out_c channels' bitmaps into dst; returns its bytes: per
   channel pair (a last block-row's missing one included) and segment 3 + its kept positions; the 16 bytes after
   them are zeroed, up to 20 written. */
static inline int32_t tinyaot_mve_b2x1_positions_long(const uint8_t *bm, int32_t out_c, int32_t k, uint8_t *dst)
{
    const int32_t rb = (k + 7) / 8;
    const int32_t segs = (rb + 31) / 32;
    const int32_t pairs = (out_c + 1) / 2;
    const int32_t padded = 2 * ((out_c + 3) / 4);
    uint8_t *const start = dst;
    int32_t p, s;
    int sparse = 0;
    for (p = 0; p < padded; p++) {
        for (s = 0; s < segs; s++) {
            const int32_t bytes = rb - 32 * s < 32 ? rb - 32 * s : 32;
            const int32_t n = p < pairs ? tinyaot_mve_b2x1_bits(bm + p * rb + 32 * s, bytes, dst + 2, sparse) : 0;
            const int32_t m = n > 0 ? n - 16 * ((n - 1) >> 4) : 0;
            sparse = n < bytes; /* (fewer than one position in 8 kept) */
            tinyaot_mve_b2x1_header(dst, m, (n - m) >> 4);
            dst += 2 + n;
            *dst++ = (uint8_t)(s + 1 < segs ? 0 : segs);
        }
    }
    memset(dst, 0, 16);
    return (int32_t)(dst - start);
}

#if TINYAOT_MVE_BLOCK_ASM

/* One group of a channel pair against two columns (xa in r3, xb in r1; positions at r5, weights at w): the pair's
   first channel sums in a0 (pixel a) and b0 (pixel b), its second in a1, b1. */
#define TINYAOT_MVE_B2X1_G2(op, w, a0, b0, a1, b1)                                                                     \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.u8 q2, [r1, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a0 ", q1, q3\n\t" op " " b0 ", q2, q3\n\t"                                   \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a1 ", q1, q3\n\t" op " " b1 ", q2, q3\n\t"
/* One column (xa in r3). */
#define TINYAOT_MVE_B2X1_G1(op, w, a0, b0, a1, b1)                                                                     \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a0 ", q1, q3\n\t"                                                            \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a1 ", q1, q3\n\t"
/* A channel pair's first group (m = r11 lanes; its gathers and weight loads predicated; it starts the sums): against
   two columns / one. */
#define TINYAOT_MVE_B2X1_T2(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpsttt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.u8 q2, [r1, q0]\n\tvldrbt.8 q3, [r9]\n\t"                              \
    "add r9, r9, r11\n\tvmladav.s8 " a0 ", q1, q3\n\tvmladav.s8 " b0 ", q2, q3\n\t"                                    \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladav.s8 " a1 ", q1, q3\n\tvmladav.s8 " b1 ", q2, q3\n\t"
#define TINYAOT_MVE_B2X1_T1(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpstt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.8 q3, [r9]\n\t"                                                         \
    "add r9, r9, r11\n\tvmladav.s8 " a0 ", q1, q3\n\t"                                                                 \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladav.s8 " a1 ", q1, q3\n\t"
/* The same accumulating: a later segment's first group. */
#define TINYAOT_MVE_B2X1_TA2(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpsttt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.u8 q2, [r1, q0]\n\tvldrbt.8 q3, [r9]\n\t"                              \
    "add r9, r9, r11\n\tvmladava.s8 " a0 ", q1, q3\n\tvmladava.s8 " b0 ", q2, q3\n\t"                                    \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladava.s8 " a1 ", q1, q3\n\tvmladava.s8 " b1 ", q2, q3\n\t"
#define TINYAOT_MVE_B2X1_TA1(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpstt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.8 q3, [r9]\n\t"                                                         \
    "add r9, r9, r11\n\tvmladava.s8 " a0 ", q1, q3\n\t"                                                                 \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladava.s8 " a1 ", q1, q3\n\t"
/* A segmented channel pair (labels 10 .. 14): the first segment as TINYAOT_MVE_B2X1_PAIR, then while the next byte
   is 0 the columns advance by 256 and a segment accumulates; the last byte S takes them back by 256 * (S - 1). */
#define TINYAOT_MVE_B2X1_PAIR_LONG(G, T, TA, a0, b0, a1, b1)                                                           \
    TINYAOT_MVE_B2X1_PAIR(G, T, a0, b0, a1, b1, "10", "11")                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "cmp r11, #0\n\t"                                                                                                  \
    "bne 14f\n\t"                                                                                                      \
    "add r3, r3, #256\n\t"                                                                                             \
    "add r1, r1, #256\n\t" TA(a0, b0, a1, b1) "ldrb r11, [r5], #1\n\t"                                                \
    TINYAOT_MVE_B2X1_GROUPS(G, a0, b0, a1, b1, "12", "11b")                                                             \
    "b 11b\n\t"                                                                                                        \
    "14:\n\t"                                                                                                          \
    "sub r11, r11, #1\n\t"                                                                                             \
    "sub r3, r3, r11, lsl #8\n\t"                                                                                      \
    "sub r1, r1, r11, lsl #8\n\t"
#define TINYAOT_MVE_B2X1_DEFINE_LONG(name, G, T, TA)                                                                   \
    ".macro " name " a0, b0, a1, b1\n\t"                                                                               \
    TINYAOT_MVE_B2X1_PAIR_LONG(G, T, TA, "\\a0", "\\b0", "\\a1", "\\b1") ".endm\n\t"
/* F whole groups (F = r11), two per loop pass: LSRS puts F's low bit in C (an odd group first) and Z says no pair
   is left (the groups do not touch the flags); labels l: loop, 15: the pairs; end: where to go after them. */
#define TINYAOT_MVE_B2X1_GROUPS(G, a0, b0, a1, b1, l, end)                                                             \
    "lsrs r11, r11, #1\n\t"                                                                                            \
    "bcc 15f\n\t" G("vmladava.s8", "r9", a0, b0, a1, b1) "15:\n\t"                                                     \
    "beq " end "\n\t" l ":\n\t" G("vmladava.s8", "r9", a0, b0, a1, b1) G("vmladava.s8", "r9", a0, b0, a1, b1)            \
    "subs r11, r11, #1\n\t"                                                                                            \
    "bne " l "b\n\t"
/* A channel pair: its first group, then its F whole groups. */
#define TINYAOT_MVE_B2X1_PAIR(G, T, a0, b0, a1, b1, l, e)                                                              \
    T(a0, b0, a1, b1) "ldrb r11, [r5], #1\n\t" TINYAOT_MVE_B2X1_GROUPS(G, a0, b0, a1, b1, l, e "f") e ":\n\t"
/* A channel pair as an assembler macro `name a0, b0, a1, b1` (defined once per function, expanded four times: the
   string stays within the 4095 characters C99 promises). */
#define TINYAOT_MVE_B2X1_DEFINE(name, G, T)                                                                            \
    ".macro " name " a0, b0, a1, b1\n\t"                                                                               \
    TINYAOT_MVE_B2X1_PAIR(G, T, "\\a0", "\\b0", "\\a1", "\\b1", "10", "11") ".endm\n\t"
/* A block-row: channels 0, 1 (r0/r8, r2/r10) then 2, 3 (r4/r12, r6/lr), as tinyaot_mve_block.h's registers; then
   the requantization words' pointer from the frame into r11 (r9 holds the weights' throughout). */
#define TINYAOT_MVE_B2X1_SUMS(name, vmovs)                                                                             \
    name " r0, r8, r2, r10\n\t" name " r4, r12, r6, lr\n\t" vmovs "ldm sp, {r0, r2, r4}\n\tldr r11, [sp, #16]\n\t"
/* tinyaot_mve_block.h's entry, with the weights' pointer (the job's values) in r9 and the requantization words' in
   the frame ([sp, #16]). */
#define TINYAOT_MVE_B2X1_ENTER                                                                                         \
    "push {r4-r11, lr}\n\t"                                                                                            \
    "vpush {d8-d15}\n\t"                                                                                               \
    "ldm r3, {r4, r5, r6, r8, r9, r10}\n\t"                                                                            \
    "vldrw.u32 q6, [r3, #24]\n\t"                                                                                      \
    "vldrw.u32 q7, [r3, #40]\n\t"                                                                                      \
    "ldr r11, [r3, #56]\n\t"                                                                                           \
    "mov r3, r0\n\t"                                                                                                   \
    "mov r7, r2\n\t"                                                                                                   \
    "push {r9, r11}\n\t"                                                                                               \
    "mov r9, r11\n\t"                                                                                                  \
    "push {r4, r6, r8, r10}\n\t"                                                                                       \
    "cmp r4, #0\n\t"                                                                                                   \
    "beq 8f\n\t"
#define TINYAOT_MVE_B2X1_LEAVE                                                                                         \
    "9:\n\t"                                                                                                           \
    "add sp, sp, #24\n\t"                                                                                              \
    "vpop {d8-d15}\n\t"                                                                                                \
    "pop {r4-r11, pc}\n\t"
#define TINYAOT_MVE_B2X1_LOOP(name, G, T, vmovs, req, store, store_p)                                                  \
    TINYAOT_MVE_B2X1_DEFINE(name, G, T)                                                                                \
    TINYAOT_MVE_BLOCK_LOOP_FRAME(TINYAOT_MVE_B2X1_ENTER, TINYAOT_MVE_B2X1_LEAVE, TINYAOT_MVE_B2X1_SUMS(name, vmovs),   \
                                 req, store "str r11, [sp, #16]\n\t", store_p)

/* TINYAOT_MVE_BLOCK_LOOP_FRAME with a constant block-row (TINYAOT_MVE_B2X1_CONST_ROW, whole rows only: never the
   last partial one) taken at the top of a row: its four bytes sign-extended into q4, clamped (q6, q7), copied to q5
   for pixel b, the requantization words' pointer advanced past the row's 16; r0, r2, r4 restored as SUMS does. 3
   instructions more per other row (ldrb, cmp, beq), ~15 per constant one instead of ~70. */
#define TINYAOT_MVE_B2X1_LOOP_FRAME_CONST(enter, leave, sums, req, store, store_p)                                      \
    enter                                                                                                              \
    "3:\n\t"                                                                                                           \
    "ldrb r11, [r5]\n\t"                                                                                               \
    "cmp r11, #255\n\t"                                                                                                \
    "beq 18f\n\t" sums req                                                                                             \
    "19:\n\t" store                                                                                                    \
    "subs r0, r0, #1\n\t"                                                                                              \
    "str r0, [sp]\n\t"                                                                                                 \
    "bne 3b\n\t"                                                                                                       \
    "8:\n\t"                                                                                                           \
    "ldr r0, [sp, #12]\n\t"                                                                                            \
    "cmp r0, #0\n\t"                                                                                                   \
    "beq 9f\n\t" sums req                                                                                              \
    "ldr r0, [sp, #12]\n\t"                                                                                            \
    "vctp.32 r0\n\t" store_p leave                                                                                     \
    "18:\n\t"                                                                                                          \
    "vldrb.s32 q4, [r5, #1]\n\t"                                                                                       \
    "adds r5, r5, #5\n\t"                                                                                              \
    "vmax.s32 q4, q4, q6\n\t"                                                                                          \
    "vmin.s32 q4, q4, q7\n\t"                                                                                          \
    "vmov q5, q4\n\t"                                                                                                  \
    "ldm sp, {r0, r2, r4}\n\t"                                                                                         \
    "ldr r11, [sp, #16]\n\t"                                                                                           \
    "adds r11, r11, #64\n\t"                                                                                           \
    "b 19b\n\t"
#define TINYAOT_MVE_B2X1_LOOP_CONST(name, G, T, vmovs, req, store, store_p)                                            \
    TINYAOT_MVE_B2X1_DEFINE(name, G, T)                                                                                \
    TINYAOT_MVE_B2X1_LOOP_FRAME_CONST(TINYAOT_MVE_B2X1_ENTER, TINYAOT_MVE_B2X1_LEAVE,                                  \
                                      TINYAOT_MVE_B2X1_SUMS(name, vmovs), req, store "str r11, [sp, #16]\n\t",        \
                                      store_p)

/* Every block-row against columns xa and xb, pixel a's outputs at out, pixel b's at out + out_c. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED const int8_t *xb,
                                                   TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_LOOP("tinyaot_b2x1_pair2", TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_B2X1_T2,
                                           TINYAOT_MVE_BLOCK_VMOV2, TINYAOT_MVE_BLOCK_REQ2_AT("r11"),
                                           TINYAOT_MVE_BLOCK_STORE2, TINYAOT_MVE_BLOCK_STORE2_P));
}

/* Every block-row against column xa, its outputs at out. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_one(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_B2X1_LOOP("tinyaot_b2x1_pair1", TINYAOT_MVE_B2X1_G1,
                                                            TINYAOT_MVE_B2X1_T1, TINYAOT_MVE_BLOCK_VMOV1,
                                                            TINYAOT_MVE_BLOCK_REQ1_AT("r11"),
                                                            TINYAOT_MVE_BLOCK_STORE1, TINYAOT_MVE_BLOCK_STORE1_P));
}

/* The same two over a stream that may hold constant block-rows (TINYAOT_MVE_B2X1_CONST_ROW). */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two_const(TINYAOT_UNUSED const int8_t *xa,
                                                         TINYAOT_UNUSED const int8_t *xb, TINYAOT_UNUSED int8_t *out,
                                                         TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_LOOP_CONST("tinyaot_b2x1_const2", TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_B2X1_T2,
                                                 TINYAOT_MVE_BLOCK_VMOV2, TINYAOT_MVE_BLOCK_REQ2_AT("r11"),
                                                 TINYAOT_MVE_BLOCK_STORE2, TINYAOT_MVE_BLOCK_STORE2_P));
}

static TINYAOT_NAKED void tinyaot_mve_block2x1_one_const(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                         TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_B2X1_LOOP_CONST("tinyaot_b2x1_const1", TINYAOT_MVE_B2X1_G1,
                                                                  TINYAOT_MVE_B2X1_T1, TINYAOT_MVE_BLOCK_VMOV1,
                                                                  TINYAOT_MVE_BLOCK_REQ1_AT("r11"),
                                                                  TINYAOT_MVE_BLOCK_STORE1,
                                                                  TINYAOT_MVE_BLOCK_STORE1_P));
}

/* The long loop: the pair macro defined in an assembler statement of its own (each string within 4095 chars). */
#define TINYAOT_MVE_B2X1_LOOP_LONG(name, vmovs, req, store, store_p)                                                   \
    TINYAOT_MVE_BLOCK_LOOP_FRAME(TINYAOT_MVE_B2X1_ENTER, TINYAOT_MVE_B2X1_LEAVE, TINYAOT_MVE_B2X1_SUMS(name, vmovs),   \
                                 req, store "str r11, [sp, #16]\n\t", store_p)

/* The same two over the segmented stream (rows past 256 positions). The one-column loop moves r1 (not read) too. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two_long(TINYAOT_UNUSED const int8_t *xa,
                                                        TINYAOT_UNUSED const int8_t *xb, TINYAOT_UNUSED int8_t *out,
                                                        TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_DEFINE_LONG("tinyaot_b2x1_long2", TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_B2X1_T2,
                                                  TINYAOT_MVE_B2X1_TA2));
    __asm__ volatile(TINYAOT_MVE_B2X1_LOOP_LONG("tinyaot_b2x1_long2", TINYAOT_MVE_BLOCK_VMOV2,
                                                TINYAOT_MVE_BLOCK_REQ2_AT("r11"), TINYAOT_MVE_BLOCK_STORE2,
                                                TINYAOT_MVE_BLOCK_STORE2_P));
}

static TINYAOT_NAKED void tinyaot_mve_block2x1_one_long(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                        TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_DEFINE_LONG("tinyaot_b2x1_long1", TINYAOT_MVE_B2X1_G1, TINYAOT_MVE_B2X1_T1,
                                                  TINYAOT_MVE_B2X1_TA1));
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_B2X1_LOOP_LONG("tinyaot_b2x1_long1", TINYAOT_MVE_BLOCK_VMOV1,
                                                                 TINYAOT_MVE_BLOCK_REQ1_AT("r11"),
                                                                 TINYAOT_MVE_BLOCK_STORE1,
                                                                 TINYAOT_MVE_BLOCK_STORE1_P));
}

#else /* no assembly: intrinsics on MVE cores (other compilers), portable C elsewhere; the same integers */

/* Every block-row against column xa (and xb unless it is NULL), pixel a's outputs at out, pixel b's at out + out_c;
   seg: the segmented stream. */
static void tinyaot_mve_block2x1_cols(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j,
                                      int seg)
{
    const uint8_t *idx = (const uint8_t *)(const void *)j->stream;
    const int8_t *wf = j->values;
    const int32_t *pp = j->params;
    const int32_t n_out = j->out_c;
    int32_t o, c, h, i;
    for (o = 0; o < n_out; o += 4, pp += 16) {
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (!seg && *idx == TINYAOT_MVE_B2X1_CONST_ROW) { /* a constant block-row: its outputs, clamped */
            for (c = 0; c < 4; c++) {
                out[o + c] = (int8_t)tinyaot_clamp_i32((int8_t)idx[1 + c], j->lo[0], j->hi[0]);
                if (xb != NULL) {
                    out[n_out + o + c] = out[o + c];
                }
            }
            idx += 5;
            continue;
        }
        for (h = 0; h < 2; h++) {
            int32_t base = 0; /* the segment's first position */
            for (;;) {
                const int8_t *const sa = xa + base, *const sb = xb != NULL ? xb + base : NULL;
                int32_t f = -1;
                for (; f != 0; f--) {
                    /* the first group (m = its first byte), then the f whole ones */
                    const int32_t m = f < 0 ? *idx++ : 16;
                    const int8_t *const w0 = wf, *const w1 = wf + m;
#if TINYAOT_USE_MVE
                    const mve_pred16_t lanes = vctp8q((uint32_t)m);
                    const uint8x16_t off = vldrbq_z_u8(idx, lanes);
                    const int8x16_t va = vldrbq_gather_offset_z_s8(sa, off, lanes);
                    const int8x16_t v0 = vldrbq_z_s8(w0, lanes), v1 = vldrbq_z_s8(w1, lanes);
                    acc[2 * h] = vmladavaq_s8(acc[2 * h], va, v0);
                    acc[2 * h + 1] = vmladavaq_s8(acc[2 * h + 1], va, v1);
                    if (sb != NULL) {
                        const int8x16_t vb = vldrbq_gather_offset_z_s8(sb, off, lanes);
                        acc[4 + 2 * h] = vmladavaq_s8(acc[4 + 2 * h], vb, v0);
                        acc[5 + 2 * h] = vmladavaq_s8(acc[5 + 2 * h], vb, v1);
                    }
                    (void)i;
#else
                    for (i = 0; i < m; i++) {
                        /* products of magnitude at most 128 * 128; partial sums within 128 * sum|w| */
                        acc[2 * h] += (int32_t)sa[idx[i]] * w0[i];
                        acc[2 * h + 1] += (int32_t)sa[idx[i]] * w1[i];
                        if (sb != NULL) {
                            acc[4 + 2 * h] += (int32_t)sb[idx[i]] * w0[i];
                            acc[5 + 2 * h] += (int32_t)sb[idx[i]] * w1[i];
                        }
                    }
#endif
                    idx += m;
                    wf += 2 * m;
                    if (f < 0) {
                        f = *idx++ + 1; /* (the loop's f-- then leaves F) */
                    }
                }
                if (!seg) {
                    break;
                }
                if (*idx++ != 0) { /* the pair's last byte (S); else a byte 0 before the next segment */
                    break;
                }
                base += 256;
            }
        }
        for (c = 0; c < 4 && o + c < n_out; c++) {
            const int32_t shift = pp[4 + c] + pp[12 + c]; /* one of the two halves is 0 */
            out[o + c] = tinyaot_requantize_s8(acc[c] + pp[c], pp[8 + c], shift, j->out_off, j->lo[0], j->hi[0]);
            if (xb != NULL) {
                out[n_out + o + c] = tinyaot_requantize_s8(acc[4 + c] + pp[c], pp[8 + c], shift, j->out_off,
                                                           j->lo[0], j->hi[0]);
            }
        }
    }
}

static void tinyaot_mve_block2x1_two(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, xb, out, j, 0);
}

static void tinyaot_mve_block2x1_one(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j, 0);
}

static void tinyaot_mve_block2x1_two_const(const int8_t *xa, const int8_t *xb, int8_t *out,
                                           const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, xb, out, j, 0);
}

static void tinyaot_mve_block2x1_one_const(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j, 0);
}

static void tinyaot_mve_block2x1_two_long(const int8_t *xa, const int8_t *xb, int8_t *out,
                                          const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, xb, out, j, 1);
}

static void tinyaot_mve_block2x1_one_long(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j, 1);
}

#endif

#endif /* TINYAOT_MVE_BLOCK2X1_H */
