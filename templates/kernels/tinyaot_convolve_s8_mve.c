/*
 * tinyaot_convolve_s8_mve: int8 NHWC convolution, one group, any kernel size, stride, dilation and padding, with
 * the input offset folded into the bias (tinyaot_nn_mve.h).
 *
 * Each output pixel's window is gathered into an int8 im2col column of K = kh * kw * in_ch values in the filter's
 * OHWI order (a kernel row inside the input is one contiguous run of kw * in_ch bytes when there is no horizontal
 * dilation). Padded taps hold the input zero point -input_offset: then (zp + input_offset) * w = 0 exactly as in
 * the reference, i.e. their raw product zp * w cancels their share input_offset * w of the folded bias. The column
 * is then one matrix product with the OHWI filter rows (tinyaot_mve_gemm.h: Helium, four output channels per pass,
 * two pixels per pass when the scratch holds two columns; portable C on other cores).
 *
 * Scratch: required, one column (K bytes, no alignment needed) or two. Pixels are produced in raster order, at
 * most two at a time, and a pixel's window is read (copied) before its output is written, as tinyaot_nn.h promises
 * the memory planner.
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_gemm.h"

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t out_h, out_w;
    int8_t zp; /* the input zero point, -input_offset, in int8 since input_offset is in [-127, 128] */
} conv_geom;

int32_t tinyaot_convolve_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    return 2 * filter_dims->h * filter_dims->w * filter_dims->c;
}

/* dst[0..n) = src[0..n) (src != NULL) or the zero point (src == NULL). */
static void col_put(int8_t *dst, const int8_t *src, int32_t n, int8_t zp)
{
#if TINYAOT_USE_MVE
    /* predicated 16-byte moves: the last one writes only its n lanes (the bytes after them are written later) */
    if (src) {
        for (; n > 0; n -= 16, src += 16, dst += 16) {
            const mve_pred16_t p = vctp8q((uint32_t)n);
            vstrbq_p_s8(dst, vldrbq_z_s8(src, p), p);
        }
    } else {
        const int8x16_t v = vdupq_n_s8(zp);
        for (; n > 0; n -= 16, dst += 16) {
            vstrbq_p_s8(dst, v, vctp8q((uint32_t)n));
        }
    }
#else
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = src ? src[i] : zp;
    }
#endif
}

/* The window of output pixel q (raster order over batch, row, column) as one column. */
static void col_fill(int8_t *col, const conv_geom *g, const int8_t *input, int32_t q)
{
    const int32_t ox = q % g->out_w;
    const int32_t oy = (q / g->out_w) % g->out_h;
    const int8_t *in_b = input + (q / (g->out_w * g->out_h)) * g->in_h * g->in_w * g->in_c;
    const int32_t base_y = oy * g->stride_h - g->pad_t;
    const int32_t base_x = ox * g->stride_w - g->pad_l;
    const int32_t run = g->k_w * g->in_c;
    /* no horizontal dilation and the row inside the input: one contiguous run */
    const int row_run = g->dil_w == 1 && base_x >= 0 && base_x + g->k_w <= g->in_w;
    int32_t ky;
    for (ky = 0; ky < g->k_h; ky++, col += run) {
        const int32_t iy = base_y + ky * g->dil_h;
        if (iy < 0 || iy >= g->in_h) {
            col_put(col, NULL, run, g->zp);
            continue;
        }
        const int8_t *row = in_b + iy * g->in_w * g->in_c;
        if (row_run) {
            col_put(col, row + base_x * g->in_c, run, g->zp);
            continue;
        }
        int32_t kx;
        for (kx = 0; kx < g->k_w; kx++) {
            const int32_t ix = base_x + kx * g->dil_w;
            col_put(col + kx * g->in_c, (ix >= 0 && ix < g->in_w) ? row + ix * g->in_c : NULL, g->in_c, g->zp);
        }
    }
}

int tinyaot_convolve_s8_mve(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                            const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                            const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                            const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                            int8_t *output)
{
    const int32_t out_c = output_dims->c;
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t pixels = output_dims->n * output_dims->h * output_dims->w;
    const int32_t in_off = conv_params->input_offset;
    conv_geom g;
    tinyaot_mve_requant q;
    int8_t *col;
    int32_t p;
    (void)bias_dims;
    if (filter_dims->c != input_dims->c || filter_dims->n != out_c || output_dims->n != input_dims->n ||
        in_off < -127 || in_off > 128 || ctx == NULL || ctx->buf == NULL || ctx->size < k || k < 1) {
        return -1;
    }
    col = (int8_t *)ctx->buf;
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
    g.out_h = output_dims->h;
    g.out_w = output_dims->w;
    g.zp = (int8_t)(-in_off);
    q.bias = bias;
    q.mult = quant_params->multiplier;
    q.shift = quant_params->shift;
    q.per_channel = 1;
    q.out_off = conv_params->output_offset;
    q.act_min = conv_params->activation.min;
    q.act_max = conv_params->activation.max;
    p = 0;
    if (ctx->size >= 2 * k) {
        for (; p + 1 < pixels; p += 2) {
            col_fill(col, &g, input, p);
            col_fill(col + k, &g, input, p + 1);
            tinyaot_mve_gemm2_s8(col, col + k, k, filter, out_c, &q, output + p * out_c, output + (p + 1) * out_c);
        }
    }
    for (; p < pixels; p++) {
        col_fill(col, &g, input, p);
        tinyaot_mve_gemm1_s8(col, k, filter, out_c, &q, output + p * out_c);
    }
    return 0;
}
