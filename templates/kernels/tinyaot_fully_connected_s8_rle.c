/*
 * tinyaot_fully_connected_s8_rle: tinyaot_fully_connected_s8 with run-length-sparse weights (tinyaot_rle_weights):
 * per output channel entries (run, value), run zeros then the value.
 *
 * Each entry advances the input pointer over its run and multiplies its value in: two byte loads, an add, an input
 * load and a multiply-accumulate per stored value, nothing per zero. Results equal tinyaot_fully_connected_s8.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_FC_DECODER int32_t rle_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                          int32_t x_off)
{
    const tinyaot_rle_weights *w = (const tinyaot_rle_weights *)weights;
    const uint8_t *r = w->runs + w->row_offsets[row];
    const int8_t *v = w->values + w->row_offsets[row];
    const int8_t *const v_end = w->values + w->row_offsets[row + 1];
    int32_t acc = 0;
    (void)depth;
    while (v < v_end) {
        x += *r++;
        acc += ((int32_t)*x++ + x_off) * *v++;
    }
    return acc;
}

tinyaot_status tinyaot_fully_connected_s8_rle(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                              const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                              const tinyaot_dims *input_dims, const int8_t *input,
                                              const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                              const tinyaot_dims *bias_dims, const int32_t *bias,
                                              const tinyaot_dims *output_dims, int8_t *output)
{
    (void)ctx;
    (void)bias_dims;
    return tinyaot_fc_run(fc_params, quant_params, per_channel, input_dims, input, filter_dims, filter, bias,
                          output_dims, output, rle_dot, NULL, 0);
}
