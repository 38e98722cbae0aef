/*
 * tinyaot_resize_nearest_s8: int8 NHWC nearest-neighbour resize through compile-time index maps.
 *
 * ONNX's coordinate transformation and rounding rules (float arithmetic) are evaluated once by the compiler, which
 * leaves, per spatial axis, the input index each output index copies; nearest resize is separable, so two maps of
 * out_h and out_w entries describe it completely. The kernel only copies channel runs: no arithmetic, no float, and
 * the output keeps the input's quantization. An output row that maps to the same input row as the previous one
 * (every row of an integer upscale but the first of each group) is copied from that finished row in one run.
 */
#include "tinyaot_nn.h"

static void copy_s8(int8_t *dst, const int8_t *src, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = src[i];
    }
}

tinyaot_status tinyaot_resize_nearest_s8(const int8_t *input, const tinyaot_dims *input_dims, const int32_t *y_map,
                                         const int32_t *x_map, const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t ch = input_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t out_row = out_w * ch;
    int32_t b;
    for (b = 0; b < input_dims->n; b++) {
        const int8_t *in_b = input + b * in_h * in_w * ch;
        int8_t *out_b = output + b * out_h * out_row;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            int8_t *out = out_b + oy * out_row;
            if (oy > 0 && y_map[oy] == y_map[oy - 1]) {
                copy_s8(out, out - out_row, out_row);
                continue;
            }
            const int8_t *in_row = in_b + y_map[oy] * in_w * ch;
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                copy_s8(out + ox * ch, in_row + x_map[ox] * ch, ch);
            }
        }
    }
    return TINYAOT_OK;
}
