/*
 * tinyaot_abs_s8: y = |x| of an int8 tensor, requantized to the output's scale and zero point
 * (tinyaot/ops/abs.py has the numpy reference this matches bit for bit).
 *
 * v = |x + input_offset| with input_offset = -zp_in in [-127, 128], so 0 <= v <= 255. v is shifted left by
 * left_shift (<= 23) before the fixed-point multiply so the product keeps fractional bits and is rounded once:
 * 255 * 2^23 < 2^31, and the multiplier is below 2^31, so tinyaot_requantize's 64-bit product cannot overflow.
 * Element i is read before output[i] is written, so output may equal input.
 * Returns TINYAOT_ARG_ERROR (and writes nothing) for a negative size or a left shift outside [0, 23].
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_abs_s8(const int8_t *input, int8_t *output, int32_t size, int32_t input_offset, int32_t output_offset,
                              int32_t left_shift, int32_t mult, int32_t shift, int32_t act_min, int32_t act_max)
{
    if (size < 0 || left_shift < 0 || left_shift > 23) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t scale_up = (int32_t)1 << left_shift;
    int32_t i;
    for (i = 0; i < size; i++) {
        int32_t v = (int32_t)input[i] + input_offset;
        v = v < 0 ? -v : v;
        const int32_t y = tinyaot_requantize(v * scale_up, mult, shift);
        output[i] = (int8_t)tinyaot_clamp_i32(y + output_offset, act_min, act_max);
    }
    return TINYAOT_OK;
}
