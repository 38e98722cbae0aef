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
 * needs. Returns TINYAOT_ARG_ERROR for inconsistent geometry.
 */
#include "tinyaot_s16_support.h"

/* Four output channels of one pixel (filters w, w + row, w + 2 row, w + 3 row; one group). Each channel's window
   products are summed in int32 over at most TINYAOT_S16_INT32_TERMS of them (the count `run`), then added to its
   int64 accumulator, so no int32 sum can overflow whatever the window size. */
static void block4(const int16_t *in_b, int32_t in_w, int32_t in_c, const int8_t *w, int32_t row, int32_t k_w,
                   int32_t y0, int32_t x0, int32_t dil_h, int32_t dil_w, int32_t ky_begin, int32_t ky_end,
                   int32_t kx_begin, int32_t kx_end, const int64_t *bias, const int32_t *mult, const int32_t *shift,
                   int32_t act_min, int32_t act_max, int16_t *out)
{
    int64_t a0 = bias[0], a1 = bias[1], a2 = bias[2], a3 = bias[3];
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, run = 0;
    int32_t ky, kx, i;
    for (ky = ky_begin; ky < ky_end; ky++) {
        const int32_t iy = y0 + ky * dil_h;
        for (kx = kx_begin; kx < kx_end; kx++) {
            const int16_t *x = in_b + (iy * in_w + x0 + kx * dil_w) * in_c;
            const int8_t *w0 = w + (ky * k_w + kx) * in_c;
            const int8_t *w1 = w0 + row;
            const int8_t *w2 = w1 + row;
            const int8_t *w3 = w2 + row;
            if (in_c <= TINYAOT_S16_INT32_TERMS) {
                if (run + in_c > TINYAOT_S16_INT32_TERMS) { /* this tap would pass the int32 bound: flush first */
                    a0 += s0;
                    a1 += s1;
                    a2 += s2;
                    a3 += s3;
                    s0 = s1 = s2 = s3 = run = 0;
                }
                i = 0;
#if TINYAOT_USE_DSP
                for (; i + 4 <= in_c; i += 4) { /* four inputs, unpacked once, against four filters */
                    int32_t x02, x13;
                    tinyaot_s16x4_pairs(x + i, &x02, &x13);
                    s0 = tinyaot_smlad4_s16_s8(x02, x13, w0 + i, s0);
                    s1 = tinyaot_smlad4_s16_s8(x02, x13, w1 + i, s1);
                    s2 = tinyaot_smlad4_s16_s8(x02, x13, w2 + i, s2);
                    s3 = tinyaot_smlad4_s16_s8(x02, x13, w3 + i, s3);
                }
#endif
                for (; i < in_c; i++) {
                    const int32_t xv = x[i];
                    s0 += xv * w0[i];
                    s1 += xv * w1[i];
                    s2 += xv * w2[i];
                    s3 += xv * w3[i];
                }
                run += in_c;
            } else {
                for (i = 0; i < in_c; i++) { /* a tap longer than one run: flush every TINYAOT_S16_INT32_TERMS */
                    if (run == TINYAOT_S16_INT32_TERMS) {
                        a0 += s0;
                        a1 += s1;
                        a2 += s2;
                        a3 += s3;
                        s0 = s1 = s2 = s3 = run = 0;
                    }
                    const int32_t xv = x[i];
                    s0 += xv * w0[i];
                    s1 += xv * w1[i];
                    s2 += xv * w2[i];
                    s3 += xv * w3[i];
                    run++;
                }
            }
        }
    }
    out[0] = tinyaot_requantize_s16(a0 + s0, mult[0], shift[0], act_min, act_max);
    out[1] = tinyaot_requantize_s16(a1 + s1, mult[1], shift[1], act_min, act_max);
    out[2] = tinyaot_requantize_s16(a2 + s2, mult[2], shift[2], act_min, act_max);
    out[3] = tinyaot_requantize_s16(a3 + s3, mult[3], shift[3], act_min, act_max);
}

tinyaot_status tinyaot_convolve_s16(const int16_t *input, const int8_t *filter, const int64_t *bias, const int32_t *mult,
                                    const int32_t *shift, const int32_t *geom, int16_t *output)
{
    const int32_t batches = geom[0], in_h = geom[1], in_w = geom[2], in_c = geom[3];
    const int32_t out_h = geom[4], out_w = geom[5], out_c = geom[6], k_h = geom[7], k_w = geom[8];
    const int32_t stride_h = geom[9], stride_w = geom[10], pad_t = geom[11], pad_l = geom[12];
    const int32_t dil_h = geom[13], dil_w = geom[14], act_min = geom[15], act_max = geom[16], filter_c = geom[17];
    if (filter_c <= 0 || in_c % filter_c != 0 || out_c % (in_c / filter_c) != 0 || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0) {
        return TINYAOT_ARG_ERROR;
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
                o = 0;
                if (filter_c == in_c) {
                    /* one group: four output channels at a time share each input load */
                    for (; o + 4 <= out_c; o += 4) {
                        block4(input + (b * in_h * in_w) * in_c, in_w, in_c, filter + o * filter_row, filter_row,
                               k_w, y0, x0, dil_h, dil_w, ky_begin, ky_end, kx_begin, kx_end, bias + o, mult + o,
                               shift + o, act_min, act_max, out + o);
                    }
                }
                for (; o < out_c; o++) {
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
    return TINYAOT_OK;
}
