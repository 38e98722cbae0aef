/*
 * tinyaot_index_copy_s8: output[i] = input[src[i]] for i < size, a data movement (Slice, Split, Gather with
 * constant indices, Expand) given as a constant source map computed at compile time (tinyaot/ops/index_copy.py has
 * the numpy reference). Every index is checked against input_size before any byte is written, so a corrupt map
 * cannot read outside the input; output and input must not overlap (the planner never aliases them).
 * Returns TINYAOT_ARG_ERROR (and writes nothing) for a negative size or an index outside [0, input_size).
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_index_copy_s8(const int8_t *input, int8_t *output, const int32_t *src, int32_t size, int32_t input_size)
{
    int32_t i;
    if (size < 0) {
        return TINYAOT_ARG_ERROR;
    }
    for (i = 0; i < size; i++) {
        if (src[i] < 0 || src[i] >= input_size) {
            return TINYAOT_ARG_ERROR;
        }
    }
    for (i = 0; i < size; i++) {
        output[i] = input[src[i]];
    }
    return TINYAOT_OK;
}
