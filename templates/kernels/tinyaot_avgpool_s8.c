/*
 * tinyaot_avgpool_s8: int8 NHWC average pooling (TFLite int8 semantics, input and output share quantization).
 *
 * Each output is the sum of the non-padding inputs in its window divided by their count, rounded to nearest with
 * ties away from zero (C division truncates toward zero, so half the count is added to or subtracted from the sum
 * first), then clamped to the activation range. Dividing by the full window size or rounding ties to even would
 * both differ from TFLite. Four channels are summed per pass over a window; no scratch is used.
 * The int32 sums cannot overflow: |sum| <= 128 * window size.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_avgpool_s8_get_buffer_size(int32_t output_w, int32_t ch)
{
    (void)output_w;
    (void)ch;
    return 0;
}

static int8_t average(int32_t sum, int32_t count, int32_t act_min, int32_t act_max)
{
    return (int8_t)tinyaot_clamp_i32(tinyaot_div_round_away(sum, count), act_min, act_max);
}

tinyaot_status tinyaot_avgpool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                  const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                  const tinyaot_dims *output_dims, int8_t *output)
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
    (void)ctx;

    if (output_dims->c != ch || stride_h <= 0 || stride_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * in_h * in_w * ch;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pad_t;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, k_h, 1, in_h, &ky0, &ky1);
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t base_x = ox * stride_w - pad_l;
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, k_w, 1, in_w, &kx0, &kx1);
                const int32_t count = (ky1 - ky0) * (kx1 - kx0);
                if (count == 0) {
                    return TINYAOT_ARG_ERROR; /* window entirely in the padding: no average exists */
                }
                int8_t *out = output + ((b * out_h + oy) * out_w + ox) * ch;
                const int8_t *win = in_b + ((base_y + ky0) * in_w + base_x + kx0) * ch;
                const int32_t row_skip = in_w * ch;
                int32_t c = 0;
                for (; c + 4 <= ch; c += 4) {
                    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = ky0; ky < ky1; ky++, r += row_skip) {
                        const int8_t *p = r;
                        int32_t kx;
                        for (kx = kx0; kx < kx1; kx++, p += ch) {
                            s0 += p[0];
                            s1 += p[1];
                            s2 += p[2];
                            s3 += p[3];
                        }
                    }
                    out[c] = average(s0, count, act_min, act_max);
                    out[c + 1] = average(s1, count, act_min, act_max);
                    out[c + 2] = average(s2, count, act_min, act_max);
                    out[c + 3] = average(s3, count, act_min, act_max);
                }
                for (; c < ch; c++) {
                    const int32_t s = tinyaot_window_sum_s8(win + c, ky1 - ky0, kx1 - kx0, row_skip, ch);
                    out[c] = average(s, count, act_min, act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
