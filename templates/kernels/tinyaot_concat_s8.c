/*
 * tinyaot_concat_s8: one input of a concatenation. Seen as [outer][inner] rows (outer = product of the axes before
 * the concat axis, inner = the concat axis times the axes after it), concatenation places each input's row at its
 * own column range of the output's row; the generated code calls this once per input.
 *
 * An input with the output's scale and zero point is copied; any other is requantized with TFLite's fixed-point
 * rescale: output_offset + (x + input_offset) * s_in / s_out, saturated to int8, with x + input_offset shifted left
 * by left_shift (<= 23) first so the high multiply keeps fractional bits and the result is rounded once.
 * |x + input_offset| <= 255 and 255 * 2^23 < 2^31, and tinyaot_requantize saturates a positive shift, so nothing
 * overflows even for s_in much larger than s_out.
 * output may not overlap input.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_concat_s8(const int8_t *input, int32_t outer, int32_t in_inner, int32_t out_inner, int32_t out_pos,
                                 int32_t requantize, int32_t input_offset, int32_t left_shift, int32_t mult, int32_t shift,
                                 int32_t output_offset, int8_t *output)
{
    if (outer < 0 || in_inner < 0 || out_pos < 0 || out_pos + in_inner > out_inner || left_shift < 0 ||
        left_shift > 23) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t scale_up = (int32_t)1 << left_shift;
    int32_t o, i;
    output += out_pos;
    for (o = 0; o < outer; o++) {
        if (!requantize) {
            memcpy(output, input, (size_t)in_inner);
        } else {
            for (i = 0; i < in_inner; i++) {
                output[i] = tinyaot_requantize_s8(((int32_t)input[i] + input_offset) * scale_up, mult, shift,
                                                  output_offset, -128, 127);
            }
        }
        input += in_inner;
        output += out_inner;
    }
    return TINYAOT_OK;
}
