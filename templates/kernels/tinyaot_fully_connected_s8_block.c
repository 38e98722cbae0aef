/*
 * tinyaot_fully_connected_s8_block: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * w[o, d]) over
 * block-sparse weights (tinyaot_block_weights: blocks of 4 output channels x 4 consecutive inputs, only the nonzero
 * ones stored), with the input offset folded into the bias (tinyaot_block_support.h says how).
 *
 * Same result as tinyaot_fully_connected_s8 on the decoded weights with filter_offset 0 (the only case offered),
 * bit for bit. Arguments as tinyaot_fully_connected_s8, except: bias is the folded bias; filter is the block
 * storage, filter->fold_table saying whether quant_params hold the fold requantization table or per-channel
 * multipliers and shifts (per_channel is then ignored: the compiler always gives one entry per channel); the
 * scratch (ctx->buf, 4-byte aligned, tinyaot_fully_connected_s8_block_get_buffer_size bytes) is required unless that
 * is 0 (one input row, depth a multiple of 4).
 *
 * Input rows go in pairs through the 4x2 core (each stored block against two rows; each row copied into the int16
 * column once and read by every block-row). A lone last row whose depth is a multiple of 4 goes through the 4x1
 * core instead, read in place (25 instructions per block of 16 multiply-adds on GCC with DSP): a single-row layer
 * needs no scratch. Otherwise the lone row runs as a pair with itself.
 */
#include "tinyaot_block_support.h"

int32_t tinyaot_fully_connected_s8_block_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    if (input_dims->n == 1 && filter_dims->n % 4 == 0) {
        return 0; /* one row, read in place */
    }
    return 4 * ((filter_dims->n + 3) & ~3) * (int32_t)sizeof(int16_t);
}

tinyaot_status tinyaot_fully_connected_s8_block(TINYAOT_FC_ARGS(tinyaot_block_weights))
{
    const int32_t depth = filter_dims->n;
    const int32_t out_c = output_dims->c;
    const int32_t rows = input_dims->n;
    (void)per_channel;
    (void)bias_dims;
    const int32_t need = tinyaot_fully_connected_s8_block_get_buffer_size(input_dims, filter_dims);
    if (fc_params->filter_offset != 0 || bias == NULL || filter == NULL ||
        (need > 0 && (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 || ctx->size < need))) {
        return TINYAOT_ARG_ERROR;
    }
    tinyaot_block_out q;
    TINYAOT_BLOCK_OUT_SET(q, bias, quant_params, filter, out_c, fc_params);
    int16_t *col = need > 0 ? (int16_t *)ctx->buf : NULL;
    const int32_t tail = (4 - (depth & 3)) & 3;
    int32_t b;
    for (b = 0; b < rows; b += 2) {
        const int two = (b + 1 < rows);
        const int8_t *w = filter->values;
        const uint8_t *d = filter->deltas;
        int8_t *out_a = output + b * out_c;
        int8_t *out_b = out_a + out_c;
        int32_t o, r;
        /* a lone last row with a column (depth not a multiple of 4) runs as a pair with itself */
        const int pair = two || col != NULL;
        if (pair) {
            tinyaot_block_put(col, 0, 0, input + b * depth, depth, 0);
            tinyaot_block_put(col, 1, 0, input + (two ? b + 1 : b) * depth, depth, 0);
            tinyaot_block_put(col, 0, depth, NULL, tail, 0);
            tinyaot_block_put(col, 1, depth, NULL, tail, 0);
        }
        for (o = 0, r = 0; o < out_c; o += 4, r++) {
            const int32_t nc = out_c - o < 4 ? out_c - o : 4;
            const int32_t n = filter->counts[r];
            int32_t acc[8];
            tinyaot_block_init(&q, o, nc, acc);
            if (n > 0) {
                if (pair) {
                    tinyaot_block_mac_4x2(col, w, d, n, acc);
                } else {
                    tinyaot_block_mac_4x1(input + b * depth, w, d, n, acc);
                }
                w += 16 * n;
                d += n;
            }
            tinyaot_block_store(&q, o, nc, acc, out_a, two ? out_b : NULL);
        }
    }
    return TINYAOT_OK;
}
