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

TINYAOT_POOL_KERNEL(tinyaot_avgpool_s8, TINYAOT_POOL_AVG)
