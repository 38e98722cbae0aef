/*
 * tinyaot_prelu_s8: PRelu with one slope per position of the middle axis of [outer][count][inner] (in NHWC with
 * count = C and inner = 1 a per-channel slope). x - zp_in >= 0 is rescaled to the output by the shared pos
 * multiplier (s_in / s_out); a negative value by the slope's own multiplier (s_in * slope / s_out), stored negated
 * for a negative slope, so the sign comes out of the fixed-point multiply itself.
 *
 * x - zp_in is first shifted left by left_shift (<= 23) so that the high multiply keeps fractional bits and the
 * result is rounded once rather than twice (tinyaot.ops.fixedpoint.multiplier_with_headroom).
 * Overflow: |x + input_offset| <= 255 and 255 * 2^23 < 2^31; the multipliers' magnitudes are below 2^31, so the
 * 64-bit product in tinyaot_requantize cannot overflow and the one saturating case of the doubling high multiply
 * (both operands -2^31) cannot occur.
 * Element i is read before output[i] is written, so output may equal input.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_prelu_s8(const int8_t *input, int8_t *output, int32_t outer, int32_t count, int32_t inner,
                                int32_t input_offset, int32_t output_offset, int32_t left_shift, int32_t pos_mult,
                                int32_t pos_shift, const int32_t *neg_mult, const int32_t *neg_shift, int32_t act_min,
                                int32_t act_max)
{
    if (outer < 0 || count < 1 || inner < 0 || left_shift < 0 || left_shift > 23) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t scale_up = (int32_t)1 << left_shift;
    int32_t o, k, j;
    for (o = 0; o < outer; o++) {
        for (k = 0; k < count; k++) {
            const int32_t nm = neg_mult[k];
            const int32_t ns = neg_shift[k];
            for (j = 0; j < inner; j++) {
                const int32_t x = ((int32_t)*input++ + input_offset) * scale_up;
                const int32_t y = x >= 0 ? tinyaot_requantize(x, pos_mult, pos_shift) : tinyaot_requantize(x, nm, ns);
                *output++ = (int8_t)tinyaot_clamp_i32(y + output_offset, act_min, act_max);
            }
        }
    }
    return TINYAOT_OK;
}
