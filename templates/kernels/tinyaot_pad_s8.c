/*
 * tinyaot_pad_s8: constant padding of a rank-4 int8 tensor (ONNX Pad, mode "constant"). The output keeps the
 * input's quantization parameters, so pad_value is the constant already quantized to the input's grid and the
 * input values are copied unchanged.
 *
 * The output is written in order: along the three outer axes a position in the padding is a run of pad_value as
 * long as the output's innermost block, otherwise the innermost axis is pre[3] pad values, a copy of one input row
 * and post[3] pad values. output may not overlap input.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_pad_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t pre[4],
                              const int32_t post[4], int8_t pad_value)
{
    int32_t out_dims[4];
    int32_t a;
    for (a = 0; a < 4; a++) {
        if (in_dims[a] < 0 || pre[a] < 0 || post[a] < 0) {
            return TINYAOT_ARG_ERROR;
        }
        out_dims[a] = pre[a] + in_dims[a] + post[a];
    }
    const int32_t row = out_dims[3];
    int32_t i0, i1, i2;
    for (i0 = 0; i0 < out_dims[0]; i0++) {
        const int in0 = i0 >= pre[0] && i0 < pre[0] + in_dims[0];
        for (i1 = 0; i1 < out_dims[1]; i1++) {
            const int in1 = in0 && i1 >= pre[1] && i1 < pre[1] + in_dims[1];
            for (i2 = 0; i2 < out_dims[2]; i2++) {
                const int in2 = in1 && i2 >= pre[2] && i2 < pre[2] + in_dims[2];
                if (!in2) {
                    memset(output, pad_value, (size_t)row);
                } else {
                    /* the input is read in order too: every inside position takes the next input row */
                    memset(output, pad_value, (size_t)pre[3]);
                    memcpy(output + pre[3], input, (size_t)in_dims[3]);
                    memset(output + pre[3] + in_dims[3], pad_value, (size_t)post[3]);
                    input += in_dims[3];
                }
                output += row;
            }
        }
    }
    return TINYAOT_OK;
}
