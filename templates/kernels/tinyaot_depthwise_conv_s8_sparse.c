/*
 * tinyaot_depthwise_conv_s8_sparse: tinyaot_depthwise_conv_s8 with bitmap-sparse weights (tinyaot_sparse_weights):
 * output channel oc's row is its kh*kw taps, a bitmap of the nonzero ones and their values.
 *
 * Per group of output pixels the taps of four channels are unpacked once into a small tile (windows up to 64 taps)
 * and run over the pixels four channels at a time, skipping taps whose four weights are zero; larger windows go
 * channel by channel through lists of nonzero taps (a zero bitmap byte skips eight). See tinyaot_nn_compressed.h
 * for why not finer. Results equal tinyaot_depthwise_conv_s8 bit for bit.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void sp_begin(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                           tinyaot_cursor *cur)
{
    const tinyaot_sparse_weights *w = (const tinyaot_sparse_weights *)weights;
    (void)out_c;
    cur->bytes = w->bitmap + oc * ((row_len + 7) >> 3);
    cur->values = w->values + w->row_offsets[oc];
    cur->t = 0;
}

static TINYAOT_ALWAYS_INLINE int32_t sp_decode(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                               tinyaot_cursor *cur, tinyaot_tap *taps, int32_t max)
{
    const uint8_t *bm = cur->bytes;
    const int8_t *v = cur->values;
    int32_t t = cur->t;
    int32_t n = 0;
    (void)weights;
    (void)oc;
    (void)out_c;
    while (t < row_len && n < max) {
        const uint32_t byte = bm[t >> 3];
        if (byte == 0 && (t & 7) == 0) {
            t += 8;
            continue;
        }
        if ((byte >> (t & 7)) & 1u) {
            const int32_t w = *v++;
            TINYAOT_TAP_PUSH(taps, n, t, w);
        }
        t++;
    }
    cur->t = t;
    cur->values = v;
    return n;
}

/* four channels' bitmap rows for every tap (zeros included: the tile is dense) */
static TINYAOT_ALWAYS_INLINE void sp_tile(const void *weights, int32_t oc, int32_t nch, int32_t out_c,
                                          int32_t row_len, int8_t *tile)
{
    const tinyaot_sparse_weights *w = (const tinyaot_sparse_weights *)weights;
    const int32_t row_bytes = (row_len + 7) >> 3;
    int32_t j;
    (void)out_c;
    for (j = 0; j < 4; j++) {
        const uint8_t *bm = w->bitmap + (oc + j) * row_bytes;
        const int8_t *v = j < nch ? w->values + w->row_offsets[oc + j] : NULL;
        int32_t t;
        for (t = 0; t < row_len; t++) {
            tile[4 * t + j] = (int8_t)((v != NULL && ((bm[t >> 3] >> (t & 7)) & 1u)) ? *v++ : 0);
        }
    }
}

TINYAOT_DW_COMPRESSED_KERNEL(tinyaot_depthwise_conv_s8_sparse, tinyaot_sparse_weights, 1, sp_begin, sp_decode,
                             sp_tile, 1)
