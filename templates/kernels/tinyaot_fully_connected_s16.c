/*
 * tinyaot_fully_connected_s16: out[b, o] = requant_s64(bias[o] + sum_d in[b, d] * w[o, d]) with int16 input (zero
 * point 0), int8 per-channel weights [out][depth], int64 bias, TFLite's 16x8 scheme.
 *
 * geom = {batches, depth, out_ch, act_min, act_max}. Products are summed in int32 runs of at most
 * TINYAOT_S16_INT32_TERMS (no int32 overflow, tinyaot_s16_support.h), each run added to the int64 accumulator, whose
 * bound |bias| + sum|w| * 32768 < 2^47 is checked per layer at compile time (tinyaot/compress/bounds.py).
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_fully_connected_s16(const int16_t *input, const int8_t *filter, const int64_t *bias, const int32_t *mult,
                                           const int32_t *shift, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], depth = geom[1], out_ch = geom[2], act_min = geom[3], act_max = geom[4];
    int32_t b, o;
    for (b = 0; b < batches; b++) {
        const int16_t *x = input + b * depth;
        for (o = 0; o < out_ch; o++) {
            const int8_t *w = filter + o * depth;
            const int64_t acc = bias[o] + tinyaot_dot_s16_s8_long(x, w, depth);
            output[b * out_ch + o] = tinyaot_requantize_s16(acc, mult[o], shift[o], act_min, act_max);
        }
    }
    return TINYAOT_OK;
}
