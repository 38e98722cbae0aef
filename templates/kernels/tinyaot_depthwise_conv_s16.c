/*
 * tinyaot_depthwise_conv_s16: NHWC depthwise convolution with int16 activations (zero point 0), int8 per-channel
 * weights 1HWC (output channel c * ch_mult + m reads input channel c) and an int64 bias, TFLite's 16x8 scheme.
 *
 * geom = {batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
 *         dilation_h, dilation_w, act_min, act_max, ch_mult}.
 * Each output pixel visits its window's valid taps only (computed once per pixel) and accumulates a block of output
 * channels at a time, tap by tap, so the weights and inputs of a tap are read contiguously: with ch_mult 1 and at
 * most TINYAOT_S16_INT32_TERMS taps, four channels in int32 registers, otherwise up to 8 in int64. Products
 * |in * w| <= 32768 * 127 fit int32 and go into int64 accumulators, whose bound |bias| + sum|w| * 32768 < 2^47 is
 * checked per layer at compile time (tinyaot/compress/bounds.py). Returns TINYAOT_ARG_ERROR for inconsistent geometry.
 */
#include "tinyaot_s16_support.h"

#define TINYAOT_DW_S16_BLOCK 8

tinyaot_status tinyaot_depthwise_conv_s16(const int16_t *input, const int8_t *filter, const int64_t *bias, const int32_t *mult,
                                          const int32_t *shift, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], in_c = geom[3];
    const int32_t out_h = geom[4], out_w = geom[5], out_c = geom[6], k_h = geom[7], k_w = geom[8];
    const int32_t stride_h = geom[9], stride_w = geom[10], pad_t = geom[11], pad_l = geom[12];
    const int32_t dil_h = geom[13], dil_w = geom[14], act_min = geom[15], act_max = geom[16], ch_mult = geom[17];
    if (ch_mult <= 0 || out_c != in_c * ch_mult || stride_h <= 0 || stride_w <= 0 || dil_h <= 0 || dil_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    int64_t acc[TINYAOT_DW_S16_BLOCK];
    int32_t b, oy, ox, o0, j, ky, kx;
    for (b = 0; b < batches; b++) {
        for (oy = 0; oy < out_h; oy++) {
            const int32_t y0 = oy * stride_h - pad_t;
            int32_t ky_begin, ky_end;
            tinyaot_valid_taps(y0, k_h, dil_h, in_h, &ky_begin, &ky_end);
            for (ox = 0; ox < out_w; ox++) {
                const int32_t x0 = ox * stride_w - pad_l;
                int32_t kx_begin, kx_end;
                tinyaot_valid_taps(x0, k_w, dil_w, in_w, &kx_begin, &kx_end);
                int16_t *out = output + ((b * out_h + oy) * out_w + ox) * out_c;
                o0 = 0;
                if (ch_mult == 1 && k_h * k_w <= TINYAOT_S16_INT32_TERMS) {
                    /* four channels in int32 registers: a window of at most TINYAOT_S16_INT32_TERMS products each
                       cannot overflow int32 (tinyaot_s16_support.h); the bias joins in int64 */
                    for (; o0 + 4 <= out_c; o0 += 4) {
                        int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                        for (ky = ky_begin; ky < ky_end; ky++) {
                            const int32_t iy = y0 + ky * dil_h;
                            for (kx = kx_begin; kx < kx_end; kx++) {
                                const int16_t *x = input + ((b * in_h + iy) * in_w + x0 + kx * dil_w) * in_c + o0;
                                const int8_t *w = filter + (ky * k_w + kx) * out_c + o0;
                                s0 += (int32_t)x[0] * w[0];
                                s1 += (int32_t)x[1] * w[1];
                                s2 += (int32_t)x[2] * w[2];
                                s3 += (int32_t)x[3] * w[3];
                            }
                        }
                        out[o0] = tinyaot_requantize_s16(bias[o0] + s0, mult[o0], shift[o0], act_min, act_max);
                        out[o0 + 1] = tinyaot_requantize_s16(bias[o0 + 1] + s1, mult[o0 + 1], shift[o0 + 1], act_min,
                                                             act_max);
                        out[o0 + 2] = tinyaot_requantize_s16(bias[o0 + 2] + s2, mult[o0 + 2], shift[o0 + 2], act_min,
                                                             act_max);
                        out[o0 + 3] = tinyaot_requantize_s16(bias[o0 + 3] + s3, mult[o0 + 3], shift[o0 + 3], act_min,
                                                             act_max);
                    }
                }
                for (; o0 < out_c; o0 += TINYAOT_DW_S16_BLOCK) {
                    const int32_t n = out_c - o0 < TINYAOT_DW_S16_BLOCK ? out_c - o0 : TINYAOT_DW_S16_BLOCK;
                    for (j = 0; j < n; j++) {
                        acc[j] = bias[o0 + j];
                    }
                    for (ky = ky_begin; ky < ky_end; ky++) {
                        const int32_t iy = y0 + ky * dil_h;
                        for (kx = kx_begin; kx < kx_end; kx++) {
                            const int32_t ix = x0 + kx * dil_w;
                            const int16_t *x = input + ((b * in_h + iy) * in_w + ix) * in_c;
                            const int8_t *w = filter + (ky * k_w + kx) * out_c + o0;
                            if (ch_mult == 1) {
                                const int16_t *xo = x + o0;
                                for (j = 0; j < n; j++) {
                                    acc[j] += (int32_t)xo[j] * w[j];
                                }
                            } else {
                                for (j = 0; j < n; j++) {
                                    acc[j] += (int32_t)x[(o0 + j) / ch_mult] * w[j];
                                }
                            }
                        }
                    }
                    for (j = 0; j < n; j++) {
                        out[o0 + j] = tinyaot_requantize_s16(acc[j], mult[o0 + j], shift[o0 + j], act_min, act_max);
                    }
                }
            }
        }
    }
    return TINYAOT_OK;
}
