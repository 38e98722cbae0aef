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

static int32_t scaled_diff(int32_t diff, int32_t mult, int32_t shift)
{
    return tinyaot_srdhm(diff * ((int32_t)1 << shift), mult);
}

tinyaot_status tinyaot_softmax_s8(const int8_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                                  int32_t diff_min, int8_t *output)
{
    int32_t r;
    for (r = 0; r < num_rows; r++) {
        const int8_t *in = input + r * row_size;
        int8_t *out = output + r * row_size;
        int32_t max = -128;
        int32_t i;
        for (i = 0; i < row_size; i++) {
            max = tinyaot_max_i32(max, in[i]);
        }
        int32_t sum = 0; /* Q12.19 */
        for (i = 0; i < row_size; i++) {
            const int32_t diff = (int32_t)in[i] - max;
            if (diff >= diff_min) {
                const int32_t e = tinyaot_exp_on_negative_values(scaled_diff(diff, mult, shift));
                sum += tinyaot_rdbpot(e, TINYAOT_SOFTMAX_ACCUM_INT_BITS);
            }
        }
        /* sum >= 2^19 (the max element contributes exp(0)), so it has a leading one bit below bit 31 */
        const int32_t headroom = tinyaot_clz_u32((uint32_t)sum);
        const int32_t bits_over_unit = TINYAOT_SOFTMAX_ACCUM_INT_BITS - headroom;
        /* sum * 2^headroom is in [2^31, 2^32): as Q1.31 that is 1 + f; pass f in Q0.31 */
        const int32_t frac = (int32_t)(((uint32_t)sum << headroom) - 0x80000000u);
        const int32_t recip = tinyaot_one_over_one_plus_x(frac); /* 1/(1+f), Q0.31 */
        /* exp/sum = exp * recip * 2^-bits_over_unit; in units of 2^-8 that is a divide by 2^(bits_over_unit + 23) */
        const int32_t out_shift = bits_over_unit + 31 - 8;
        for (i = 0; i < row_size; i++) {
            const int32_t diff = (int32_t)in[i] - max;
            if (diff >= diff_min) {
                const int32_t e = tinyaot_exp_on_negative_values(scaled_diff(diff, mult, shift));
                const int32_t p = tinyaot_srdhm(recip, e); /* >= 0 */
                /* A divide by 2^32 or more of a value below 2^31 rounds to 0 (rows of over 512 near-equal values) */
                const int32_t q = out_shift > 31 ? 0 : tinyaot_rdbpot(p, out_shift);
                out[i] = (int8_t)tinyaot_clamp_i32(q - 128, -128, 127);
            } else {
                out[i] = -128;
            }
        }
    }
    return TINYAOT_OK;
}
