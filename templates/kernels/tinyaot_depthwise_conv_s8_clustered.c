/*
 * tinyaot_depthwise_conv_s8_clustered: tinyaot_depthwise_conv_s8 with clustered weights (tinyaot_clustered_weights):
 * output channel oc's row is its kh*kw taps, each a bits-wide index into codebooks[oc / group_size].
 *
 * Per group of output pixels the taps of four channels are looked up once into a small tile (windows up to 64
 * taps) and run over the pixels four channels at a time as the dense kernel does, so the lookups cost next to
 * nothing per multiply-accumulate and any width (1..8 bits, straddling bytes or not) is as fast as any other;
 * larger windows go through lists of nonzero taps (tinyaot_nn_compressed.h). Results equal tinyaot_depthwise_conv_s8.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void cl_begin(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                           tinyaot_cursor *cur)
{
    const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;
    (void)out_c;
    (void)row_len;
    cur->bytes = w->packed + oc * w->row_bytes;
    cur->values = w->codebooks + (oc / w->group_size) * w->k;
    cur->t = 0;
}

static TINYAOT_ALWAYS_INLINE int32_t cl_decode(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                               tinyaot_cursor *cur, tinyaot_tap *taps, int32_t max)
{
    const int32_t bits = ((const tinyaot_clustered_weights *)weights)->bits;
    int32_t t = cur->t;
    int32_t n = 0;
    (void)oc;
    (void)out_c;
    for (; t < row_len && n < max; t++) {
        const int32_t w = cur->values[tinyaot_index_at(cur->bytes, t, bits)];
        TINYAOT_TAP_PUSH(taps, n, t, w);
    }
    cur->t = t;
    return n;
}

/* four channels' rows for every tap, each read as one little-endian bit stream (a buffer of fewer than 16 bits,
   refilled a byte at a time) and looked up in its own codebook */
static TINYAOT_ALWAYS_INLINE void cl_tile(const void *weights, int32_t oc, int32_t nch, int32_t out_c,
                                          int32_t row_len, int8_t *tile)
{
    const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;
    const int32_t bits = w->bits;
    const uint32_t mask = (1u << bits) - 1u;
    int32_t j;
    (void)out_c;
    for (j = 0; j < 4; j++) {
        int32_t t;
        if (j >= nch) {
            for (t = 0; t < row_len; t++) {
                tile[4 * t + j] = 0;
            }
            continue;
        }
        const uint8_t *p = w->packed + (oc + j) * w->row_bytes;
        const int8_t *cb = w->codebooks + ((oc + j) / w->group_size) * w->k;
        uint32_t buf = 0;
        int32_t have = 0;
        for (t = 0; t < row_len; t++) {
            if (have < bits) {
                buf |= (uint32_t)*p++ << have;
                have += 8;
            }
            tile[4 * t + j] = cb[buf & mask];
            buf >>= bits;
            have -= bits;
        }
    }
}

TINYAOT_DW_COMPRESSED_KERNEL(tinyaot_depthwise_conv_s8_clustered, tinyaot_clustered_weights,
                             TINYAOT_CLUSTERED_OK(filter, filter_dims->h * filter_dims->w), cl_begin, cl_decode,
                             cl_tile, 0)
