/*
 * tinyaot_depthwise_conv_s8: int8 NHWC depthwise convolution with channel multiplier, stride, dilation, padding.
 *
 * out[b, y, x, c*M + m] = requant(bias[c*M + m] + sum_{ky, kx} (in[b, y*sh - pt + ky*dh, x*sw - pl + kx*dw, c]
 *                                                               + input_offset) * w[0, ky, kx, c*M + m])
 *
 * Only the valid taps of each window are visited (padding holds the zero point and contributes nothing). Four
 * output channels are accumulated at once: four consecutive channels when M == 1 (four input bytes and four filter
 * bytes per tap, which the DSP path unpacks with SXTB16 and multiplies lane by lane with SMLABB/SMLATT), or four
 * multipliers of one input channel when M > 1. No scratch. int32 accumulators: see tinyaot_nn_support.h.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_depthwise_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

int tinyaot_depthwise_conv_s8(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                              const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                              const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                              const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                              int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t out_c = filter_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t ch_mult = dw_conv_params->ch_mult;
    const int32_t stride_h = dw_conv_params->stride.h;
    const int32_t stride_w = dw_conv_params->stride.w;
    const int32_t pad_t = dw_conv_params->padding.h;
    const int32_t pad_l = dw_conv_params->padding.w;
    const int32_t dil_h = dw_conv_params->dilation.h;
    const int32_t dil_w = dw_conv_params->dilation.w;
    const int32_t in_off = dw_conv_params->input_offset;
    const int32_t out_off = dw_conv_params->output_offset;
    const int32_t act_min = dw_conv_params->activation.min;
    const int32_t act_max = dw_conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    (void)ctx;
    (void)bias_dims;

    if (ch_mult <= 0 || out_c != in_c * ch_mult || output_dims->c != out_c || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0) {
        return -1;
    }
    const int32_t in_row = in_w * in_c;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(in_off);
#endif

    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + (int32_t)b * in_h * in_row;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pad_t;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, k_h, dil_h, in_h, &ky0, &ky1);
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t base_x = ox * stride_w - pad_l;
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, k_w, dil_w, in_w, &kx0, &kx1);
                int8_t *out_px = output + (((int32_t)b * out_h + oy) * out_w + ox) * out_c;
                int32_t oc = 0; /* next output channel to produce */

                if (ch_mult == 1) {
                    /* four consecutive channels per pass */
                    for (; oc + 4 <= out_c; oc += 4) {
                        int32_t a0 = bias ? bias[oc] : 0;
                        int32_t a1 = bias ? bias[oc + 1] : 0;
                        int32_t a2 = bias ? bias[oc + 2] : 0;
                        int32_t a3 = bias ? bias[oc + 3] : 0;
                        int32_t ky;
                        for (ky = ky0; ky < ky1; ky++) {
                            const int8_t *in_r = in_b + (base_y + ky * dil_h) * in_row + oc;
                            const int8_t *w_r = filter + ky * k_w * out_c + oc;
                            int32_t kx;
                            for (kx = kx0; kx < kx1; kx++) {
                                const int8_t *x = in_r + (base_x + kx * dil_w) * in_c;
                                const int8_t *w = w_r + kx * out_c;
#if TINYAOT_USE_DSP
                                const int32_t xv = tinyaot_read_s8x4(x);
                                const int32_t wv = tinyaot_read_s8x4(w);
                                const int32_t x02 = __sxtab16(off2, xv);
                                const int32_t x13 = __sxtab16(off2, (int32_t)((uint32_t)xv >> 8));
                                const int32_t w02 = __sxtb16(wv);
                                const int32_t w13 = __sxtb16((int32_t)((uint32_t)wv >> 8));
                                a0 = __smlabb(x02, w02, a0);
                                a2 = __smlatt(x02, w02, a2);
                                a1 = __smlabb(x13, w13, a1);
                                a3 = __smlatt(x13, w13, a3);
#else
                                a0 += ((int32_t)x[0] + in_off) * w[0];
                                a1 += ((int32_t)x[1] + in_off) * w[1];
                                a2 += ((int32_t)x[2] + in_off) * w[2];
                                a3 += ((int32_t)x[3] + in_off) * w[3];
#endif
                            }
                        }
                        out_px[oc] = tinyaot_requantize_s8(a0, mult[oc], shift[oc], out_off, act_min, act_max);
                        out_px[oc + 1] =
                            tinyaot_requantize_s8(a1, mult[oc + 1], shift[oc + 1], out_off, act_min, act_max);
                        out_px[oc + 2] =
                            tinyaot_requantize_s8(a2, mult[oc + 2], shift[oc + 2], out_off, act_min, act_max);
                        out_px[oc + 3] =
                            tinyaot_requantize_s8(a3, mult[oc + 3], shift[oc + 3], out_off, act_min, act_max);
                    }
                } else if (ch_mult % 4 == 0) {
                    /* four multipliers of one input channel per pass: one input byte, four filter bytes per tap */
                    for (; oc < out_c; oc += 4) {
                        const int32_t ic = oc / ch_mult;
                        int32_t a0 = bias ? bias[oc] : 0;
                        int32_t a1 = bias ? bias[oc + 1] : 0;
                        int32_t a2 = bias ? bias[oc + 2] : 0;
                        int32_t a3 = bias ? bias[oc + 3] : 0;
                        int32_t ky;
                        for (ky = ky0; ky < ky1; ky++) {
                            const int8_t *in_r = in_b + (base_y + ky * dil_h) * in_row + ic;
                            const int8_t *w_r = filter + ky * k_w * out_c + oc;
                            int32_t kx;
                            for (kx = kx0; kx < kx1; kx++) {
                                const int32_t xv = (int32_t)in_r[(base_x + kx * dil_w) * in_c] + in_off;
                                const int8_t *w = w_r + kx * out_c;
                                a0 += xv * w[0];
                                a1 += xv * w[1];
                                a2 += xv * w[2];
                                a3 += xv * w[3];
                            }
                        }
                        out_px[oc] = tinyaot_requantize_s8(a0, mult[oc], shift[oc], out_off, act_min, act_max);
                        out_px[oc + 1] =
                            tinyaot_requantize_s8(a1, mult[oc + 1], shift[oc + 1], out_off, act_min, act_max);
                        out_px[oc + 2] =
                            tinyaot_requantize_s8(a2, mult[oc + 2], shift[oc + 2], out_off, act_min, act_max);
                        out_px[oc + 3] =
                            tinyaot_requantize_s8(a3, mult[oc + 3], shift[oc + 3], out_off, act_min, act_max);
                    }
                }

                /* whatever is left: one output channel at a time */
                for (; oc < out_c; oc++) {
                    const int32_t ic = oc / ch_mult;
                    int32_t acc = bias ? bias[oc] : 0;
                    int32_t ky;
                    for (ky = ky0; ky < ky1; ky++) {
                        const int8_t *in_r = in_b + (base_y + ky * dil_h) * in_row + ic;
                        const int8_t *w_r = filter + ky * k_w * out_c + oc;
                        int32_t kx;
                        for (kx = kx0; kx < kx1; kx++) {
                            acc += ((int32_t)in_r[(base_x + kx * dil_w) * in_c] + in_off) * w_r[kx * out_c];
                        }
                    }
                    out_px[oc] = tinyaot_requantize_s8(acc, mult[oc], shift[oc], out_off, act_min, act_max);
                }
            }
        }
    }
    return 0;
}
