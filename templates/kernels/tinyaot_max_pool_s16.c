/*
 * tinyaot_max_pool_s16: NHWC max pooling of int16 activations, keeping the input's parameters (TFLite's int16
 * MAX_POOL_2D). geom = {batches, in_h, in_w, ch, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
 * act_min, act_max}; padded taps are skipped (never the max). No arithmetic: comparisons only.
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_max_pool_s16(const int16_t *input, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], ch = geom[3], out_h = geom[4], out_w = geom[5];
    const int32_t k_h = geom[6], k_w = geom[7], stride_h = geom[8], stride_w = geom[9], pad_t = geom[10];
    const int32_t pad_l = geom[11], act_min = geom[12], act_max = geom[13];
    if (stride_h <= 0 || stride_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b, oy, ox, c, ky, kx;
    for (b = 0; b < batches; b++) {
        for (oy = 0; oy < out_h; oy++) {
            int32_t ky_begin, ky_end;
            tinyaot_valid_taps(oy * stride_h - pad_t, k_h, 1, in_h, &ky_begin, &ky_end);
            for (ox = 0; ox < out_w; ox++) {
                int32_t kx_begin, kx_end;
                tinyaot_valid_taps(ox * stride_w - pad_l, k_w, 1, in_w, &kx_begin, &kx_end);
                if (ky_begin >= ky_end || kx_begin >= kx_end) {
                    return TINYAOT_ARG_ERROR; /* a window entirely in the padding */
                }
                int16_t *out = output + ((b * out_h + oy) * out_w + ox) * ch;
                for (c = 0; c < ch; c++) {
                    int32_t m = -32768;
                    for (ky = ky_begin; ky < ky_end; ky++) {
                        const int16_t *row = input + ((b * in_h + oy * stride_h - pad_t + ky) * in_w) * ch + c;
                        for (kx = kx_begin; kx < kx_end; kx++) {
                            m = tinyaot_max_i32(m, row[(ox * stride_w - pad_l + kx) * ch]);
                        }
                    }
                    out[c] = tinyaot_clamp_s16(m, act_min, act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
