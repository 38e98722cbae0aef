/*
 * tinyaot_max_pool_s8: int8 NHWC max pooling (TFLite int8 semantics, input and output share quantization).
 *
 * Each output is the maximum of the non-padding inputs in its window, clamped to the activation range; a window
 * wholly in the padding is an argument error. The loop is tinyaot_pool_s8 (tinyaot_window.h, shared with average
 * pooling): four channels per pass over a window; no scratch.
 */
#include "tinyaot_nn.h"

TINYAOT_POOL_KERNEL(tinyaot_max_pool_s8, TINYAOT_POOL_MAX)
