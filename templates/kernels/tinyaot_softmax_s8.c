/*
 * tinyaot_softmax_s8: TFLite's integer softmax, int8 in, int8 out (scale 1/256, zero point -128).
 *
 * Per row: d = x - max <= 0. Differences below diff_min would not survive the rescale and give exp = 0 (output
 * -128). The others are rescaled to Q5.26 by mult * 2^shift (diff_min guarantees d * 2^shift fits int32, so the
 * left shift needs no saturation) and exponentiated in fixed point (Q0.31). The exps are summed in Q12.19 (each
 * rounded from Q0.31; at most 4095 terms of value <= 1 keep the int32 sum below 2^31). The sum is normalised to
 * [1, 2) by its leading zeros and inverted by Newton-Raphson; each exp times that reciprocal is rounded to units of
 * 1/256. Two passes recompute the exps instead of storing them, so no scratch is needed, and because element i is
 * read before output[i] is written (after the max and the sum are complete) the output may equal the input.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_softmax_s8(const int8_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                                  int32_t diff_min, int8_t *output)
{
    TINYAOT_SOFTMAX_ROWS(int8_t, input, num_rows, row_size, -128, mult, shift, diff_min, output);
    return TINYAOT_OK;
}
