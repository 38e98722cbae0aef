/*
 * tinyaot_decode: int4 and clustered weights decoded once per call for the dense kernels' fast paths (the formats
 * and the contract: tinyaot_decode.h). Not a layer kernel: the decoded kernels (tinyaot_*_decoded.c) call it per
 * tile, and it is linked once per firmware.
 */
#include "tinyaot_decode.h"

/* Four bytes copied (possibly unaligned): one LDR / STR where the core allows it (see tinyaot_copy4). */
#if TINYAOT_GNU
#define TINYAOT_DECODE_COPY4(d, s) __builtin_memcpy((d), (s), 4)
#else
#define TINYAOT_DECODE_COPY4(d, s) memcpy((d), (s), 4)
#endif

/* Four biased nibbles (u = w + 8, one per byte lane of u4) as four int8 weights. */
#define TINYAOT_DECODE_UNBIAS4(u4) ((((uint32_t)(u4)) + 0x78787878u) ^ 0x80808080u)

/* Four codes of a 4-bit stream (the low 16 bits of b, little-endian) through codebook cb, as one word. */
#define TINYAOT_DECODE_LOOKUP4(b, cb)                                                                                  \
    ((uint32_t)(uint8_t)(cb)[(b) & 15u] | (uint32_t)(uint8_t)(cb)[((b) >> 4) & 15u] << 8 |                             \
     (uint32_t)(uint8_t)(cb)[((b) >> 8) & 15u] << 16 | (uint32_t)(uint8_t)(cb)[((b) >> 12) & 15u] << 24)

/* dst[0 .. n) = int4 weights first .. first+n-1 (the split-nibble words above). */
static void tinyaot_decode_int4(const uint8_t *packed, int32_t first, int32_t n, int8_t *dst)
{
    for (; n > 0 && (first & 7) != 0; n--, first++) { /* up to the next whole word */
        const uint32_t b = packed[((first >> 3) << 2) + (first & 3)];
        *dst++ = (int8_t)((int32_t)((first & 4) ? b >> 4 : b & 15u) - 8);
    }
    {
        const uint8_t *src = packed + (first >> 1);
#if TINYAOT_USE_MVE
        if (((uintptr_t)dst & 3u) == 0) {
            /* 32 weights per pass: the low and the high nibbles of 16 bytes, minus 8, stored word by word in turn
               (VST20/VST21 of 32-bit lanes) */
            for (; n >= 32; n -= 32, src += 16, dst += 32, first += 32) {
                const uint8x16_t b = vld1q_u8(src);
                uint32x4x2_t v;
                v.val[0] = vreinterpretq_u32_u8(vsubq_u8(vandq_u8(b, vdupq_n_u8(15)), vdupq_n_u8(8)));
                v.val[1] = vreinterpretq_u32_u8(vsubq_u8(vshrq_n_u8(b, 4), vdupq_n_u8(8)));
                vst2q_u32((uint32_t *)(void *)dst, v);
            }
        }
#endif
        for (; n >= 8; n -= 8, src += 4, dst += 8, first += 8) {
            uint32_t b, w0, w1;
            TINYAOT_DECODE_COPY4(&b, src);
            w0 = TINYAOT_DECODE_UNBIAS4(b & 0x0F0F0F0Fu);
            w1 = TINYAOT_DECODE_UNBIAS4((b >> 4) & 0x0F0F0F0Fu);
            TINYAOT_DECODE_COPY4(dst, &w0);
            TINYAOT_DECODE_COPY4(dst + 4, &w1);
        }
    }
    for (; n > 0; n--, first++) {
        const uint32_t b = packed[((first >> 3) << 2) + (first & 3)];
        *dst++ = (int8_t)((int32_t)((first & 4) ? b >> 4 : b & 15u) - 8);
    }
}

/* dst[0 .. n) = codes first .. first+n-1, within one region (one codebook cb). */
static void tinyaot_decode_run(const tinyaot_decoded_weights *f, const int8_t *cb, int32_t first, int32_t n,
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
        /* 16 codes (eight bytes, a cycled layout's run): the nibbles as 16-bit offsets, two halfword-lane gathers,
           narrowed into the even and the odd byte lanes of one vector */
        for (; n >= 16; n -= 16, src += 8, dst += 16) {
            const uint16x8_t b = vldrbq_u16(src);
            const int16x8_t lo = vldrbq_gather_offset_s16(cb, vandq_u16(b, vdupq_n_u16(15)));
            const int16x8_t hi = vldrbq_gather_offset_s16(cb, vshrq_n_u16(b, 4));
            vst1q_s8(dst, vmovntq_s16(vmovnbq_s16(vdupq_n_s8(0), lo), hi));
        }
#endif
        for (; n >= 8; n -= 8, src += 4, dst += 8) { /* eight codes per word: lookups packed into two words */
            uint32_t b, w0, w1;
            TINYAOT_DECODE_COPY4(&b, src);
            w0 = TINYAOT_DECODE_LOOKUP4(b, cb);
            w1 = TINYAOT_DECODE_LOOKUP4(b >> 16, cb);
            TINYAOT_DECODE_COPY4(dst, &w0);
            TINYAOT_DECODE_COPY4(dst + 4, &w1);
        }
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
    if (bits == 5 && (first & 7) == 0) {
        /* eight codes in five bytes (a word and a byte), looked up and packed into two words */
        const uint8_t *src = f->packed + ((first >> 3) * 5);
        for (; n >= 8; n -= 8, first += 8, src += 5, dst += 8) {
            uint32_t lo, w0, w1;
            const uint32_t hi = src[4];
            TINYAOT_DECODE_COPY4(&lo, src);
            w0 = (uint32_t)(uint8_t)cb[lo & 31u] | (uint32_t)(uint8_t)cb[(lo >> 5) & 31u] << 8 |
                 (uint32_t)(uint8_t)cb[(lo >> 10) & 31u] << 16 | (uint32_t)(uint8_t)cb[(lo >> 15) & 31u] << 24;
            w1 = (uint32_t)(uint8_t)cb[(lo >> 20) & 31u] | (uint32_t)(uint8_t)cb[(lo >> 25) & 31u] << 8 |
                 (uint32_t)(uint8_t)cb[((lo >> 30) | (hi << 2)) & 31u] << 16 | (uint32_t)(uint8_t)cb[hi >> 3] << 24;
            TINYAOT_DECODE_COPY4(dst, &w0);
            TINYAOT_DECODE_COPY4(dst + 4, &w1);
        }
        if (n == 0) {
            return;
        }
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

/* Codes first .. first+n-1 region by region (tinyaot_decode's general path). */
static void tinyaot_decode_regions(const tinyaot_decoded_weights *f, int32_t first, int32_t n, int8_t *dst)
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

/* dst[0 .. n) = the weights of codes first .. first+n-1 (any regions). The region's place (r = q * div + m) is
   divided out once per call and stepped per region after it. */
void tinyaot_decode(const tinyaot_decoded_weights *f, int32_t first, int32_t n, int8_t *dst)
{
    if (f->k == 0) {
        tinyaot_decode_int4(f->packed, first, n, dst);
        return;
    }
    if (f->cycle == 4 && f->region == 4 && f->bits == 4 && (first & 15) == 0 && f->div % 4 == 0) {
        /* one codebook per channel on the fold layout: per 16 codes (eight bytes) a run of four codes of each of
           the block's four channels in turn, each run two bytes through its channel's codebook into one word */
        const int32_t per_block = 4 * f->div; /* codes per block of four channels */
        int32_t blk = first / per_block;
        int32_t left = per_block - (first - blk * per_block);
        const uint8_t *src = f->packed + (first >> 1);
        for (; n >= 16; blk++, left = per_block) {
            const int8_t *cb0 = f->codebooks + f->k * ((4 * blk) % f->mod);
            const int8_t *cb1 = f->codebooks + f->k * ((4 * blk + 1) % f->mod);
            const int8_t *cb2 = f->codebooks + f->k * ((4 * blk + 2) % f->mod);
            const int8_t *cb3 = f->codebooks + f->k * ((4 * blk + 3) % f->mod);
            for (; left >= 16 && n >= 16; left -= 16, n -= 16, first += 16, src += 8, dst += 16) {
                uint32_t b0, b1, w0, w1, w2, w3;
                TINYAOT_DECODE_COPY4(&b0, src);
                TINYAOT_DECODE_COPY4(&b1, src + 4);
                w0 = TINYAOT_DECODE_LOOKUP4(b0, cb0);
                w1 = TINYAOT_DECODE_LOOKUP4(b0 >> 16, cb1);
                w2 = TINYAOT_DECODE_LOOKUP4(b1, cb2);
                w3 = TINYAOT_DECODE_LOOKUP4(b1 >> 16, cb3);
                TINYAOT_DECODE_COPY4(dst, &w0);
                TINYAOT_DECODE_COPY4(dst + 4, &w1);
                TINYAOT_DECODE_COPY4(dst + 8, &w2);
                TINYAOT_DECODE_COPY4(dst + 12, &w3);
            }
        }
    }
    tinyaot_decode_regions(f, first, n, dst);
}

