/*
 * tinyaot_avgpool_s16: NHWC average pooling of int16 activations (zero point 0).
 *
 * geom = {batches, in_h, in_w, ch, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left, requant, mult,
 *         shift, act_min, act_max}. requant = 1 (every window full, no padding): the window sum is requantized by
 * (mult, shift) = s_in / (s_out * k_h * k_w) onto the output's own parameters (TFLite's integer MEAN). requant = 0:
 * sum / (real inputs in the window), rounded half away from zero, input parameters kept. The sum is int32:
 * |sum| <= 32768 * k_h * k_w, checked against 2^31 per layer at compile time (tinyaot/compress/bounds.py).
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_avgpool_s16(const int16_t *input, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], ch = geom[3], out_h = geom[4], out_w = geom[5];
    const int32_t k_h = geom[6], k_w = geom[7], stride_h = geom[8], stride_w = geom[9], pad_t = geom[10];
    const int32_t pad_l = geom[11], requant = geom[12], mult = geom[13], shift = geom[14];
    const int32_t act_min = geom[15], act_max = geom[16];
    if (stride_h <= 0 || stride_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b, oy, ox, c, ky, kx;
    for (b = 0; b < batches; b++) {
        for (oy = 0; oy < out_h; oy++) {
            for (ox = 0; ox < out_w; ox++) {
                int16_t *out = output + ((b * out_h + oy) * out_w + ox) * ch;
                for (c = 0; c < ch; c++) {
                    int32_t sum = 0, count = 0;
                    for (ky = 0; ky < k_h; ky++) {
                        const int32_t iy = oy * stride_h - pad_t + ky;
                        if (iy < 0 || iy >= in_h) {
                            continue;
                        }
                        for (kx = 0; kx < k_w; kx++) {
                            const int32_t ix = ox * stride_w - pad_l + kx;
                            if (ix < 0 || ix >= in_w) {
                                continue;
                            }
                            sum += input[((b * in_h + iy) * in_w + ix) * ch + c];
                            count++;
                        }
                    }
                    if (requant) {
                        if (count != k_h * k_w) {
                            return TINYAOT_ARG_ERROR; /* a requantizing pool has no padding */
                        }
                        out[c] = tinyaot_clamp_s16(tinyaot_requantize(sum, mult, shift), act_min, act_max);
                    } else {
                        if (count == 0) {
                            return TINYAOT_ARG_ERROR;
                        }
                        out[c] = tinyaot_clamp_s16(tinyaot_div_round_away(sum, count), act_min, act_max);
                    }
                }
            }
        }
    }
    return TINYAOT_OK;
}
