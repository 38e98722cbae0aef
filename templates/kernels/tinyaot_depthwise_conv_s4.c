/*
 * tinyaot_depthwise_conv_s4: tinyaot_depthwise_conv_s8 with 4-bit weights: the 1HWC filter's values as
 * two's-complement nibbles, two per byte, low nibble first, in the filter's own order (tap-major, channels
 * innermost), so output channel oc's tap t is nibble t * out_ch + oc.
 *
 * Per group of output pixels the nibbles of four channels are unpacked once into a small tile (windows up to 64
 * taps) and run over the pixels four channels at a time as the dense kernel does; larger windows go through lists
 * of nonzero taps (tinyaot_nn_compressed.h). Results equal tinyaot_depthwise_conv_s8 bit for bit.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void s4_begin(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                           tinyaot_cursor *cur)
{
    (void)weights;
    (void)oc;
    (void)out_c;
    (void)row_len;
    cur->t = 0;
}

static TINYAOT_ALWAYS_INLINE int32_t s4_decode(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                               tinyaot_cursor *cur, tinyaot_tap *taps, int32_t max)
{
    const uint8_t *p = (const uint8_t *)weights;
    int32_t t = cur->t;
    int32_t nib = t * out_c + oc;
    int32_t n = 0;
    for (; t < row_len && n < max; t++, nib += out_c) {
        const uint32_t byte = p[nib >> 1];
        const int32_t w = (nib & 1) ? tinyaot_s4_hi(byte) : tinyaot_s4_lo(byte);
        TINYAOT_TAP_PUSH(taps, n, t, w);
    }
    cur->t = t;
    return n;
}

/* four channels' nibbles for every tap: channel oc + j of tap t is nibble t * out_c + oc + j */
static TINYAOT_ALWAYS_INLINE void s4_tile(const void *weights, int32_t oc, int32_t nch, int32_t out_c,
                                          int32_t row_len, int8_t *tile)
{
    const uint8_t *p = (const uint8_t *)weights;
    int32_t t;
    for (t = 0; t < row_len; t++) {
        const int32_t nib = t * out_c + oc;
        int32_t j;
        if (nch == 4 && (nib & 1) == 0) { /* four channels in two whole bytes */
            const uint32_t b0 = p[nib >> 1];
            const uint32_t b1 = p[(nib >> 1) + 1];
            tile[4 * t] = (int8_t)tinyaot_s4_lo(b0);
            tile[4 * t + 1] = (int8_t)tinyaot_s4_hi(b0);
            tile[4 * t + 2] = (int8_t)tinyaot_s4_lo(b1);
            tile[4 * t + 3] = (int8_t)tinyaot_s4_hi(b1);
            continue;
        }
        for (j = 0; j < 4; j++) {
            const uint32_t byte = j < nch ? p[(nib + j) >> 1] : 0u; /* never past the last channel's byte */
            tile[4 * t + j] = (int8_t)(((nib + j) & 1) ? tinyaot_s4_hi(byte) : tinyaot_s4_lo(byte));
        }
    }
}

TINYAOT_DW_COMPRESSED_KERNEL(tinyaot_depthwise_conv_s4, uint8_t, 1, s4_begin, s4_decode, s4_tile, 0)
