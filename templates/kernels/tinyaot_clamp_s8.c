/* Standalone ReLU/Clip on int8 data: clamp each element to [act_min, act_max]. The bounds are the quantized
 * float bounds under the tensor's own parameters, so no rescaling is needed. Safe in place (output == input). */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_clamp_s8(const int8_t *input, int8_t *output, int32_t size, int32_t act_min, int32_t act_max)
{
    for (int32_t i = 0; i < size; i++) {
        int32_t v = input[i];
        v = v < act_min ? act_min : v;
        v = v > act_max ? act_max : v;
        output[i] = (int8_t)v;
    }
    return TINYAOT_OK;
}
