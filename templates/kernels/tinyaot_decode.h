/*
 * Weights decoded once per call into RAM, for the kernels that run the dense kernels' fast paths on int4 and
 * clustered weights (tinyaot_*_decoded.c): the compressed codes are kept in flash in the dense kernel's own weight
 * layout (tinyaot/ops/decoded.py permutes them at compile time), so decoding is a linear walk that writes each
 * weight where the dense kernel reads it, and every weight is decoded once per inference instead of once per
 * multiply-accumulate (the tinyaot_*_s4 / _s8_clustered kernels decode in their inner loops).
 *
 * The codes form one little-endian bit stream of `bits` bits each (code i in bits [i*bits, (i+1)*bits), bit j of
 * the stream is bit j % 8 of byte j / 8). They are cut into regions of `region` codes (the last may be shorter),
 * each decoded with one codebook of k int8 entries: region r with codebook ((r / div) * cycle + r % cycle) % mod
 * (cycle 1: (r / div) % mod, a codebook per block of regions; cycle 4: regions that are runs of one output channel
 * cycling over a block's four channels, one codebook per channel). int4 weights are the codebook {0, 1, ..., 7,
 * -8, ..., -1} of their two's-complement nibbles.
 */
#ifndef TINYAOT_DECODE_H
#define TINYAOT_DECODE_H

#include "tinyaot_nn_support.h"
#include "tinyaot_mve_support.h"

/* tinyaot_decoded_weights: tinyaot_nn_types.h */

/* A decoded tile of at most this many bytes goes in a local array of the kernel (its stack frame) instead of the
   caller's scratch, so the dense fast path runs on decoded weights without growing the arena. The compiler plans
   the scratch by the same number (tinyaot/ops/decoded.py STACK_TILE) and offers these kernels only on boards whose
   stack reserve is at least four times it. */
#define TINYAOT_DECODE_STACK_TILE 1024

/* dst[0 .. n) = codes first .. first+n-1, within one region (one codebook cb). */
static inline void tinyaot_decode_run(const tinyaot_decoded_weights *f, const int8_t *cb, int32_t first, int32_t n,
                                      int8_t *dst)
{
    const int32_t bits = f->bits;
    if (bits == 4 && (first & 1) == 0) {
        /* two codes per byte, the first in the low nibble */
        const uint8_t *src = f->packed + (first >> 1);
#if TINYAOT_USE_MVE
        /* 32 codes per pass: the low and the high nibbles of 16 bytes as two index vectors, two byte gathers from
           the codebook, stored interleaved (VST20/VST21) */
        for (; n >= 32; n -= 32, src += 16, dst += 32) {
            const uint8x16_t b = vld1q_u8(src);
            int8x16x2_t v;
            v.val[0] = vldrbq_gather_offset_s8(cb, vandq_u8(b, vdupq_n_u8(15)));
            v.val[1] = vldrbq_gather_offset_s8(cb, vshrq_n_u8(b, 4));
            vst2q_s8(dst, v);
        }
#endif
        for (; n >= 2; n -= 2, dst += 2) {
            const uint32_t b = *src++;
            dst[0] = cb[b & 15u];
            dst[1] = cb[b >> 4];
        }
        if (n > 0) {
            dst[0] = cb[*src & 15u];
        }
        return;
    }
    if (bits == 8) {
        const uint8_t *src = f->packed + first;
#if TINYAOT_USE_MVE
        for (; n >= 16; n -= 16, src += 16, dst += 16) { /* 16 codes per byte gather */
            vst1q_s8(dst, vldrbq_gather_offset_s8(cb, vld1q_u8(src)));
        }
#endif
        for (; n > 0; n--) {
            *dst++ = cb[*src++];
        }
        return;
    }
    {
        /* any width: a bit accumulator refilled a byte at a time (never a byte past the last code's) */
        const uint32_t mask = (1u << bits) - 1u;
        const int32_t bit = first * bits;
        const uint8_t *src = f->packed + (bit >> 3);
        uint32_t acc = (uint32_t)*src++ >> (bit & 7);
        int32_t have = 8 - (bit & 7);
        for (; n > 0; n--) {
            if (have < bits) {
                acc |= (uint32_t)*src++ << have;
                have += 8;
            }
            *dst++ = cb[acc & mask];
            acc >>= bits;
            have -= bits;
        }
    }
}

/* dst[0 .. n) = the weights of codes first .. first+n-1 (any regions). The region's place (r = q * div + m) is
   divided out once per call and stepped per region after it. */
static inline void tinyaot_decode(const tinyaot_decoded_weights *f, int32_t first, int32_t n, int8_t *dst)
{
    int32_t r = first / f->region;
    int32_t q = r / f->div;
    int32_t m = r - q * f->div;
    int32_t end = (r + 1) * f->region;
    while (n > 0) {
        const int32_t run = end - first < n ? end - first : n;
        const int32_t cb = f->cycle == 1 ? q % f->mod : (q * f->cycle + m % f->cycle) % f->mod;
        tinyaot_decode_run(f, f->codebooks + f->k * cb, first, run, dst);
        first += run;
        dst += run;
        n -= run;
        end += f->region;
        if (++m == f->div) {
            m = 0;
            q++;
        }
    }
}

#endif /* TINYAOT_DECODE_H */
