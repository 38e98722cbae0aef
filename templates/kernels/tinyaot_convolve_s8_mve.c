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

#if TINYAOT_USE_MVE
/* dst[0..n) = src[0..n), n >= 1: 16-byte moves, the last one predicated (it writes only its lanes). */
static inline __attribute__((always_inline)) void col_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    while (n > 16) {
        vst1q_s8(dst, vld1q_s8(src));
        n -= 16;
        src += 16;
        dst += 16;
    }
    {
        const mve_pred16_t p = vctp8q((uint32_t)n);
        vstrbq_p_s8(dst, vldrbq_z_s8(src, p), p);
    }
}

/* dst[0..n) = v's bytes (the zero point), n >= 1. */
static inline __attribute__((always_inline)) void col_set(int8_t *dst, int8x16_t v, int32_t n)
{
    while (n > 16) {
        vst1q_s8(dst, v);
        n -= 16;
        dst += 16;
    }
    vstrbq_p_s8(dst, v, vctp8q((uint32_t)n));
}
typedef int8x16_t zp_fill;
#define ZP_FILL(zp) vdupq_n_s8(zp)
#else
static void col_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = src[i];
    }
}

static void col_set(int8_t *dst, int8_t v, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = v;
    }
}
typedef int8_t zp_fill;
#define ZP_FILL(zp) (zp)
#endif

/* GCC 12 models a predicated store as writing all 16 bytes, so a zero-point fill followed by a copy over part of
   it could be judged dead; the barrier keeps the fill (it emits no instruction). */
#if defined(__GNUC__)
#define COL_BARRIER() __asm__ volatile("" ::: "memory")
#else
#define COL_BARRIER() ((void)0)
#endif

/* Output pixel position in raster order (batch, row, column), advanced without divisions. */
typedef struct {
    int32_t b, oy, ox;
} pixel_pos;

static inline void next_pixel(pixel_pos *q, const conv_geom *g)
{
    if (++q->ox == g->out_w) {
        q->ox = 0;
        if (++q->oy == g->out_h) {
            q->oy = 0;
            q->b++;
        }
    }
}

/* The window of output pixel q as one column of k_h * k_w * in_c values. The geometry is copied into locals
   first: the column's int8 stores may alias the struct as far as the compiler knows, which would otherwise reload
   every field after every store. */
static void col_fill(int8_t *col, const conv_geom *g, const int8_t *input, const pixel_pos *q)
{
    const int32_t in_h = g->in_h;
    const int32_t in_w = g->in_w;
    const int32_t in_c = g->in_c;
    const int32_t k_h = g->k_h;
    const int32_t k_w = g->k_w;
    const int32_t dil_h = g->dil_h;
    const int32_t dil_w = g->dil_w;
    const int8_t *in_b = input + q->b * in_h * in_w * in_c;
    const int32_t base_y = q->oy * g->stride_h - g->pad_t;
    const int32_t base_x = q->ox * g->stride_w - g->pad_l;
    const int32_t run = k_w * in_c;
    const int32_t row_bytes = in_w * in_c;
    const zp_fill zp = ZP_FILL(g->zp);
    int32_t ky;
    if (dil_w == 1) {
        /* the taps of a kernel row inside the input, [kx0, kx1), are one contiguous run of the NHWC input row */
        const int32_t kx0 = base_x < 0 ? -base_x : 0;
        const int32_t kx1 = base_x + k_w > in_w ? in_w - base_x : k_w;
        const int32_t lead = kx0 * in_c;
        const int32_t span = kx1 > kx0 ? (kx1 - kx0) * in_c : 0;
        const int8_t *src = in_b + base_y * row_bytes + (base_x + kx0) * in_c; /* row base_y (maybe outside) */
        int32_t iy = base_y;
        for (ky = 0; ky < k_h; ky++, col += run, iy += dil_h, src += dil_h * row_bytes) {
            if (iy < 0 || iy >= in_h || span == 0) {
                col_set(col, zp, run);
                continue;
            }
            if (span < run) {
                col_set(col, zp, run);
                COL_BARRIER();
            }
            col_copy(col + lead, src, span);
        }
        return;
    }
    for (ky = 0; ky < k_h; ky++, col += run) {
        const int32_t iy = base_y + ky * dil_h;
        int32_t kx;
        for (kx = 0; kx < k_w; kx++) {
            const int32_t ix = base_x + kx * dil_w;
            if (iy < 0 || iy >= in_h || ix < 0 || ix >= in_w) {
                col_set(col + kx * in_c, zp, in_c);
            } else {
                col_copy(col + kx * in_c, in_b + iy * row_bytes + ix * in_c, in_c);
            }
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
    pixel_pos pos;
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
    q.out_off = conv_params->output_offset;
    q.act_min = conv_params->activation.min;
    q.act_max = conv_params->activation.max;
    pos.b = 0;
    pos.oy = 0;
    pos.ox = 0;
    p = 0;
    if (ctx->size >= 2 * k) {
        for (; p + 1 < pixels; p += 2) {
            col_fill(col, &g, input, &pos);
            next_pixel(&pos, &g);
            col_fill(col + k, &g, input, &pos);
            next_pixel(&pos, &g);
            tinyaot_mve_gemm2_s8(col, col + k, k, filter, out_c, &q, output + p * out_c, output + (p + 1) * out_c);
        }
    }
    for (; p < pixels; p++) {
        col_fill(col, &g, input, &pos);
        next_pixel(&pos, &g);
        tinyaot_mve_gemm1_s8(col, k, filter, out_c, &q, output + p * out_c);
    }
    return 0;
}
