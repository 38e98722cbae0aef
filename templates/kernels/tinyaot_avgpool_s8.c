/*
 * tinyaot_avgpool_s8: int8 NHWC average pooling (TFLite int8 semantics, input and output share quantization).
 *
 * Each output is the sum of the non-padding inputs in its window divided by their count, rounded to nearest with
 * ties away from zero (tinyaot_div_round_away), then clamped to the activation range. Dividing by the full window
 * size or rounding ties to even would both differ from TFLite. The loop is tinyaot_pool_s8 (tinyaot_window.h,
 * shared with max pooling): four channels summed per pass over a window; no scratch. The int32 sums cannot
 * overflow: |sum| <= 128 * window size.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_avgpool_s8_get_buffer_size(int32_t output_w, int32_t ch)
{
    (void)output_w;
    (void)ch;
    return 0;
}

tinyaot_status tinyaot_avgpool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                  const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                  const tinyaot_dims *output_dims, int8_t *output)
{
    (void)ctx;
    return tinyaot_pool_s8(TINYAOT_POOL_AVG, pool_params, input_dims, input, filter_dims, output_dims, output);
}
