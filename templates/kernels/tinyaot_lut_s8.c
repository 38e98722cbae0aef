/*
 * tinyaot_lut_s8: a 256-entry int8 table lookup. An int8 tensor takes only 256 values, so any unary function of it
 * (sigmoid, tanh, hard-swish, hard-sigmoid, leaky ReLU) is exactly a table computed at compile time from the input's
 * and output's quantization parameters; the kernel is one load per element and needs no arithmetic at all.
 * Element i is read before output[i] is written, so output may equal input.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_lut_s8(const int8_t *input, int8_t *output, int32_t size, const int8_t *table)
{
    int32_t i;
    for (i = 0; i < size; i++) {
        /* -128..127 -> 0..255 */
        output[i] = table[(int32_t)input[i] + 128];
    }
    return TINYAOT_OK;
}
