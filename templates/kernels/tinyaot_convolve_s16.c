/*
 * tinyaot_convolve_s16: NHWC convolution (standard or grouped) with int16 activations (zero point 0), int8
 * per-channel weights OHWI and an int64 bias, TFLite's 16x8 scheme.
 *
 * geom = {batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
 *         dilation_h, dilation_w, act_min, act_max, filter_c}; groups = in_c / filter_c.
 * out[b, y, x, o] = requant_s64(bias[o] + sum (in * w), mult[o], shift[o]) clamped to [act_min, act_max]; taps in
 * the padding contribute nothing (zero point 0). Each product |in * w| <= 32768 * 127 fits int32 and is added to an
 * int64 accumulator, whose bound |bias| + sum|w| * 32768 < 2^47 is checked per layer at compile time
 * (tinyaot/compress/bounds.py), the range the int64 requantization needs. Returns -1 for inconsistent geometry.
 */
#include "tinyaot_s16_support.h"

int tinyaot_convolve_s16(const int16_t *input, const int8_t *filter, const int64_t *bias, const int32_t *mult,
                         const int32_t *shift, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], in_c = geom[3];
    const int32_t out_h = geom[4], out_w = geom[5], out_c = geom[6], k_h = geom[7], k_w = geom[8];
    const int32_t stride_h = geom[9], stride_w = geom[10], pad_t = geom[11], pad_l = geom[12];
    const int32_t dil_h = geom[13], dil_w = geom[14], act_min = geom[15], act_max = geom[16], filter_c = geom[17];
    if (filter_c <= 0 || in_c % filter_c != 0 || out_c % (in_c / filter_c) != 0 || stride_h <= 0 || stride_w <= 0) {
        return -1;
    }
    const int32_t out_per_group = out_c / (in_c / filter_c);
    int32_t b, oy, ox, o, ky, kx, i;
    for (b = 0; b < batches; b++) {
        for (oy = 0; oy < out_h; oy++) {
            for (ox = 0; ox < out_w; ox++) {
                int16_t *out = output + ((b * out_h + oy) * out_w + ox) * out_c;
                for (o = 0; o < out_c; o++) {
                    const int32_t g = o / out_per_group;
                    int64_t acc = bias[o];
                    for (ky = 0; ky < k_h; ky++) {
                        const int32_t iy = oy * stride_h - pad_t + ky * dil_h;
                        if (iy < 0 || iy >= in_h) {
                            continue;
                        }
                        for (kx = 0; kx < k_w; kx++) {
                            const int32_t ix = ox * stride_w - pad_l + kx * dil_w;
                            if (ix < 0 || ix >= in_w) {
                                continue;
                            }
                            const int16_t *x = input + ((b * in_h + iy) * in_w + ix) * in_c + g * filter_c;
                            const int8_t *w = filter + ((o * k_h + ky) * k_w + kx) * filter_c;
                            for (i = 0; i < filter_c; i++) {
                                acc += (int32_t)x[i] * (int32_t)w[i];
                            }
                        }
                    }
                    out[o] = tinyaot_requantize_s16(acc, mult[o], shift[o], act_min, act_max);
                }
            }
        }
    }
    return 0;
}
