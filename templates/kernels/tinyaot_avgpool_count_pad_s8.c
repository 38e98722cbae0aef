/*
 * tinyaot_avgpool_count_pad_s8: int8 NHWC average pooling whose divisor counts the padded cells (ONNX AveragePool
 * with count_include_pad=1), keeping the input's quantization.
 *
 * A padded cell holds the real value 0, i.e. the input zero point, so it adds nothing to sum(x + input_offset); the
 * sum over the real cells is divided by the number of window cells inside the padded input, [-pad_top,
 * in_h + pad_end.h) x [-pad_left, in_w + pad_end.w) (a ceil_mode window can reach past that; those cells do not
 * count, as in onnxruntime), rounded to nearest with ties away from zero, and the zero point added back. The CMSIS
 * kernel (tinyaot_avgpool_s8) cannot do this: it divides by the real cells only, and with zero-point-free sums.
 * |sum| <= 255 * window size, so int32 cannot overflow. No scratch.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_avgpool_count_pad_s8(const tinyaot_pool_params *pool_params, const tinyaot_tile *pad_end,
                                            int32_t input_offset, const tinyaot_dims *input_dims, const int8_t *input,
                                            const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims, int8_t *output)
{
    tinyaot_window_geom g;
    if (tinyaot_pool_geom(&g, pool_params, input_dims, filter_dims, output_dims) != TINYAOT_OK || g.k_h <= 0 ||
        g.k_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t ch = g.in_c;
    const int32_t row_skip = g.in_w * ch;
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = tinyaot_window_image(&g, input, b);
        for (oy = 0; oy < g.out_h; oy++) {
            const tinyaot_span y = tinyaot_window_rows(&g, oy);
            const int32_t cells_y = tinyaot_min_i32(y.base + g.k_h, g.in_h + pad_end->h) - y.base;
            for (ox = 0; ox < g.out_w; ox++) {
                const tinyaot_span x = tinyaot_window_cols(&g, ox);
                const int32_t cells_x = tinyaot_min_i32(x.base + g.k_w, g.in_w + pad_end->w) - x.base;
                const int32_t rows = y.k1 - y.k0;
                const int32_t cols = x.k1 - x.k0;
                const int32_t count = cells_y * cells_x;
                /* every real cell carries input_offset once: add it per window, not per tap */
                const int32_t window_offset = input_offset * rows * cols;
                if (count <= 0) {
                    return TINYAOT_ARG_ERROR; /* pads or output size inconsistent with the input */
                }
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                /* a window wholly in the padding reads nothing (and forms no pointer past the input) */
                const int8_t *win = (rows > 0 && cols > 0) ? tinyaot_window_first_tap(&g, in_b, &y, &x) : in_b;
                int32_t c;
                for (c = 0; c < ch; c++) {
                    const int32_t s = window_offset + tinyaot_window_sum_s8(win + c, rows, cols, row_skip, ch);
                    const int32_t q = tinyaot_div_round_away(s, count) - input_offset;
                    out[c] = (int8_t)tinyaot_clamp_i32(q, g.act_min, g.act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
