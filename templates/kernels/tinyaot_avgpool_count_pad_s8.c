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
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t ch = input_dims->c;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = pool_params->stride.h;
    const int32_t stride_w = pool_params->stride.w;
    const int32_t pad_t = pool_params->padding.h;
    const int32_t pad_l = pool_params->padding.w;
    const int32_t act_min = pool_params->activation.min;
    const int32_t act_max = pool_params->activation.max;
    const int32_t row_skip = in_w * ch;

    if (output_dims->c != ch || stride_h <= 0 || stride_w <= 0 || k_h <= 0 || k_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * in_h * in_w * ch;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pad_t;
            const int32_t cells_y = tinyaot_min_i32(base_y + k_h, in_h + pad_end->h) - base_y;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, k_h, 1, in_h, &ky0, &ky1);
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t base_x = ox * stride_w - pad_l;
                const int32_t cells_x = tinyaot_min_i32(base_x + k_w, in_w + pad_end->w) - base_x;
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, k_w, 1, in_w, &kx0, &kx1);
                const int32_t count = cells_y * cells_x;
                /* every real cell carries input_offset once: add it per window, not per tap */
                const int32_t window_offset = input_offset * (ky1 - ky0) * (kx1 - kx0);
                if (count <= 0) {
                    return TINYAOT_ARG_ERROR; /* pads or output size inconsistent with the input */
                }
                int8_t *out = output + ((b * out_h + oy) * out_w + ox) * ch;
                /* a window wholly in the padding reads nothing (and forms no pointer past the input) */
                const int8_t *win =
                    (ky1 > ky0 && kx1 > kx0) ? in_b + ((base_y + ky0) * in_w + base_x + kx0) * ch : in_b;
                int32_t c;
                for (c = 0; c < ch; c++) {
                    const int32_t s =
                        window_offset + tinyaot_window_sum_s8(win + c, ky1 - ky0, kx1 - kx0, row_skip, ch);
                    const int32_t q = tinyaot_div_round_away(s, count) - input_offset;
                    out[c] = (int8_t)tinyaot_clamp_i32(q, act_min, act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
