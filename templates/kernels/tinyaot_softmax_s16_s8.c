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

static int32_t scaled_diff16(int32_t diff, int32_t mult, int32_t shift)
{
    return tinyaot_srdhm(diff * ((int32_t)1 << shift), mult);
}

tinyaot_status tinyaot_softmax_s16_s8(const int16_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                                      int32_t diff_min, int8_t *output)
{
    int32_t r;
    if (shift < 0 || shift > 30) {
        return TINYAOT_ARG_ERROR;
    }
    for (r = 0; r < num_rows; r++) {
        const int16_t *in = input + r * row_size;
        int8_t *out = output + r * row_size;
        int32_t max = -32768;
        int32_t i;
        for (i = 0; i < row_size; i++) {
            max = tinyaot_max_i32(max, in[i]);
        }
        int32_t sum = 0; /* Q12.19 */
        for (i = 0; i < row_size; i++) {
            const int32_t diff = (int32_t)in[i] - max;
            if (diff >= diff_min) {
                sum += tinyaot_rdbpot(tinyaot_exp_on_negative_values(scaled_diff16(diff, mult, shift)),
                                      TINYAOT_SOFTMAX_ACCUM_INT_BITS);
            }
        }
        /* sum >= 2^19 (the max element contributes exp(0)): a leading one bit below bit 31 */
        const int32_t headroom = tinyaot_clz_u32((uint32_t)sum);
        const int32_t bits_over_unit = TINYAOT_SOFTMAX_ACCUM_INT_BITS - headroom;
        const int32_t frac = (int32_t)(((uint32_t)sum << headroom) - 0x80000000u);
        const int32_t recip = tinyaot_one_over_one_plus_x(frac); /* 1/(1+f), Q0.31 */
        const int32_t out_shift = bits_over_unit + 31 - 8;
        for (i = 0; i < row_size; i++) {
            const int32_t diff = (int32_t)in[i] - max;
            if (diff >= diff_min) {
                const int32_t e = tinyaot_exp_on_negative_values(scaled_diff16(diff, mult, shift));
                const int32_t p = tinyaot_srdhm(recip, e);
                const int32_t q = out_shift > 31 ? 0 : tinyaot_rdbpot(p, out_shift);
                out[i] = (int8_t)tinyaot_clamp_i32(q - 128, -128, 127);
            } else {
                out[i] = -128;
            }
        }
    }
    return TINYAOT_OK;
}
