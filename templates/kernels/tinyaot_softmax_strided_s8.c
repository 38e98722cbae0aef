/*
 * tinyaot_softmax_strided_s8: the int8 softmax of tinyaot_softmax_s8 (TFLite's integer softmax, output scale 1/256,
 * zero point -128) along an axis that is not the innermost one: the tensor is [outer, axis_len, inner] and each of
 * the outer * inner rows reads its axis_len elements `inner` apart. No transpose is needed before or after.
 *
 * The arithmetic is that of tinyaot_softmax_s8 step for step (same Q5.26 rescale, Q0.31 exp, Q12.19 sum of at most
 * 4095 terms, Newton-Raphson reciprocal, rounding to 1/256), so the two kernels agree bit for bit on the same row.
 * A row's elements are all read (max, sum) before any of them is written, and rows do not share elements, so the
 * output may equal the input.
 */
#include "tinyaot_nn.h"

static void strided_row(const int8_t *in, int8_t *out, int32_t len, int32_t stride, int32_t mult, int32_t shift,
                        int32_t diff_min)
{
    int32_t max = -128;
    int32_t i;
    for (i = 0; i < len; i++) {
        max = tinyaot_max_i32(max, in[i * stride]);
    }
    int32_t sum = 0; /* Q12.19 */
    for (i = 0; i < len; i++) {
        const int32_t diff = (int32_t)in[i * stride] - max;
        if (diff >= diff_min) {
            sum += tinyaot_rdbpot(tinyaot_softmax_exp(diff, mult, shift), TINYAOT_SOFTMAX_ACCUM_INT_BITS);
        }
    }
    const int32_t recip = tinyaot_softmax_recip(sum);
    const int32_t out_shift = tinyaot_softmax_shift(sum);
    for (i = 0; i < len; i++) {
        const int32_t diff = (int32_t)in[i * stride] - max;
        int32_t q = -128;
        if (diff >= diff_min) {
            const int32_t e = tinyaot_softmax_exp(diff, mult, shift);
            const int32_t p = tinyaot_srdhm(recip, e);
            /* a divide by 2^32 or more of a value below 2^31 rounds to 0 */
            q = tinyaot_clamp_i32((out_shift > 31 ? 0 : tinyaot_rdbpot(p, out_shift)) - 128, -128, 127);
        }
        out[i * stride] = (int8_t)q;
    }
}

tinyaot_status tinyaot_softmax_strided_s8(const int8_t *input, int32_t outer, int32_t axis_len, int32_t inner, int32_t mult,
                                          int32_t shift, int32_t diff_min, int8_t *output)
{
    int32_t o, i;
    for (o = 0; o < outer; o++) {
        for (i = 0; i < inner; i++) {
            const int32_t base = o * axis_len * inner + i;
            strided_row(input + base, output + base, axis_len, inner, mult, shift, diff_min);
        }
    }
    return TINYAOT_OK;
}
