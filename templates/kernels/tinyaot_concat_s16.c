/*
 * tinyaot_concat_s16: one int16 input of a concatenation (numpy twin concat_s16 in
 * tinyaot/ops/concat_s16.py). Seen as [outer][inner] rows (outer = product of the axes before the concat axis,
 * inner = the concat axis times the axes after it), the input's rows go to columns [out_pos, out_pos + in_inner) of
 * the output's rows; the generated code calls this once per input.
 *
 * An input on the output's scale is copied; any other is rescaled by mult / 2^shift with one rounding in int64
 * (tinyaot_requantize_exact_s64: |x| <= 2^15) and saturated to int16. output may not overlap input.
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_concat_s16(const int16_t *input, int32_t outer, int32_t in_inner, int32_t out_inner, int32_t out_pos,
                                  int32_t requantize, int32_t mult, int32_t shift, int16_t *output)
{
    int32_t o, i;
    if (outer < 0 || in_inner < 0 || out_pos < 0 || out_pos + in_inner > out_inner || mult < 0 || shift < 1 ||
        shift > 62) {
        return TINYAOT_ARG_ERROR;
    }
    output += out_pos;
    for (o = 0; o < outer; o++) {
        if (!requantize) {
            memcpy(output, input, (size_t)in_inner * sizeof(int16_t));
        } else {
            for (i = 0; i < in_inner; i++) {
                output[i] = tinyaot_clamp64_s16(tinyaot_requantize_exact_s64(input[i], mult, shift), -32768, 32767);
            }
        }
        input += in_inner;
        output += out_inner;
    }
    return TINYAOT_OK;
}
