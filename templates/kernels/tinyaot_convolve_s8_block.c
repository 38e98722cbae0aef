/*
 * tinyaot_convolve_s8_block: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) over
 * block-sparse weights (tinyaot_block_weights: blocks of 4 output channels x 4 consecutive window positions, only
 * the nonzero ones stored), with the input offset folded into the bias (tinyaot_block_support.h says how).
 *
 * Same result as tinyaot_convolve_s8 on the decoded weights, bit for bit. Arguments as tinyaot_convolve_s8, except:
 *   - bias is the folded bias bias[o] + input_offset * sum_k w[o, k] (tinyaot/ops/common.py fold_input_offset);
 *   - filter is the block storage; filter->fold_table says whether quant_params hold the fold kernels'
 *     requantization table (tinyaot_fold_support.h) or per-channel multipliers and shifts;
 *   - the scratch (ctx->buf, 4-byte aligned, tinyaot_convolve_s8_block_get_buffer_size bytes) is required: the
 *     int16 column of two output pixels' windows (tinyaot_block_support.h).
 *
 * Output pixels go in pairs in raster order (a lone last one paired with itself); for each pair the two windows are
 * copied into the column once (padding as the input zero point), then every block-row runs its stored blocks
 * against it (the 4x2 core: on GCC with DSP inline assembly, 37 instructions per 32 multiply-adds plus the loop)
 * and is requantized. A pair's windows are not read again once it is written: the output may overlap the input as
 * for the dense kernels (two pixels at a time, in raster order).
 */
#include "tinyaot_block_support.h"

int32_t tinyaot_convolve_s8_block_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    (void)input_dims;
    return 4 * ((k + 3) & ~3) * (int32_t)sizeof(int16_t);
}

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t zp; /* the input zero point, -input_offset: what a padded position holds */
} block_geom;

/* Window values j .. j+n-1 of slot s, or the input zero point (padding) */
#define BLOCK_PUT(col, g, s, j, src, n) tinyaot_block_put(col, s, j, src, n, (g)->zp)
TINYAOT_WINDOW_FILL_FN(block_fill, block_geom, BLOCK_PUT)

tinyaot_status tinyaot_convolve_s8_block(TINYAOT_CONV_ARGS(tinyaot_block_weights))
{
    const int32_t out_c = filter_dims->n;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    (void)bias_dims;
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL ||
        filter == NULL || ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
        ctx->size < tinyaot_convolve_s8_block_get_buffer_size(input_dims, filter_dims)) {
        return TINYAOT_ARG_ERROR;
    }
    block_geom g;
    TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
    g.zp = -conv_params->input_offset;
    tinyaot_block_out q;
    TINYAOT_BLOCK_OUT_SET(q, bias, quant_params, filter, out_c, conv_params);
    const int32_t k = g.k_h * g.k_w * g.in_c;
    const int32_t n_pix = input_dims->n * out_h * out_w;
    int16_t *col = (int16_t *)ctx->buf;
    int32_t p;
    /* the positions past K in the last group multiply zero weights: any value, but a defined one */
    tinyaot_block_put(col, 0, k, NULL, (4 - (k & 3)) & 3, 0);
    tinyaot_block_put(col, 1, k, NULL, (4 - (k & 3)) & 3, 0);
    for (p = 0; p < n_pix; p += 2) {
        /* a lone last pixel is computed twice (slot b holds it again and writes the same results over slot a's) */
        const int two_pix = (p + 1 < n_pix);
        block_fill(col, &g, input, out_h, out_w, p, 0);
        block_fill(col, &g, input, out_h, out_w, two_pix ? p + 1 : p, 1);
        int8_t *out_a = output + p * out_c;
        int8_t *out_b = two_pix ? out_a + out_c : out_a;
        const int8_t *w = filter->values;
        const uint8_t *d = filter->deltas;
        int32_t o, r;
        for (o = 0, r = 0; o < out_c; o += 4, r++) {
            const int32_t nc = out_c - o < 4 ? out_c - o : 4;
            const int32_t n = filter->counts[r];
            int32_t acc[8];
            tinyaot_block_init(&q, o, nc, acc);
            if (n > 0) {
                tinyaot_block_mac_4x2(col, w, d, n, acc);
                w += 16 * n;
                d += n;
            }
            tinyaot_block_store(&q, o, nc, acc, out_a, out_b);
        }
    }
    return TINYAOT_OK;
}
