/*
 * tinyaot_softmax_s16_s8: TFLite's integer softmax (the fixed point of tinyaot_softmax_s8) over rows of int16
 * logits, int8 probabilities out (scale 1/256, zero point -128): the last layer of a 16x8 classifier.
 *
 * d = x - max is in [-65535, 0]; differences below diff_min give exp = 0, and diff_min is chosen so that
 * d * 2^shift fits int32 for the others (tinyaot/core/fixedpoint.py softmax_params), exactly as for int8 input.
 * The sum of exps is Q12.19 with at most 4095 terms of value <= 1 (row size checked at compile time). Element i is
 * read before output[i] is written, but the output is int8 and the input int16, so they never share bytes.
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_softmax_s16_s8(const int16_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                                      int32_t diff_min, int8_t *output)
{
    if (shift < 0 || shift > 30) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_SOFTMAX_ROWS(int16_t, input, num_rows, row_size, -32768, mult, shift, diff_min, output);
    return TINYAOT_OK;
}
