/*
 * tinyaot_convolve_s8: int8 NHWC convolution with groups, stride, dilation and padding (TFLite/CMSIS-NN semantics).
 *
 * out[b, y, x, o] = requant(bias[o] + sum_{ky, kx, i} (in[b, y*sh - pt + ky*dh, x*sw - pl + kx*dw, g*Cg + i]
 *                                                      + input_offset) * w[o, ky, kx, i]),  g = o / (out_ch / groups)
 *
 * Padded positions hold the input zero point, i.e. contribute nothing. Two ways to compute, same integers:
 *
 *   - With scratch (ctx->buf 4-byte aligned, at least tinyaot_convolve_s8_get_buffer_size bytes): im2col. The windows of two
 *     output pixels are copied into two int16 columns of K = kh*kw*in_ch/groups values each, offset already added
 *     and zeros for padding, in the filter's own OHWI order, so each output channel is one straight dot product of
 *     K values against its contiguous filter. Two pixels times two channels per pass reuse every load twice. On
 *     DSP cores the columns are stored with each group of four values as (v0, v2, v1, v3): one 32-bit load then
 *     yields the pair SXTB16 unpacks from the filter word (bytes 0 and 2), the next load the pair from SXTB16 ROR 8
 *     (bytes 1 and 3), and SMLAD multiplies both pairs at once. The copy costs K per pixel and is shared by all
 *     output channels of the group.
 *   - Without scratch (ctx or ctx->buf NULL, misaligned or too small): the valid taps of each window are read in place, two
 *     output channels per pass (and two pixels when one group, no horizontal dilation and both windows complete
 *     horizontally, so that each kernel row is one contiguous run in both the NHWC input and the OHWI filter).
 *
 * Accumulators are int32; see tinyaot_nn_support.h for the overflow bound.
 */
#include "tinyaot_nn.h"

/* Two im2col columns of int16, each K rounded up to even so the second starts 4-byte aligned. */
int32_t tinyaot_convolve_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    return 2 * ((k + 1) & ~1) * (int32_t)sizeof(int16_t);
}

/* Geometry shared by the im2col helpers. */
typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w, ker_c;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t in_off;
    int32_t k;      /* values per column: k_h * k_w * ker_c */
    int32_t k4;     /* k rounded down to a multiple of 4: the values stored in (v0, v2, v1, v3) order (DSP) */
} conv_geom;

/* Where value j of a column is stored: groups of four below k4 as (v0, v2, v1, v3) on DSP cores, else in order. */
static inline int32_t col_pos(const conv_geom *g, int32_t j)
{
#if TINYAOT_USE_DSP
    if (j < g->k4) {
        return (j & ~3) | ((j & 1) << 1) | ((j >> 1) & 1);
    }
#else
    (void)g;
#endif
    return j;
}

/* Column values j .. j+n-1 = src[0..n-1] + input offset (src NULL: padding, zeros). */
static void col_put(int16_t *col, const conv_geom *g, int32_t j, const int8_t *src, int32_t n)
{
#if TINYAOT_USE_DSP
    if ((j & 3) == 0) {
        const int32_t off2 = tinyaot_dup16(g->in_off);
        /* whole groups of four: one word in, two words out, already in (v0, v2), (v1, v3) order */
        for (; n >= 4 && j + 4 <= g->k4; n -= 4, j += 4) {
            if (src) {
                const int32_t v = tinyaot_read_s8x4(src);
                src += 4;
                tinyaot_write_s16x2(col + j, __sxtab16(off2, v));
                tinyaot_write_s16x2(col + j + 2, tinyaot_sxtab16_ror8(off2, v));
            } else {
                tinyaot_write_s16x2(col + j, 0);
                tinyaot_write_s16x2(col + j + 2, 0);
            }
        }
    }
#endif
    for (; n > 0; n--, j++) {
        col[col_pos(g, j)] = (int16_t)(src ? (int32_t)*src++ + g->in_off : 0);
    }
}

/* The window of output pixel (oy, ox), input channels in_g .. in_g + ker_c - 1, as one column. */
static void col_fill(int16_t *col, const conv_geom *g, const int8_t *in_b, int32_t oy, int32_t ox, int32_t in_g)
{
    const int32_t base_y = oy * g->stride_h - g->pad_t;
    const int32_t base_x = ox * g->stride_w - g->pad_l;
    /* one group and no horizontal dilation: a kernel row fully inside the input is one contiguous run */
    const int row_run = (g->ker_c == g->in_c && g->dil_w == 1 && base_x >= 0 && base_x + g->k_w <= g->in_w);
    int32_t j = 0;
    int32_t ky;
    for (ky = 0; ky < g->k_h; ky++) {
        const int32_t iy = base_y + ky * g->dil_h;
        if (iy < 0 || iy >= g->in_h) {
            col_put(col, g, j, NULL, g->k_w * g->ker_c);
            j += g->k_w * g->ker_c;
            continue;
        }
        const int8_t *row = in_b + iy * g->in_w * g->in_c + in_g;
        if (row_run) {
            col_put(col, g, j, row + base_x * g->in_c, g->k_w * g->in_c);
            j += g->k_w * g->in_c;
            continue;
        }
        int32_t kx;
        for (kx = 0; kx < g->k_w; kx++) {
            const int32_t ix = base_x + kx * g->dil_w;
            col_put(col, g, j, (ix >= 0 && ix < g->in_w) ? row + ix * g->in_c : NULL, g->ker_c);
            j += g->ker_c;
        }
    }
}

/* acc[2p + c] += column p . filter c over k values, for two columns and two filters. */
static TINYAOT_NOINLINE void col_mac_2x2(const int16_t *ca, const int16_t *cb, const int8_t *w0, const int8_t *w1,
                                         int32_t k, int32_t acc[4])
{
    int32_t a00 = acc[0];
    int32_t a01 = acc[1];
    int32_t a10 = acc[2];
    int32_t a11 = acc[3];
#if TINYAOT_USE_DSP
    int32_t i;
    for (i = k >> 2; i > 0; i--) {
        const int32_t wa = tinyaot_read_s8x4(w0);
        const int32_t wb = tinyaot_read_s8x4(w1);
        w0 += 4;
        w1 += 4;
        const int32_t wa02 = __sxtb16(wa);
        const int32_t wa13 = tinyaot_sxtb16_ror8(wa);
        const int32_t wb02 = __sxtb16(wb);
        const int32_t wb13 = tinyaot_sxtb16_ror8(wb);
        int32_t x02 = tinyaot_read_s16x2(ca);
        int32_t x13 = tinyaot_read_s16x2(ca + 2);
        ca += 4;
        a00 = __smlad(x02, wa02, a00);
        a00 = __smlad(x13, wa13, a00);
        a01 = __smlad(x02, wb02, a01);
        a01 = __smlad(x13, wb13, a01);
        x02 = tinyaot_read_s16x2(cb);
        x13 = tinyaot_read_s16x2(cb + 2);
        cb += 4;
        a10 = __smlad(x02, wa02, a10);
        a10 = __smlad(x13, wa13, a10);
        a11 = __smlad(x02, wb02, a11);
        a11 = __smlad(x13, wb13, a11);
    }
    k &= 3;
#endif
    for (; k > 0; k--) {
        const int32_t xa = *ca++;
        const int32_t xb = *cb++;
        const int32_t f0 = *w0++;
        const int32_t f1 = *w1++;
        a00 += xa * f0;
        a01 += xa * f1;
        a10 += xb * f0;
        a11 += xb * f1;
    }
    acc[0] = a00;
    acc[1] = a01;
    acc[2] = a10;
    acc[3] = a11;
}

static tinyaot_status conv_im2col(const conv_geom *g, int16_t *col_a, const tinyaot_conv_params *conv_params,
                                  const tinyaot_per_channel_quant_params *quant_params, int32_t batches, const int8_t *input,
                                  const int8_t *filter, const int32_t *bias, int32_t out_h, int32_t out_w, int32_t out_c,
                                  int8_t *output)
{
    const int32_t groups = g->in_c / g->ker_c;
    const int32_t out_c_g = out_c / groups;
    const int32_t k = g->k;
    int16_t *col_b = col_a + ((k + 1) & ~1);
    const int32_t n_pix = out_h * out_w;
    const int32_t out_off = conv_params->output_offset;
    const int32_t act_min = conv_params->activation.min;
    const int32_t act_max = conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * g->in_h * g->in_w * g->in_c;
        int8_t *out_b = output + b * n_pix * out_c;
        int32_t grp;
        for (grp = 0; grp < groups; grp++) {
            int32_t p;
            for (p = 0; p < n_pix; p += 2) {
                const int two_pix = (p + 1 < n_pix);
                col_fill(col_a, g, in_b, p / out_w, p % out_w, grp * g->ker_c);
                if (two_pix) {
                    col_fill(col_b, g, in_b, (p + 1) / out_w, (p + 1) % out_w, grp * g->ker_c);
                }
                /* a lone last pixel reuses column a as its second column (the duplicate results are dropped) */
                const int16_t *cb = two_pix ? col_b : col_a;
                int8_t *out_a = out_b + p * out_c;
                int8_t *out_2 = out_a + out_c;
                int32_t o;
                for (o = grp * out_c_g; o < (grp + 1) * out_c_g; o += 2) {
                    /* an odd last channel runs with itself as the second filter (results dropped) */
                    const int two_ch = (o + 1 < (grp + 1) * out_c_g);
                    const int32_t o1 = two_ch ? o + 1 : o;
                    const int32_t b0 = bias ? bias[o] : 0;
                    const int32_t b1 = bias ? bias[o1] : 0;
                    int32_t acc[4];
                    acc[0] = b0;
                    acc[1] = b1;
                    acc[2] = b0;
                    acc[3] = b1;
                    col_mac_2x2(col_a, cb, filter + o * k, filter + o1 * k, k, acc);
                    out_a[o] = tinyaot_requantize_s8(acc[0], mult[o], shift[o], out_off, act_min, act_max);
                    if (two_ch) {
                        out_a[o1] = tinyaot_requantize_s8(acc[1], mult[o1], shift[o1], out_off, act_min, act_max);
                    }
                    if (two_pix) {
                        out_2[o] = tinyaot_requantize_s8(acc[2], mult[o], shift[o], out_off, act_min, act_max);
                        if (two_ch) {
                            out_2[o1] =
                                tinyaot_requantize_s8(acc[3], mult[o1], shift[o1], out_off, act_min, act_max);
                        }
                    }
                }
            }
        }
    }
    return TINYAOT_OK;
}

tinyaot_status tinyaot_convolve_s8(TINYAOT_CONV_ARGS(int8_t))
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
    (void)bias_dims;

    if (ker_c <= 0 || in_c % ker_c != 0 || output_dims->c != out_c || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t groups = in_c / ker_c;
    if (out_c % groups != 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t out_c_g = out_c / groups;

    /* the im2col path needs the whole buffer, 4-byte aligned (int16 columns, word loads of value pairs) */
    if (ctx != NULL && ctx->buf != NULL && ((uintptr_t)ctx->buf & 3u) == 0 &&
        ctx->size >= tinyaot_convolve_s8_get_buffer_size(input_dims, filter_dims)) {
        conv_geom g;
        g.in_h = in_h;
        g.in_w = in_w;
        g.in_c = in_c;
        g.k_h = k_h;
        g.k_w = k_w;
        g.ker_c = ker_c;
        g.stride_h = stride_h;
        g.stride_w = stride_w;
        g.pad_t = pad_t;
        g.pad_l = pad_l;
        g.dil_h = dil_h;
        g.dil_w = dil_w;
        g.in_off = in_off;
        g.k = k_h * k_w * ker_c;
        g.k4 = g.k & ~3;
        return conv_im2col(&g, (int16_t *)ctx->buf, conv_params, quant_params, batches, input, filter, bias, out_h,
                           out_w, out_c, output);
    }

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
    return TINYAOT_OK;
}
