/*
 * tinyaot_convolve_s8: int8 NHWC convolution with groups, stride, dilation and padding (TFLite/CMSIS-NN semantics).
 *
 * out[b, y, x, o] = requant(bias[o] + sum_{ky, kx, i} (in[b, y*sh - pt + ky*dh, x*sw - pl + kx*dw, g*Cg + i]
 *                                                      + input_offset) * w[o, ky, kx, i]),  g = o / (out_ch / groups)
 *
 * Padded positions hold the input zero point, i.e. contribute nothing, so the kernel simply loops over the valid
 * taps of each window (no im2col buffer, no scratch). Work is organised for operand reuse:
 *   - two output channels per pass over an input window (the input is loaded and offset once for both);
 *   - with one group, no horizontal dilation and a window not clipped horizontally, two horizontally adjacent output
 *     pixels are computed together (2 pixels x 2 channels, every load used twice), and each kernel row is one
 *     contiguous run of kw*in_ch bytes in both the NHWC input and the OHWI filter. 1x1 (pointwise) convolutions
 *     always take this path.
 * The accumulators are int32; see tinyaot_nn_support.h for the overflow bound.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_convolve_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

int tinyaot_convolve_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                        const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                        int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t out_c = filter_dims->n;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t ker_c = filter_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = conv_params->stride.h;
    const int32_t stride_w = conv_params->stride.w;
    const int32_t pad_t = conv_params->padding.h;
    const int32_t pad_l = conv_params->padding.w;
    const int32_t dil_h = conv_params->dilation.h;
    const int32_t dil_w = conv_params->dilation.w;
    const int32_t in_off = conv_params->input_offset;
    const int32_t out_off = conv_params->output_offset;
    const int32_t act_min = conv_params->activation.min;
    const int32_t act_max = conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    (void)ctx;
    (void)bias_dims;

    if (ker_c <= 0 || in_c % ker_c != 0 || output_dims->c != out_c || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0) {
        return -1;
    }
    const int32_t groups = in_c / ker_c;
    if (out_c % groups != 0) {
        return -1;
    }
    const int32_t out_c_g = out_c / groups;
    const int32_t filter_row = k_w * ker_c;      /* bytes of one kernel row of one output channel */
    const int32_t filter_size = k_h * filter_row; /* bytes of one output channel's filter */
    /* With one group and no horizontal dilation, the taps of a kernel row form one contiguous run. */
    const int row_runs = (groups == 1 && dil_w == 1);

    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + (int32_t)b * in_h * in_w * in_c;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pad_t;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, k_h, dil_h, in_h, &ky0, &ky1);
            int8_t *out_row = output + ((int32_t)b * out_h + oy) * out_w * out_c;
            int32_t ox = 0;
            while (ox < out_w) {
                const int32_t base_x = ox * stride_w - pad_l;
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, k_w, dil_w, in_w, &kx0, &kx1);
                int8_t *out_px = out_row + ox * out_c;

                if (row_runs && ox + 1 < out_w && kx0 == 0 && kx1 == k_w &&
                    base_x + stride_w + k_w - 1 < in_w) {
                    /* Two adjacent output pixels, both windows complete horizontally (same vertical clip). */
                    const int32_t pix_step = stride_w * in_c;
                    int8_t *out_px2 = out_px + out_c;
                    int32_t o;
                    for (o = 0; o + 1 < out_c; o += 2) {
                        const int32_t b0 = bias ? bias[o] : 0;
                        const int32_t b1 = bias ? bias[o + 1] : 0;
                        int32_t acc[4];
                        acc[0] = b0;
                        acc[1] = b1;
                        acc[2] = b0;
                        acc[3] = b1;
                        const int8_t *w0 = filter + o * filter_size;
                        int32_t ky;
                        for (ky = ky0; ky < ky1; ky++) {
                            const int8_t *xa = in_b + ((base_y + ky * dil_h) * in_w + base_x) * in_c;
                            const int8_t *wr = w0 + ky * filter_row;
                            tinyaot_dot2x2_s8(xa, xa + pix_step, wr, wr + filter_size, filter_row, in_off, acc);
                        }
                        out_px[o] = tinyaot_requantize_s8(acc[0], mult[o], shift[o], out_off, act_min, act_max);
                        out_px[o + 1] =
                            tinyaot_requantize_s8(acc[1], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
                        out_px2[o] = tinyaot_requantize_s8(acc[2], mult[o], shift[o], out_off, act_min, act_max);
                        out_px2[o + 1] =
                            tinyaot_requantize_s8(acc[3], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
                    }
                    if (o < out_c) { /* odd channel count: the last channel, both pixels */
                        int32_t acc_a = bias ? bias[o] : 0;
                        int32_t acc_b = acc_a;
                        const int8_t *w0 = filter + o * filter_size;
                        int32_t ky;
                        for (ky = ky0; ky < ky1; ky++) {
                            const int8_t *xa = in_b + ((base_y + ky * dil_h) * in_w + base_x) * in_c;
                            const int8_t *wr = w0 + ky * filter_row;
                            acc_a = tinyaot_dot_s8(xa, wr, filter_row, in_off, acc_a);
                            acc_b = tinyaot_dot_s8(xa + pix_step, wr, filter_row, in_off, acc_b);
                        }
                        out_px[o] = tinyaot_requantize_s8(acc_a, mult[o], shift[o], out_off, act_min, act_max);
                        out_px2[o] = tinyaot_requantize_s8(acc_b, mult[o], shift[o], out_off, act_min, act_max);
                    }
                    ox += 2;
                    continue;
                }

                /* One output pixel, any clipping, groups and dilation. */
                int32_t g;
                for (g = 0; g < groups; g++) {
                    const int32_t o_end = (g + 1) * out_c_g;
                    const int32_t in_g = g * ker_c; /* first input channel of the group */
                    int32_t o;
                    for (o = g * out_c_g; o < o_end; o += 2) {
                        const int two = (o + 1 < o_end);
                        int32_t acc0 = bias ? bias[o] : 0;
                        int32_t acc1 = (two && bias) ? bias[o + 1] : 0;
                        const int8_t *w0 = filter + o * filter_size;
                        int32_t ky;
                        for (ky = ky0; ky < ky1; ky++) {
                            const int8_t *in_r = in_b + (base_y + ky * dil_h) * in_w * in_c;
                            const int8_t *w_r = w0 + ky * filter_row;
                            if (row_runs) {
                                const int8_t *x = in_r + (base_x + kx0) * in_c;
                                const int8_t *w = w_r + kx0 * ker_c;
                                const int32_t n = (kx1 - kx0) * in_c;
                                if (two) {
                                    tinyaot_dot2_s8(x, w, w + filter_size, n, in_off, &acc0, &acc1);
                                } else {
                                    acc0 = tinyaot_dot_s8(x, w, n, in_off, acc0);
                                }
                            } else {
                                int32_t kx;
                                for (kx = kx0; kx < kx1; kx++) {
                                    const int8_t *x = in_r + (base_x + kx * dil_w) * in_c + in_g;
                                    const int8_t *w = w_r + kx * ker_c;
                                    if (two) {
                                        tinyaot_dot2_s8(x, w, w + filter_size, ker_c, in_off, &acc0, &acc1);
                                    } else {
                                        acc0 = tinyaot_dot_s8(x, w, ker_c, in_off, acc0);
                                    }
                                }
                            }
                        }
                        out_px[o] = tinyaot_requantize_s8(acc0, mult[o], shift[o], out_off, act_min, act_max);
                        if (two) {
                            out_px[o + 1] =
                                tinyaot_requantize_s8(acc1, mult[o + 1], shift[o + 1], out_off, act_min, act_max);
                        }
                    }
                }
                ox += 1;
            }
        }
    }
    return 0;
}
