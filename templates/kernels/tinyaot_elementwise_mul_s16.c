/*
 * tinyaot_elementwise_mul_s16: TFLite's int16 MUL of two tensors with numpy broadcasting (zero points 0); numpy twin
 * elementwise_mul_s16 in tinyaot/ops/mul_s16.py.
 *
 * g = {dims[4], strides1[4], strides2[4], mult, shift, act_min, act_max}: the output is walked in the order of
 * dims (merged axes, row-major, so it is written contiguously) and each input is read at its own element strides
 * (0 where it repeats; tinyaot/ops/broadcast.py broadcast_geometry). The product of two int16 values is exact in
 * int32 (|a * b| <= 2^30) and is rescaled by mult / 2^shift with one rounding in int64
 * (tinyaot_requantize_exact_s64: |v| <= 2^30 <= 2^31). output may be in1 or in2 when that input has the output's
 * shape: element k is read before output k is written.
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_elementwise_mul_s16(const int16_t *in1, const int16_t *in2, const int32_t *g, int16_t *output)
{
    const int32_t *d = g, *s1 = g + 4, *s2 = g + 8;
    const int32_t mult = g[12], shift = g[13], act_min = g[14], act_max = g[15];
    int32_t i0, i1, i2, i3;
    if (mult < 0 || shift < 1 || shift > 62) {
        return TINYAOT_ARG_ERROR;
    }
    for (i0 = 0; i0 < d[0]; i0++) {
        for (i1 = 0; i1 < d[1]; i1++) {
            for (i2 = 0; i2 < d[2]; i2++) {
                const int16_t *a = in1 + i0 * s1[0] + i1 * s1[1] + i2 * s1[2];
                const int16_t *b = in2 + i0 * s2[0] + i1 * s2[1] + i2 * s2[2];
                for (i3 = 0; i3 < d[3]; i3++) {
                    const int32_t prod = (int32_t)a[i3 * s1[3]] * b[i3 * s2[3]];
                    *output++ = tinyaot_clamp64_s16(tinyaot_requantize_exact_s64(prod, mult, shift), act_min,
                                                    act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
