/*
 * tinyaot_max_pool_s8: int8 NHWC max pooling (TFLite int8 semantics, input and output share quantization).
 *
 * Each output is the maximum of the non-padding inputs in its window, clamped to the activation range; a window
 * wholly in the padding is an argument error. The loop is tinyaot_pool_s8 (tinyaot_window.h, shared with average
 * pooling): four channels per pass over a window; no scratch.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_max_pool_s8_get_buffer_size(int32_t output_w, int32_t ch)
{
    (void)output_w;
    (void)ch;
    return 0;
}

tinyaot_status tinyaot_max_pool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                   const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                   const tinyaot_dims *output_dims, int8_t *output)
{
    (void)ctx;
    return tinyaot_pool_s8(TINYAOT_POOL_MAX, pool_params, input_dims, input, filter_dims, output_dims, output);
}
