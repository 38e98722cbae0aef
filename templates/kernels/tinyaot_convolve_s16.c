/*
 * tinyaot_convolve_s16: NHWC convolution (standard or grouped) with int16 activations (zero point 0), int8
 * per-channel weights OHWI and an int64 bias, TFLite's 16x8 scheme.
 *
 * geom = {batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
 *         dilation_h, dilation_w, act_min, act_max, filter_c}; groups = in_c / filter_c.
 * out[b, y, x, o] = requant_s64(bias[o] + sum (in * w), mult[o], shift[o]) clamped to [act_min, act_max]; taps in
 * the padding contribute nothing (zero point 0), so each output pixel visits only its window's valid taps, computed
 * once per pixel. Each tap's filter_c products are summed in int32 runs of at most TINYAOT_S16_INT32_TERMS (no
 * int32 overflow, tinyaot_s16_support.h) and added to an int64 accumulator, whose bound |bias| + sum|w| * 32768
 * < 2^47 is checked per layer at compile time (tinyaot/compress/bounds.py), the range the int64 requantization
 * needs. Returns -1 for inconsistent geometry.
 */
#include "tinyaot_s16_support.h"

int tinyaot_convolve_s16(const int16_t *input, const int8_t *filter, const int64_t *bias, const int32_t *mult,
                         const int32_t *shift, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], in_c = geom[3];
    const int32_t out_h = geom[4], out_w = geom[5], out_c = geom[6], k_h = geom[7], k_w = geom[8];
    const int32_t stride_h = geom[9], stride_w = geom[10], pad_t = geom[11], pad_l = geom[12];
    const int32_t dil_h = geom[13], dil_w = geom[14], act_min = geom[15], act_max = geom[16], filter_c = geom[17];
    if (filter_c <= 0 || in_c % filter_c != 0 || out_c % (in_c / filter_c) != 0 || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0) {
        return -1;
    }
    const int32_t out_per_group = out_c / (in_c / filter_c);
    const int32_t filter_row = k_h * k_w * filter_c; /* one output channel's weights */
    int32_t b, oy, ox, o, ky, kx;
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
                for (o = 0; o < out_c; o++) {
                    const int16_t *in_g = input + (o / out_per_group) * filter_c;
                    const int8_t *w_o = filter + o * filter_row;
                    int64_t acc = bias[o];
                    for (ky = ky_begin; ky < ky_end; ky++) {
                        const int32_t iy = y0 + ky * dil_h;
                        for (kx = kx_begin; kx < kx_end; kx++) {
                            const int32_t ix = x0 + kx * dil_w;
                            acc += tinyaot_dot_s16_s8_long(in_g + ((b * in_h + iy) * in_w + ix) * in_c,
                                                           w_o + (ky * k_w + kx) * filter_c, filter_c);
                        }
                    }
                    out[o] = tinyaot_requantize_s16(acc, mult[o], shift[o], act_min, act_max);
                }
            }
        }
    }
    return 0;
}
