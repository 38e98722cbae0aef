/*
 * tinyaot_convolve_s4: tinyaot_convolve_s8 with 4-bit weights (two's-complement nibbles in [-7, 7], two per byte,
 * low nibble first, row-major over the whole OHWI filter: output channel o starts at nibble o * K, K =
 * kh*kw*in_ch/groups, so with K odd every other row starts in the middle of a byte).
 *
 * Four-pixel im2col columns by position pair (tinyaot_nn_compressed.h): each byte's two nibbles are sign-extended
 * (SBFX) into one pair of weights that a single SMLAD per pixel multiplies with two positions of the column (on DSP
 * cores four bytes per word load). Results equal tinyaot_convolve_s8 on the unpacked weights, bit for bit.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void s4_begin(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur)
{
    (void)weights;
    cur->pos = row * row_len;
}

static TINYAOT_ALWAYS_INLINE void s4_dot4(const void *weights, tinyaot_cursor *cur, const int16_t *col, int32_t n,
                                          int32_t acc[4])
{
    const uint8_t *p = (const uint8_t *)weights + (cur->pos >> 1);
    const int odd_start = (int)(cur->pos & 1);
    int32_t a0 = acc[0];
    int32_t a1 = acc[1];
    int32_t a2 = acc[2];
    int32_t a3 = acc[3];
    int32_t i;
    cur->pos += n;
    if (!odd_start) {
        /* each byte is one position pair: (low nibble, high nibble) */
#if TINYAOT_USE_DSP
        for (i = 0; i + 8 <= n; i += 8) { /* four bytes per (unaligned) word load */
            uint32_t u;
            __builtin_memcpy(&u, p, 4);
            p += 4;
            TINYAOT_MAC4P_INC(col, (int32_t)(u << 28) >> 28, (int32_t)(u << 24) >> 28);
            TINYAOT_MAC4P_INC(col, (int32_t)(u << 20) >> 28, (int32_t)(u << 16) >> 28);
            TINYAOT_MAC4P_INC(col, (int32_t)(u << 12) >> 28, (int32_t)(u << 8) >> 28);
            TINYAOT_MAC4P_INC(col, (int32_t)(u << 4) >> 28, (int32_t)u >> 28);
        }
#else
        i = 0;
#endif
        for (; i + 2 <= n; i += 2) {
            const uint32_t byte = *p++;
            TINYAOT_MAC4P_INC(col, tinyaot_s4_lo(byte), tinyaot_s4_hi(byte));
        }
    } else {
        /* the row starts on a high nibble: a pair is (high nibble of one byte, low nibble of the next) */
        for (i = 0; i + 2 <= n; i += 2) {
            const uint32_t b0 = p[0];
            const uint32_t b1 = p[1];
            p++;
            TINYAOT_MAC4P_INC(col, tinyaot_s4_hi(b0), tinyaot_s4_lo(b1));
        }
    }
    if (i < n) { /* odd count: the last position, paired with the column's zero */
        TINYAOT_MAC4P_INC(col, odd_start ? tinyaot_s4_hi(*p) : tinyaot_s4_lo(*p), 0);
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

TINYAOT_CW_CONV_KERNEL(tinyaot_convolve_s4, uint8_t, 1, TINYAOT_CW_BY_PAIR, s4_begin, s4_dot4)
