/* int8 transpose of a rank-4 tensor (lower ranks are padded with leading unit axes): output axis i is input
 * axis perm[i]. Output is written in order; the input is read with per-axis strides. */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_transpose_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t perm[4])
{
    int32_t in_stride[4];
    in_stride[3] = 1;
    for (int i = 2; i >= 0; i--) {
        in_stride[i] = in_stride[i + 1] * in_dims[i + 1];
    }
    const int32_t d0 = in_dims[perm[0]], d1 = in_dims[perm[1]], d2 = in_dims[perm[2]], d3 = in_dims[perm[3]];
    const int32_t s0 = in_stride[perm[0]], s1 = in_stride[perm[1]], s2 = in_stride[perm[2]], s3 = in_stride[perm[3]];
    for (int32_t a = 0; a < d0; a++) {
        for (int32_t b = 0; b < d1; b++) {
            for (int32_t c = 0; c < d2; c++) {
                const int8_t *src = input + a * s0 + b * s1 + c * s2;
                for (int32_t d = 0; d < d3; d++) {
                    *output++ = src[d * s3];
                }
            }
        }
    }
    return TINYAOT_OK;
}
