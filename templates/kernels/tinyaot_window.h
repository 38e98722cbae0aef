/*
 * tinyaot int8 kernels: the geometry of windowed layers (convolutions, depthwise and transposed convolutions,
 * pooling, and their Helium forms), written once.
 *
 * Output pixel (b, oy, ox) of a windowed layer reads the input taps
 *   (oy * stride_h - pad_t + ky * dil_h, ox * stride_w - pad_l + kx * dil_w),  0 <= ky < k_h, 0 <= kx < k_w,
 * of image b (NHWC); taps outside the input are padding. A kernel reads its arguments once into a
 * tinyaot_window_geom (tinyaot_pool_geom, tinyaot_conv_geom, tinyaot_dw_conv_geom) and clips each output row's and
 * column's window to the input (tinyaot_window_rows / _cols, a tinyaot_span: the valid taps), so that it visits
 * valid taps only and padding contributes nothing. tinyaot_pool_s8 is the whole average / max pooling loop, shared
 * by tinyaot_avgpool_s8, tinyaot_max_pool_s8 and the latter's plain-C path on cores without Helium.
 *
 * Everything here is static and always inlined into the kernel: the geometry struct lives in registers (its
 * address never leaves the kernel), constants such as a pool's dilation of 1 fold away, and the kernels compile to
 * the instructions they had when each wrote its geometry out. All index arithmetic stays within int32 for any
 * tensor that fits in a microcontroller's memory (the products are offsets into the input or output).
 */
#ifndef TINYAOT_WINDOW_H
#define TINYAOT_WINDOW_H

#include <stdint.h>

#include "tinyaot_compiler.h"
#include "tinyaot_nn_types.h"
#include "tinyaot_nn_support.h"

/* A windowed layer's shapes and parameters (the fields a kernel does not use are still set). */
typedef struct {
    int32_t batches, in_h, in_w, in_c; /* input NHWC */
    int32_t out_h, out_w, out_c;       /* output NHWC (the same batches) */
    int32_t k_h, k_w;                  /* window */
    int32_t stride_h, stride_w;
    int32_t pad_t, pad_l;              /* padding before; the padding after follows from the output size */
    int32_t dil_h, dil_w;
    int32_t in_off, out_off;           /* input offset (negated zero point) and output zero point; 0 for pools */
    int32_t act_min, act_max;          /* the activation clamp */
} tinyaot_window_geom;

/* One axis of one output position's window: tap k reads input row (column) base + k * dilation, and the taps
   [k0, k1) lie inside the input (k1 >= k0; k1 == k0 when the window lies wholly in the padding). */
typedef struct {
    int32_t base;
    int32_t k0;
    int32_t k1;
} tinyaot_span;

static TINYAOT_ALWAYS_INLINE void tinyaot_window_geom_set(tinyaot_window_geom *g, const tinyaot_dims *input_dims,
                                                          const tinyaot_dims *output_dims, int32_t k_h, int32_t k_w,
                                                          const tinyaot_tile *stride, const tinyaot_tile *padding,
                                                          int32_t dil_h, int32_t dil_w, const tinyaot_activation *act)
{
    g->batches = input_dims->n;
    g->in_h = input_dims->h, g->in_w = input_dims->w, g->in_c = input_dims->c;
    g->out_h = output_dims->h, g->out_w = output_dims->w, g->out_c = output_dims->c;
    g->k_h = k_h, g->k_w = k_w;
    g->stride_h = stride->h, g->stride_w = stride->w;
    g->pad_t = padding->h, g->pad_l = padding->w;
    g->dil_h = dil_h, g->dil_w = dil_w;
    g->in_off = 0, g->out_off = 0;
    g->act_min = act->min, g->act_max = act->max;
}

/* Pooling: the window is filter_dims' h x w, dilation 1, and the output keeps the input's channels (out_c is set
   to in_c). TINYAOT_ARG_ERROR when the channels differ or a stride is not positive. */
static TINYAOT_ALWAYS_INLINE tinyaot_status tinyaot_pool_geom(tinyaot_window_geom *g, const tinyaot_pool_params *p,
                                                              const tinyaot_dims *input_dims,
                                                              const tinyaot_dims *filter_dims,
                                                              const tinyaot_dims *output_dims)
{
    tinyaot_window_geom_set(g, input_dims, output_dims, filter_dims->h, filter_dims->w, &p->stride, &p->padding, 1,
                            1, &p->activation);
    if (output_dims->c != g->in_c || g->stride_h <= 0 || g->stride_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    g->out_c = g->in_c;
    return TINYAOT_OK;
}

/* tinyaot_pool_geom for the kernels without a padding path (tinyaot_avgpool_requant_s8 and its Helium form): also
   TINYAOT_ARG_ERROR unless every window lies inside the input (no padding, the last window ends within it). */
static TINYAOT_ALWAYS_INLINE tinyaot_status tinyaot_pool_geom_unpadded(tinyaot_window_geom *g,
                                                                       const tinyaot_pool_params *p,
                                                                       const tinyaot_dims *input_dims,
                                                                       const tinyaot_dims *filter_dims,
                                                                       const tinyaot_dims *output_dims)
{
    if (tinyaot_pool_geom(g, p, input_dims, filter_dims, output_dims) != TINYAOT_OK || g->pad_t != 0 ||
        g->pad_l != 0 || (g->out_h - 1) * g->stride_h + g->k_h > g->in_h ||
        (g->out_w - 1) * g->stride_w + g->k_w > g->in_w) {
        return TINYAOT_ARG_ERROR;
    }
    return TINYAOT_OK;
}

/* The convolution params structs (tinyaot_conv_params, tinyaot_dw_conv_params) name their fields alike: one body
   reads either (out_channels: from the filter dims, whose layout differs). */
#define TINYAOT_CONV_GEOM_SET(g, p, input_dims, filter_dims, output_dims, out_channels)                             \
    do {                                                                                                          \
        tinyaot_window_geom_set((g), (input_dims), (output_dims), (filter_dims)->h, (filter_dims)->w,            \
                                &(p)->stride, &(p)->padding, (p)->dilation.h, (p)->dilation.w, &(p)->activation); \
        (g)->out_c = (out_channels);                                                                            \
        (g)->in_off = (p)->input_offset;                                                                        \
        (g)->out_off = (p)->output_offset;                                                                      \
    } while (0)

/* Convolution (filter_dims = {out_c, k_h, k_w, in_c / groups}) and transposed convolution. The kernel checks what
   it needs of them (tinyaot_window_steps_ok and its own). */
static TINYAOT_ALWAYS_INLINE void tinyaot_conv_geom(tinyaot_window_geom *g, const tinyaot_conv_params *p,
                                                    const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims,
                                                    const tinyaot_dims *output_dims)
{
    TINYAOT_CONV_GEOM_SET(g, p, input_dims, filter_dims, output_dims, filter_dims->n);
}

/* Depthwise convolution: filter_dims = {1, k_h, k_w, in_c * ch_mult}. */
static TINYAOT_ALWAYS_INLINE void tinyaot_dw_conv_geom(tinyaot_window_geom *g, const tinyaot_dw_conv_params *p,
                                                       const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims,
                                                       const tinyaot_dims *output_dims)
{
    TINYAOT_CONV_GEOM_SET(g, p, input_dims, filter_dims, output_dims, filter_dims->c);
}

/* For a kernel's own geometry struct that names these fields as tinyaot_window_geom does (the Helium column's
   conv_geom, fold_geom, block_geom): its window set from a convolution's arguments, field by field in this order
   (a struct the kernel hands to its helpers by pointer is kept in memory, and the order of these stores is the
   order the compiler schedules them in). */
#define TINYAOT_CONV_WINDOW_FIELDS(g, params, input_dims, filter_dims)                                             \
    do {                                                                                                          \
        (g).in_h = (input_dims)->h;                                                                               \
        (g).in_w = (input_dims)->w;                                                                               \
        (g).in_c = (input_dims)->c;                                                                               \
        (g).k_h = (filter_dims)->h;                                                                               \
        (g).k_w = (filter_dims)->w;                                                                               \
        (g).stride_h = (params)->stride.h;                                                                        \
        (g).stride_w = (params)->stride.w;                                                                        \
        (g).pad_t = (params)->padding.h;                                                                          \
        (g).pad_l = (params)->padding.w;                                                                          \
        (g).dil_h = (params)->dilation.h;                                                                         \
        (g).dil_w = (params)->dilation.w;                                                                         \
    } while (0)

/* Defines `static void name(col, g, input, out_h, out_w, q, s)`: the window of output pixel q (flat over batch, rows
   and columns) into slot s of a two-pixel int16 column (the fold and block-sparse kernels' columns). g is the
   kernel's geometry struct (geom_type, fields as TINYAOT_CONV_WINDOW_FIELDS sets them); put(col, g, s, j, src, n)
   writes window values j .. j+n-1 of slot s from src, or the padding value when src is NULL. A kernel row inside
   the input without horizontal dilation is one contiguous run: one put. */
#define TINYAOT_WINDOW_FILL_FN(name, geom_type, put)                                                               \
    static void name(int16_t *col, const geom_type *g, const int8_t *input, int32_t out_h, int32_t out_w, int32_t q, \
                     int32_t s)                                                                                    \
    {                                                                                                              \
        const int32_t per_batch = out_h * out_w;                                                                   \
        const int32_t bq = q / per_batch;                                                                          \
        const int32_t r = q - bq * per_batch;                                                                      \
        const int32_t oy = r / out_w;                                                                              \
        const int32_t ox = r - oy * out_w;                                                                         \
        const int8_t *in_b = input + bq * g->in_h * g->in_w * g->in_c;                                             \
        const int32_t base_y = oy * g->stride_h - g->pad_t;                                                        \
        const int32_t base_x = ox * g->stride_w - g->pad_l;                                                        \
        const int32_t row_len = g->k_w * g->in_c;                                                                  \
        const int row_run = (g->dil_w == 1 && base_x >= 0 && base_x + g->k_w <= g->in_w);                          \
        int32_t j = 0;                                                                                             \
        int32_t ky;                                                                                                \
        for (ky = 0; ky < g->k_h; ky++, j += row_len) {                                                            \
            const int32_t iy = base_y + ky * g->dil_h;                                                             \
            if (iy < 0 || iy >= g->in_h) {                                                                         \
                put(col, g, s, j, NULL, row_len);                                                                  \
                continue;                                                                                          \
            }                                                                                                      \
            const int8_t *row = in_b + iy * g->in_w * g->in_c;                                                     \
            if (row_run) {                                                                                         \
                put(col, g, s, j, row + base_x * g->in_c, row_len);                                                \
                continue;                                                                                          \
            }                                                                                                      \
            int32_t kx;                                                                                            \
            for (kx = 0; kx < g->k_w; kx++) {                                                                      \
                const int32_t ix = base_x + kx * g->dil_w;                                                         \
                put(col, g, s, j + kx * g->in_c, (ix >= 0 && ix < g->in_w) ? row + ix * g->in_c : NULL,            \
                    g->in_c);                                                                                      \
            }                                                                                                      \
        }                                                                                                          \
    }

/* Strides and dilations positive, and output_dims' channels those of the geometry. */
static TINYAOT_ALWAYS_INLINE int tinyaot_window_steps_ok(const tinyaot_window_geom *g, const tinyaot_dims *output_dims)
{
    return output_dims->c == g->out_c && g->stride_h > 0 && g->stride_w > 0 && g->dil_h > 0 && g->dil_w > 0;
}


/* The window of output position o along one axis, clipped to an input of `size` rows (columns). */
static TINYAOT_ALWAYS_INLINE tinyaot_span tinyaot_window_span(int32_t o, int32_t stride, int32_t pad, int32_t k_size,
                                                              int32_t dilation, int32_t size)
{
    tinyaot_span s;
    s.base = o * stride - pad;
    tinyaot_valid_taps(s.base, k_size, dilation, size, &s.k0, &s.k1);
    return s;
}

static TINYAOT_ALWAYS_INLINE tinyaot_span tinyaot_window_rows(const tinyaot_window_geom *g, int32_t oy)
{
    return tinyaot_window_span(oy, g->stride_h, g->pad_t, g->k_h, g->dil_h, g->in_h);
}

static TINYAOT_ALWAYS_INLINE tinyaot_span tinyaot_window_cols(const tinyaot_window_geom *g, int32_t ox)
{
    return tinyaot_window_span(ox, g->stride_w, g->pad_l, g->k_w, g->dil_w, g->in_w);
}

/* Image b of the input, and output pixel (b, oy, ox), channel 0. */
static TINYAOT_ALWAYS_INLINE const int8_t *tinyaot_window_image(const tinyaot_window_geom *g, const int8_t *input,
                                                                int32_t b)
{
    return input + b * g->in_h * g->in_w * g->in_c;
}

static TINYAOT_ALWAYS_INLINE int8_t *tinyaot_window_out(const tinyaot_window_geom *g, int8_t *output, int32_t b,
                                                        int32_t oy, int32_t ox)
{
    return output + ((b * g->out_h + oy) * g->out_w + ox) * g->out_c;
}

/* The input at the first valid tap of window (y, x) of image in_b, channel 0 (only for a window with a valid tap:
   a window wholly in the padding may have no such address inside the input). */
static TINYAOT_ALWAYS_INLINE const int8_t *tinyaot_window_first_tap(const tinyaot_window_geom *g, const int8_t *in_b,
                                                                    const tinyaot_span *y, const tinyaot_span *x)
{
    return in_b + ((y->base + y->k0 * g->dil_h) * g->in_w + x->base + x->k0 * g->dil_w) * g->in_c;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Pooling (TFLite int8 semantics, input and output share quantization): each output is the maximum, or the average
 * rounded to nearest with ties away from zero (tinyaot_div_round_away; dividing by the full window size or rounding
 * ties to even would both differ from TFLite), of the non-padding inputs of its window, clamped to the activation
 * range. Four channels per pass over a window; no scratch. The int32 sums cannot overflow: |sum| <= 128 * window.
 * ------------------------------------------------------------------------------------------------------------- */
#define TINYAOT_POOL_MAX 0
#define TINYAOT_POOL_AVG 1

/* One tap into a running maximum or sum (kind is a constant in every caller: the other branch folds away). */
static TINYAOT_ALWAYS_INLINE int32_t tinyaot_pool_tap(int kind, int32_t acc, int32_t x)
{
    return kind == TINYAOT_POOL_MAX ? tinyaot_max_i32(acc, x) : acc + x;
}

static TINYAOT_ALWAYS_INLINE int8_t tinyaot_pool_result(int kind, int32_t acc, int32_t count, int32_t act_min,
                                                        int32_t act_max)
{
    const int32_t v = kind == TINYAOT_POOL_MAX ? acc : tinyaot_div_round_away(acc, count);
    return (int8_t)tinyaot_clamp_i32(v, act_min, act_max);
}

static TINYAOT_ALWAYS_INLINE tinyaot_status tinyaot_pool_s8(int kind, const tinyaot_pool_params *pool_params,
                                                            const tinyaot_dims *input_dims, const int8_t *input,
                                                            const tinyaot_dims *filter_dims,
                                                            const tinyaot_dims *output_dims, int8_t *output)
{
    tinyaot_window_geom g;
    if (tinyaot_pool_geom(&g, pool_params, input_dims, filter_dims, output_dims) != TINYAOT_OK) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t ch = g.in_c;
    const int32_t init = kind == TINYAOT_POOL_MAX ? -128 : 0;
    const int32_t row_skip = g.in_w * ch;
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = input + b * g.in_h * row_skip;
        for (oy = 0; oy < g.out_h; oy++) {
            const tinyaot_span y = tinyaot_window_rows(&g, oy);
            for (ox = 0; ox < g.out_w; ox++) {
                const tinyaot_span x = tinyaot_window_cols(&g, ox);
                const int32_t count = (y.k1 - y.k0) * (x.k1 - x.k0);
                if (kind == TINYAOT_POOL_MAX ? (y.k1 <= y.k0 || x.k1 <= x.k0) : count == 0) {
                    return TINYAOT_ARG_ERROR; /* window entirely in the padding: no maximum or average exists */
                }
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                const int8_t *win = in_b + (y.base + y.k0) * row_skip + (x.base + x.k0) * ch;
                int32_t c = 0;
                for (; c + 4 <= ch; c += 4) {
                    int32_t a0 = init, a1 = init, a2 = init, a3 = init;
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = y.k0; ky < y.k1; ky++, r += row_skip) {
                        const int8_t *p = r;
                        int32_t kx;
                        for (kx = x.k0; kx < x.k1; kx++, p += ch) {
                            a0 = tinyaot_pool_tap(kind, a0, p[0]);
                            a1 = tinyaot_pool_tap(kind, a1, p[1]);
                            a2 = tinyaot_pool_tap(kind, a2, p[2]);
                            a3 = tinyaot_pool_tap(kind, a3, p[3]);
                        }
                    }
                    out[c] = tinyaot_pool_result(kind, a0, count, g.act_min, g.act_max);
                    out[c + 1] = tinyaot_pool_result(kind, a1, count, g.act_min, g.act_max);
                    out[c + 2] = tinyaot_pool_result(kind, a2, count, g.act_min, g.act_max);
                    out[c + 3] = tinyaot_pool_result(kind, a3, count, g.act_min, g.act_max);
                }
                for (; c < ch; c++) {
                    int32_t a = init;
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = y.k0; ky < y.k1; ky++, r += row_skip) {
                        const int8_t *p = r;
                        int32_t kx;
                        for (kx = x.k0; kx < x.k1; kx++, p += ch) {
                            a = tinyaot_pool_tap(kind, a, *p);
                        }
                    }
                    out[c] = tinyaot_pool_result(kind, a, count, g.act_min, g.act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}

/* A pooling kernel of the CMSIS-NN shape (tinyaot_nn.h declares it; no scratch) whose loop is tinyaot_pool_s8. */
#define TINYAOT_POOL_KERNEL(name, kind)                                                                           \
    int32_t name##_get_buffer_size(int32_t output_w, int32_t ch)                                                  \
    {                                                                                                             \
        (void)output_w;                                                                                           \
        (void)ch;                                                                                                 \
        return 0;                                                                                                 \
    }                                                                                                             \
    tinyaot_status name(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,                      \
                        const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,   \
                        const tinyaot_dims *output_dims, int8_t *output)                                        \
    {                                                                                                             \
        (void)ctx;                                                                                                \
        return tinyaot_pool_s8((kind), pool_params, input_dims, input, filter_dims, output_dims, output);         \
    }

#endif /* TINYAOT_WINDOW_H */
