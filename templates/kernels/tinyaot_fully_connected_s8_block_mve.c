/*
 * tinyaot_fully_connected_s8_block_mve: out[b, o] = requant(bias[o] + sum_d in[b, d] * w[o, d]) over block-sparse
 * weights in the Helium layout (tinyaot_mve_block.h), the input offset folded into the bias, biases, multipliers and
 * shifts one per channel zero-padded to a multiple of four (tinyaot_nn_mve.h). Filter offset 0 only. Same result
 * as tinyaot_fully_connected_s8 on the decoded weights, bit for bit; portable C on cores without MVE.
 *
 * Input rows in pairs (each stored block against both), a lone last row alone, read in place when the depth is a
 * multiple of 4 and the input 4-byte aligned (no scratch); otherwise each row is first copied into a column in the
 * scratch (2 * ceil4(depth) bytes, 4-byte aligned, the positions past the depth 0).
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_block.h"

int32_t tinyaot_fully_connected_s8_block_mve_get_buffer_size(const tinyaot_dims *filter_dims)
{
    return filter_dims->n % 4 == 0 ? 0 : 2 * ((filter_dims->n + 3) & ~3);
}

tinyaot_status tinyaot_fully_connected_s8_block_mve(TINYAOT_FC_ARGS(tinyaot_block_weights))
{
    const int32_t rows = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t d4 = (depth + 3) & ~3;
    const int32_t out_c = output_dims->c;
    const int in_place = (depth % 4 == 0);
    int8_t *col = NULL;
    tinyaot_mve_block_job job;
    int32_t b, i;
    (void)bias_dims;
    (void)per_channel;
    if (fc_params->filter_offset != 0 || bias == NULL || filter == NULL ||
        (in_place && ((uintptr_t)input & 3u) != 0)) {
        return TINYAOT_ARG_ERROR;
    }
    if (!in_place) {
        if (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 || ctx->size < 2 * d4) {
            return TINYAOT_ARG_ERROR;
        }
        col = (int8_t *)ctx->buf;
        for (i = depth; i < d4; i++) {
            col[i] = 0;
            col[d4 + i] = 0;
        }
    }
    (void)quant_params; /* per-row requantization words in bias (tinyaot_mve_block.h) */
    tinyaot_mve_block_job_of(&job, filter->values, bias, out_c, fc_params->output_offset, fc_params->activation.min,
                             fc_params->activation.max);
    for (b = 0; b < rows; b += 2) {
        const int two = (b + 1 < rows);
        const int8_t *xa = input + b * depth;
        const int8_t *xb = two ? xa + depth : xa;
        int8_t *out_a = output + b * out_c;
        if (!in_place) {
            for (i = 0; i < depth; i++) {
                col[i] = xa[i];
                col[d4 + i] = xb[i];
            }
            xa = col;
            xb = col + d4;
        }
        if (two) {
            tinyaot_mve_block_two(xa, xb, out_a, &job);
        } else {
            tinyaot_mve_block_one(xa, out_a, &job);
        }
    }
    return TINYAOT_OK;
}
