/*
 * tinyaot_convolve_s8_fold: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) with the
 * input offset folded into the bias at compile time and the weights pre-arranged in flash for a 2x2 register block.
 *
 * Same arguments and result as tinyaot_convolve_s8, except for two compile-time transformations of the constants
 * (tinyaot/ops/conv.py, fold_input_offset / interleave_pairs):
 *
 *   - bias[o] is the folded bias bias[o] + input_offset * sum_k w[o, k]. Then
 *       bias[o] + sum_k (x_k + input_offset) * w[o, k] = folded[o] + sum_k x_k * w[o, k],
 *     so the inner loop multiplies raw int8 activations by raw int8 weights. A padded tap holds the input zero point
 *     (= -input_offset) in the column, which takes back exactly its share of the folded term.
 *   - filter holds K = kh * kw * in_ch values per output channel, as pairs of channels (o, o+1), o even: per group of
 *     four positions, four bytes of channel o then four bytes of channel o+1; then the K % 4 last values of o and of
 *     o+1. An odd last channel keeps its K values in order. Same bytes as OHWI, only reordered.
 *
 * in_ch a multiple of 4: no scratch. Two output pixels whose windows lie inside the input are read in place, row by
 * row of the window (each a contiguous run of whole groups of four), both unpacked with SXTB16 like the filter: one
 * pass over four positions loads two input words and two filter words and does 16 multiply-adds (2 pixels x 2
 * channels). A pixel whose window is clipped runs tap by tap, a padded tap reading four zero points with step 0.
 *
 * Other in_ch: the scratch (ctx->buf, 4-byte aligned, tinyaot_convolve_s8_fold_get_buffer_size bytes) holds the windows of two
 * output pixels a and b as int16 values, per group of four positions (a0, a2, a1, a3, b0, b2, b1, b3), then the
 * K % 4 last values of a and of b. The (0, 2, 1, 3) order makes a column word equal to what SXTB16 (bytes 0 and 2)
 * and SXTB16 ROR 8 (bytes 1 and 3) unpack from a filter word, so one SMLAD does two multiply-adds; one pass over a
 * group of four positions loads four column words and two filter words and does 16 multiply-adds (2 pixels x 2
 * channels). Without DSP the same layout is read value by value.
 *
 * Overflow: with the folded bias the accumulator after any subset of taps is folded[o] + sum_{subset} x * w, of
 * magnitude at most |bias| + sum|w| * (128 + |input_offset|): the bound compress/bounds.py checks against int32
 * for every layer (the folded bias itself is within it, and conv.py checks it fits int32).
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

int32_t tinyaot_convolve_s8_fold_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    if (filter_dims->c % 4 == 0) {
        return 0; /* windows read in place */
    }
    return 2 * filter_dims->h * filter_dims->w * filter_dims->c * (int32_t)sizeof(int16_t);
}

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t zp;      /* the input zero point, -input_offset: what a padded tap holds */
    int32_t k;       /* values per window */
    int32_t k4;      /* k rounded down to a multiple of 4 */
} fold_geom;

/* Column position of window value j of the pixel in slot s (0: a, 1: b). */
static inline int32_t fold_pos(const fold_geom *g, int32_t j, int32_t s)
{
    if (j < g->k4) {
        return ((j & ~3) << 1) + (s << 2) + (((j & 1) << 1) | ((j >> 1) & 1));
    }
    return (g->k4 << 1) + s * (g->k - g->k4) + (j - g->k4);
}

/* Window values j .. j+n-1 of slot s: src[0 .. n-1], or the zero point when src is NULL (padding). */
static void fold_put(int16_t *col, const fold_geom *g, int32_t s, int32_t j, const int8_t *src, int32_t n)
{
    for (; n > 0 && (j & 3) != 0; n--, j++) {
        col[fold_pos(g, j, s)] = (int16_t)(src ? *src++ : g->zp);
    }
#if TINYAOT_USE_DSP
    {
        /* whole groups of four: one word in, two words out, already in (v0, v2), (v1, v3) order */
        int16_t *d = col + (j << 1) + (s << 2);
        const int32_t zz = tinyaot_dup16(g->zp);
        for (; n >= 4 && j + 4 <= g->k4; n -= 4, j += 4, d += 8) {
            if (src) {
                const int32_t v = tinyaot_read_s8x4(src);
                src += 4;
                tinyaot_write_s16x2(d, __sxtb16(v));
                tinyaot_write_s16x2(d + 2, tinyaot_sxtb16_ror8(v));
            } else {
                tinyaot_write_s16x2(d, zz);
                tinyaot_write_s16x2(d + 2, zz);
            }
        }
    }
#endif
    for (; n > 0; n--, j++) {
        col[fold_pos(g, j, s)] = (int16_t)(src ? *src++ : g->zp);
    }
}

/* The window of output pixel q (flat over batch, rows, columns) into slot s. */
static void fold_fill(int16_t *col, const fold_geom *g, const int8_t *input, int32_t out_h, int32_t out_w, int32_t q,
                      int32_t s)
{
    const int32_t per_batch = out_h * out_w;
    const int32_t bq = q / per_batch;
    const int32_t r = q - bq * per_batch;
    const int32_t oy = r / out_w;
    const int32_t ox = r - oy * out_w;
    const int8_t *in_b = input + bq * g->in_h * g->in_w * g->in_c;
    const int32_t base_y = oy * g->stride_h - g->pad_t;
    const int32_t base_x = ox * g->stride_w - g->pad_l;
    const int32_t row_len = g->k_w * g->in_c;
    /* no horizontal dilation and the row inside the input: a kernel row is one contiguous run */
    const int row_run = (g->dil_w == 1 && base_x >= 0 && base_x + g->k_w <= g->in_w);
    int32_t j = 0;
    int32_t ky;
    for (ky = 0; ky < g->k_h; ky++, j += row_len) {
        const int32_t iy = base_y + ky * g->dil_h;
        if (iy < 0 || iy >= g->in_h) {
            fold_put(col, g, s, j, NULL, row_len);
            continue;
        }
        const int8_t *row = in_b + iy * g->in_w * g->in_c;
        if (row_run) {
            fold_put(col, g, s, j, row + base_x * g->in_c, row_len);
            continue;
        }
        int32_t kx;
        for (kx = 0; kx < g->k_w; kx++) {
            const int32_t ix = base_x + kx * g->dil_w;
            fold_put(col, g, s, j + kx * g->in_c, (ix >= 0 && ix < g->in_w) ? row + ix * g->in_c : NULL, g->in_c);
        }
    }
}

/* acc[2 * pixel + channel] += column . filter for the pair of channels at w (layout above), both pixels. */
static inline void fold_mac_2x2(const int16_t *col, const int8_t *w, const fold_geom *g, int32_t acc[4])
{
    int32_t a00 = acc[0];
    int32_t a01 = acc[1];
    int32_t a10 = acc[2];
    int32_t a11 = acc[3];
    const int16_t *c = col;
    int32_t i;
#if TINYAOT_USE_DSP
    for (i = g->k4 >> 2; i > 0; i--) {
        const int32_t wa = tinyaot_read_s8x4(w);
        const int32_t wb = tinyaot_read_s8x4(w + 4);
        const int32_t xa02 = tinyaot_read_s16x2(c);
        const int32_t xa13 = tinyaot_read_s16x2(c + 2);
        const int32_t xb02 = tinyaot_read_s16x2(c + 4);
        const int32_t xb13 = tinyaot_read_s16x2(c + 6);
        w += 8;
        c += 8;
        int32_t t = __sxtb16(wa);
        a00 = __smlad(xa02, t, a00);
        a10 = __smlad(xb02, t, a10);
        t = tinyaot_sxtb16_ror8(wa);
        a00 = __smlad(xa13, t, a00);
        a10 = __smlad(xb13, t, a10);
        t = __sxtb16(wb);
        a01 = __smlad(xa02, t, a01);
        a11 = __smlad(xb02, t, a11);
        t = tinyaot_sxtb16_ror8(wb);
        a01 = __smlad(xa13, t, a01);
        a11 = __smlad(xb13, t, a11);
    }
#else
    for (i = g->k4 >> 2; i > 0; i--) {
        /* column values in (0, 2, 1, 3) order, filter bytes in order; each sum of four products is below 2^17 */
        a00 += c[0] * w[0] + c[1] * w[2] + c[2] * w[1] + c[3] * w[3];
        a10 += c[4] * w[0] + c[5] * w[2] + c[6] * w[1] + c[7] * w[3];
        a01 += c[0] * w[4] + c[1] * w[6] + c[2] * w[5] + c[3] * w[7];
        a11 += c[4] * w[4] + c[5] * w[6] + c[6] * w[5] + c[7] * w[7];
        w += 8;
        c += 8;
    }
#endif
    {
        const int32_t t = g->k - g->k4;
        for (i = 0; i < t; i++) {
            const int32_t xa = c[i];
            const int32_t xb = c[t + i];
            const int32_t f0 = w[i];
            const int32_t f1 = w[t + i];
            a00 += xa * f0;
            a01 += xa * f1;
            a10 += xb * f0;
            a11 += xb * f1;
        }
    }
    acc[0] = a00;
    acc[1] = a01;
    acc[2] = a10;
    acc[3] = a11;
}

/* Both pixels, one channel whose K values are in order. */
static void fold_mac_2x1(const int16_t *col, const int8_t *w, const fold_geom *g, int32_t *acc_a, int32_t *acc_b)
{
    int32_t a = *acc_a;
    int32_t b = *acc_b;
    const int16_t *c = col;
    int32_t j;
    for (j = 0; j < g->k4; j += 4, c += 8) {
        a += c[0] * w[j] + c[1] * w[j + 2] + c[2] * w[j + 1] + c[3] * w[j + 3];
        b += c[4] * w[j] + c[5] * w[j + 2] + c[6] * w[j + 1] + c[7] * w[j + 3];
    }
    {
        const int32_t t = g->k - g->k4;
        for (j = 0; j < t; j++) {
            a += c[j] * w[g->k4 + j];
            b += c[t + j] * w[g->k4 + j];
        }
    }
    *acc_a = a;
    *acc_b = b;
}

/* ---- in place (in_ch a multiple of 4: every tap is whole groups of four, no scratch) ---- */

/* acc[2 * pixel + channel] += x . filter over n4 groups of four inputs: xa, xb contiguous int8, w pair layout. */
static inline void fold_mac_2x2_s8(const int8_t *xa, const int8_t *xb, const int8_t *w, int32_t n4, int32_t acc[4])
{
    int32_t a00 = acc[0];
    int32_t a01 = acc[1];
    int32_t a10 = acc[2];
    int32_t a11 = acc[3];
#if TINYAOT_USE_DSP
    for (; n4 > 0; n4--) {
        int32_t xa02 = tinyaot_read_s8x4(xa);
        int32_t xb02 = tinyaot_read_s8x4(xb);
        const int32_t wa = tinyaot_read_s8x4(w);
        const int32_t wb = tinyaot_read_s8x4(w + 4);
        xa += 4;
        xb += 4;
        w += 8;
        const int32_t xa13 = tinyaot_sxtb16_ror8(xa02);
        const int32_t xb13 = tinyaot_sxtb16_ror8(xb02);
        xa02 = __sxtb16(xa02);
        xb02 = __sxtb16(xb02);
        int32_t t = __sxtb16(wa);
        a00 = __smlad(xa02, t, a00);
        a10 = __smlad(xb02, t, a10);
        t = tinyaot_sxtb16_ror8(wa);
        a00 = __smlad(xa13, t, a00);
        a10 = __smlad(xb13, t, a10);
        t = __sxtb16(wb);
        a01 = __smlad(xa02, t, a01);
        a11 = __smlad(xb02, t, a11);
        t = tinyaot_sxtb16_ror8(wb);
        a01 = __smlad(xa13, t, a01);
        a11 = __smlad(xb13, t, a11);
    }
#else
    for (; n4 > 0; n4--) {
        int32_t i;
        for (i = 0; i < 4; i++) {
            const int32_t va = xa[i];
            const int32_t vb = xb[i];
            const int32_t f0 = w[i];
            const int32_t f1 = w[4 + i];
            a00 += va * f0;
            a01 += va * f1;
            a10 += vb * f0;
            a11 += vb * f1;
        }
        xa += 4;
        xb += 4;
        w += 8;
    }
#endif
    acc[0] = a00;
    acc[1] = a01;
    acc[2] = a10;
    acc[3] = a11;
}

/* One pixel, two channels (pair layout), over n4 groups of four inputs read with a step of xstep bytes per group
   (4: a run of the input; 0: the same four zero points again, a padded tap). */
static void fold_mac_1x2_s8(const int8_t *x, int32_t xstep, const int8_t *w, int32_t n4, int32_t *acc0,
                            int32_t *acc1)
{
    int32_t a0 = *acc0;
    int32_t a1 = *acc1;
    for (; n4 > 0; n4--, x += xstep, w += 8) {
        int32_t i;
        for (i = 0; i < 4; i++) {
            a0 += (int32_t)x[i] * w[i];
            a1 += (int32_t)x[i] * w[4 + i];
        }
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* One pixel, one channel in order (an odd last channel), n values with a step per four (see above). */
static int32_t fold_dot_s8(const int8_t *x, int32_t xstep, const int8_t *w, int32_t n4, int32_t acc)
{
    for (; n4 > 0; n4--, x += xstep, w += 4) {
        acc += (int32_t)x[0] * w[0] + (int32_t)x[1] * w[1] + (int32_t)x[2] * w[2] + (int32_t)x[3] * w[3];
    }
    return acc;
}

typedef struct {
    const int8_t *in_b; /* the pixel's batch image */
    int32_t base_y, base_x;
    int inside;         /* the whole window lies inside the input */
} fold_pixel;

static void fold_locate(const fold_geom *g, const int8_t *input, int32_t out_h, int32_t out_w, int32_t q,
                        fold_pixel *px)
{
    const int32_t per_batch = out_h * out_w;
    const int32_t bq = q / per_batch;
    const int32_t r = q - bq * per_batch;
    const int32_t oy = r / out_w;
    px->in_b = input + bq * g->in_h * g->in_w * g->in_c;
    px->base_y = oy * g->stride_h - g->pad_t;
    px->base_x = (r - oy * out_w) * g->stride_w - g->pad_l;
    px->inside = (px->base_y >= 0 && px->base_y + (g->k_h - 1) * g->dil_h < g->in_h && px->base_x >= 0 &&
                  px->base_x + (g->k_w - 1) * g->dil_w < g->in_w);
}

/* All channels of one pixel, tap by tap (a window that is clipped: padded taps read the zero point). */
static void fold_pixel_taps(const fold_geom *g, const fold_pixel *px, const int8_t *filter, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int32_t out_c, int32_t out_off,
                            int32_t act_min, int32_t act_max, int8_t *out)
{
    const int8_t zp4[4] = {(int8_t)g->zp, (int8_t)g->zp, (int8_t)g->zp, (int8_t)g->zp};
    const int32_t n4 = g->in_c >> 2;
    const int32_t k = g->k;
    int32_t o;
    for (o = 0; o < out_c; o += 2) {
        const int two = (o + 1 < out_c);
        const int8_t *w = filter + o * k;
        int32_t a0 = bias[o];
        int32_t a1 = two ? bias[o + 1] : 0;
        int32_t ky, kx;
        for (ky = 0; ky < g->k_h; ky++) {
            const int32_t iy = px->base_y + ky * g->dil_h;
            for (kx = 0; kx < g->k_w; kx++) {
                const int32_t ix = px->base_x + kx * g->dil_w;
                const int valid = (iy >= 0 && iy < g->in_h && ix >= 0 && ix < g->in_w);
                const int8_t *x = valid ? px->in_b + (iy * g->in_w + ix) * g->in_c : zp4;
                const int32_t step = valid ? 4 : 0;
                if (two) {
                    fold_mac_1x2_s8(x, step, w, n4, &a0, &a1);
                    w += 2 * g->in_c;
                } else {
                    a0 = fold_dot_s8(x, step, w, n4, a0);
                    w += g->in_c;
                }
            }
        }
        out[o] = tinyaot_fold_requantize_s8(a0, mult[o], shift[o], out_off, act_min, act_max);
        if (two) {
            out[o + 1] = tinyaot_fold_requantize_s8(a1, mult[o + 1], shift[o + 1], out_off, act_min, act_max);
        }
    }
}

static void fold_in_place(const fold_geom *g, const int8_t *input, const int8_t *filter, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int32_t n_pix, int32_t out_h, int32_t out_w,
                          int32_t out_c, int32_t out_off, int32_t act_min, int32_t act_max, int8_t *output)
{
    const int32_t k = g->k;
    const int32_t row_n4 = (g->k_w * g->in_c) >> 2;
    const int32_t row_step = g->dil_h * g->in_w * g->in_c;
    const int rows_run = (g->dil_w == 1); /* a kernel row is one contiguous run of the input */
    int32_t q;
    for (q = 0; q < n_pix; q += 2) {
        const int two_pix = (q + 1 < n_pix);
        fold_pixel pa, pb;
        fold_locate(g, input, out_h, out_w, q, &pa);
        fold_locate(g, input, out_h, out_w, two_pix ? q + 1 : q, &pb);
        int8_t *out_a = output + q * out_c;
        int8_t *out_b = out_a + out_c;
        if (!(rows_run && pa.inside && pb.inside)) {
            fold_pixel_taps(g, &pa, filter, bias, mult, shift, out_c, out_off, act_min, act_max, out_a);
            if (two_pix) {
                fold_pixel_taps(g, &pb, filter, bias, mult, shift, out_c, out_off, act_min, act_max, out_b);
            }
            continue;
        }
        const int8_t *xa0 = pa.in_b + (pa.base_y * g->in_w + pa.base_x) * g->in_c;
        const int8_t *xb0 = pb.in_b + (pb.base_y * g->in_w + pb.base_x) * g->in_c;
        const int8_t *w = filter;
        int32_t o;
        for (o = 0; o + 1 < out_c; o += 2) {
            int32_t acc[4];
            acc[0] = bias[o];
            acc[1] = bias[o + 1];
            acc[2] = acc[0];
            acc[3] = acc[1];
            const int8_t *xa = xa0;
            const int8_t *xb = xb0;
            int32_t ky;
            for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, w += 8 * row_n4) {
                fold_mac_2x2_s8(xa, xb, w, row_n4, acc);
            }
            out_a[o] = tinyaot_fold_requantize_s8(acc[0], mult[o], shift[o], out_off, act_min, act_max);
            out_a[o + 1] = tinyaot_fold_requantize_s8(acc[1], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
            if (two_pix) {
                out_b[o] = tinyaot_fold_requantize_s8(acc[2], mult[o], shift[o], out_off, act_min, act_max);
                out_b[o + 1] =
                    tinyaot_fold_requantize_s8(acc[3], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
            }
        }
        if (o < out_c) {
            int32_t acc_a = bias[o];
            int32_t acc_b = acc_a;
            const int8_t *xa = xa0;
            const int8_t *xb = xb0;
            int32_t ky;
            for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, w += 4 * row_n4) {
                acc_a = fold_dot_s8(xa, 4, w, row_n4, acc_a);
                acc_b = fold_dot_s8(xb, 4, w, row_n4, acc_b);
            }
            out_a[o] = tinyaot_fold_requantize_s8(acc_a, mult[o], shift[o], out_off, act_min, act_max);
            if (two_pix) {
                out_b[o] = tinyaot_fold_requantize_s8(acc_b, mult[o], shift[o], out_off, act_min, act_max);
            }
        }
        (void)k;
    }
}

int tinyaot_convolve_s8_fold(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                             const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                             const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                             const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                             int8_t *output)
{
    const int32_t out_c = filter_dims->n;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t out_off = conv_params->output_offset;
    const int32_t act_min = conv_params->activation.min;
    const int32_t act_max = conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    (void)bias_dims;

    /* one group only, the folded bias given, and (in_ch not a multiple of 4) the whole scratch, 4-byte aligned */
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL) {
        return -1;
    }
    fold_geom g;
    g.in_h = input_dims->h;
    g.in_w = input_dims->w;
    g.in_c = input_dims->c;
    g.k_h = filter_dims->h;
    g.k_w = filter_dims->w;
    g.stride_h = conv_params->stride.h;
    g.stride_w = conv_params->stride.w;
    g.pad_t = conv_params->padding.h;
    g.pad_l = conv_params->padding.w;
    g.dil_h = conv_params->dilation.h;
    g.dil_w = conv_params->dilation.w;
    g.zp = -conv_params->input_offset;
    g.k = g.k_h * g.k_w * g.in_c;
    g.k4 = g.k & ~3;
    const int32_t k = g.k;
    const int32_t n_pix = input_dims->n * out_h * out_w;
    if (g.in_c % 4 == 0) {
        fold_in_place(&g, input, filter, bias, mult, shift, n_pix, out_h, out_w, out_c, out_off, act_min, act_max,
                      output);
        return 0;
    }
    if (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
        ctx->size < tinyaot_convolve_s8_fold_get_buffer_size(input_dims, filter_dims)) {
        return -1;
    }
    int16_t *col = (int16_t *)ctx->buf;
    int32_t q;
    for (q = 0; q < n_pix; q += 2) {
        /* a lone last pixel is computed twice (slot b holds it again; its second results are dropped) */
        const int two_pix = (q + 1 < n_pix);
        fold_fill(col, &g, input, out_h, out_w, q, 0);
        fold_fill(col, &g, input, out_h, out_w, two_pix ? q + 1 : q, 1);
        int8_t *out_a = output + q * out_c;
        int8_t *out_b = out_a + out_c;
        const int8_t *w = filter;
        int32_t o;
        for (o = 0; o + 1 < out_c; o += 2, w += 2 * k) {
            int32_t acc[4];
            acc[0] = bias[o];
            acc[1] = bias[o + 1];
            acc[2] = acc[0];
            acc[3] = acc[1];
            fold_mac_2x2(col, w, &g, acc);
            out_a[o] = tinyaot_fold_requantize_s8(acc[0], mult[o], shift[o], out_off, act_min, act_max);
            out_a[o + 1] = tinyaot_fold_requantize_s8(acc[1], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
            if (two_pix) {
                out_b[o] = tinyaot_fold_requantize_s8(acc[2], mult[o], shift[o], out_off, act_min, act_max);
                out_b[o + 1] =
                    tinyaot_fold_requantize_s8(acc[3], mult[o + 1], shift[o + 1], out_off, act_min, act_max);
            }
        }
        if (o < out_c) {
            int32_t acc_a = bias[o];
            int32_t acc_b = acc_a;
            fold_mac_2x1(col, w, &g, &acc_a, &acc_b);
            out_a[o] = tinyaot_fold_requantize_s8(acc_a, mult[o], shift[o], out_off, act_min, act_max);
            if (two_pix) {
                out_b[o] = tinyaot_fold_requantize_s8(acc_b, mult[o], shift[o], out_off, act_min, act_max);
            }
        }
    }
    return 0;
}
