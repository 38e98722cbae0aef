/*
 * tinyaot_elementwise_add_s16: TFLite's int16 ADD of two same-shape tensors (zero points 0).
 *
 * p = {input1_mult, input1_shift, input2_mult, input2_shift, left_shift, output_mult, output_shift, act_min,
 * act_max}. Each input is scaled by 2^left_shift (15: |x| * 2^15 <= 2^30, computed as a product, no shift of a
 * negative value), rescaled to twice the larger input scale (multipliers <= 1/2, so each term is at most 2^29 and
 * their sum at most 2^30), and the sum is rescaled to the output scale; bounds checked at compile time.
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_elementwise_add_s16(const int16_t *in1, const int16_t *in2, const int32_t *p, int32_t size,
                                           int16_t *output)
{
    const int32_t scale = (int32_t)1 << p[4];
    int32_t i;
    if (p[4] < 0 || p[4] > 15) {
        return TINYAOT_ARG_ERROR;
    }
    for (i = 0; i < size; i++) {
        const int32_t a = tinyaot_requantize((int32_t)in1[i] * scale, p[0], p[1]);
        const int32_t b = tinyaot_requantize((int32_t)in2[i] * scale, p[2], p[3]);
        output[i] = tinyaot_clamp_s16(tinyaot_requantize(a + b, p[5], p[6]), p[7], p[8]);
    }
    return TINYAOT_OK;
}
