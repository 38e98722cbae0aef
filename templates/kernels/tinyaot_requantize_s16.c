/*
 * tinyaot_requantize_s8_s16 / tinyaot_requantize_s16_s8: int8 <-> int16 between layers of different activation
 * widths (mixed precision). out = requant(in + input_offset, mult, shift) + output_offset, saturated to the output
 * type, with TFLite's 32-bit MultiplyByQuantizedMultiplier. |in + input_offset| <= 255 (int8) or 32768 (int16), and
 * the rescaled value plus the offset is checked against int32 at compile time (tinyaot/compress/bounds.py).
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_requantize_s8_s16(const int8_t *input, int32_t size, int32_t input_offset, int32_t mult, int32_t shift,
                                         int32_t output_offset, int16_t *output)
{
    int32_t i;
    for (i = 0; i < size; i++) {
        const int32_t v = tinyaot_requantize((int32_t)input[i] + input_offset, mult, shift) + output_offset;
        output[i] = tinyaot_clamp_s16(v, -32768, 32767);
    }
    return TINYAOT_OK;
}

tinyaot_status tinyaot_requantize_s16_s8(const int16_t *input, int32_t size, int32_t input_offset, int32_t mult, int32_t shift,
                                         int32_t output_offset, int8_t *output)
{
    int32_t i;
    for (i = 0; i < size; i++) {
        const int32_t v = tinyaot_requantize((int32_t)input[i] + input_offset, mult, shift) + output_offset;
        output[i] = (int8_t)tinyaot_clamp_i32(v, -128, 127);
    }
    return TINYAOT_OK;
}
