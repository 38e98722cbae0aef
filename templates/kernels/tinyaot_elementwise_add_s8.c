/*
 * tinyaot_elementwise_add_s8: int8 + int8 -> int8 over block_size elements (TFLite int8 ADD).
 *
 * Each input is offset, shifted left by left_shift (20 from TFLite's preparation) for precision, rescaled to a
 * common scale (twice the larger input scale, so each multiplier is <= 1/2), the two are summed and the sum is
 * rescaled to the output. Overflow: |x + offset| <= 255 and 255 * 2^23 < 2^31, so left_shift <= 23 keeps the
 * shifted inputs in int32; the rescaled terms are each at most half of that, so their sum fits too.
 * Element i is read before output[i] is written, so output may equal input_1 or input_2 (in place).
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_elementwise_add_s8(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                                          int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                                          int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                                          int32_t out_offset, int32_t out_mult, int32_t out_shift, int32_t out_activation_min,
                                          int32_t out_activation_max, int32_t block_size)
{
    if (left_shift < 0 || left_shift > 23) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t scale_up = (int32_t)1 << left_shift;
    int32_t i;
    for (i = 0; i < block_size; i++) {
        const int32_t a = tinyaot_requantize(((int32_t)input_1[i] + input_1_offset) * scale_up, input_1_mult,
                                             input_1_shift);
        const int32_t b = tinyaot_requantize(((int32_t)input_2[i] + input_2_offset) * scale_up, input_2_mult,
                                             input_2_shift);
        output[i] =
            tinyaot_requantize_s8(a + b, out_mult, out_shift, out_offset, out_activation_min, out_activation_max);
    }
    return TINYAOT_OK;
}
