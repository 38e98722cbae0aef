/*
 * tinyaot_depthwise_conv_s8_rle: tinyaot_depthwise_conv_s8 with run-length-sparse weights (tinyaot_rle_weights):
 * output channel oc's row is its kh*kw taps as entries (run, value).
 *
 * Per group of output pixels the entries of four channels are walked once into a small tile (windows up to 64 taps)
 * run over the pixels four channels at a time, skipping taps whose four weights are zero; larger windows go
 * channel by channel through lists of nonzero taps (bridging entries, value 0, dropped). See
 * tinyaot_nn_compressed.h for why not finer. Results equal tinyaot_depthwise_conv_s8 bit for bit.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void rle_begin(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                            tinyaot_cursor *cur)
{
    const tinyaot_rle_weights *w = (const tinyaot_rle_weights *)weights;
    (void)out_c;
    (void)row_len;
    cur->bytes = w->runs + w->row_offsets[oc];
    cur->values = w->values + w->row_offsets[oc];
    cur->values_end = w->values + w->row_offsets[oc + 1];
    cur->t = 0; /* tap position just after the last entry used */
}

static TINYAOT_ALWAYS_INLINE int32_t rle_decode(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                                tinyaot_cursor *cur, tinyaot_tap *taps, int32_t max)
{
    const uint8_t *r = cur->bytes;
    const int8_t *v = cur->values;
    int32_t t = cur->t;
    int32_t n = 0;
    (void)weights;
    (void)oc;
    (void)out_c;
    (void)row_len;
    while (v < cur->values_end && n < max) {
        t += (int32_t)*r++;
        const int32_t w = *v++;
        TINYAOT_TAP_PUSH(taps, n, t, w);
        t++;
    }
    cur->bytes = r;
    cur->values = v;
    cur->t = t;
    return n;
}

/* four channels' run-length rows for every tap (zeros included: the tile is dense) */
static TINYAOT_ALWAYS_INLINE void rle_tile(const void *weights, int32_t oc, int32_t nch, int32_t out_c,
                                           int32_t row_len, int8_t *tile)
{
    const tinyaot_rle_weights *w = (const tinyaot_rle_weights *)weights;
    int32_t j;
    int32_t t;
    (void)out_c;
    for (t = 0; t < 4 * row_len; t++) {
        tile[t] = 0;
    }
    for (j = 0; j < nch; j++) {
        const uint8_t *r = w->runs + w->row_offsets[oc + j];
        const int8_t *v = w->values + w->row_offsets[oc + j];
        const int8_t *const v_end = w->values + w->row_offsets[oc + j + 1];
        for (t = 0; v < v_end; t++) {
            t += *r++;
            tile[4 * t + j] = *v++; /* a bridging entry stores its 0 */
        }
    }
}

TINYAOT_DW_COMPRESSED_KERNEL(tinyaot_depthwise_conv_s8_rle, tinyaot_rle_weights, 1, rle_begin, rle_decode, rle_tile,
                             1)
