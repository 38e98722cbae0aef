/*
 * tinyaot int8 kernels: the int8 im2col column of the Helium convolutions (tinyaot_convolve_s8_mve.c,
 * tinyaot_convolve_s8_block_mve.c). An output pixel's window is copied into a column of K = kh * kw * in_ch values
 * in the filter's OHWI order (a kernel row inside the input is one contiguous run of kw * in_ch bytes when there is
 * no horizontal dilation); padded taps hold the input zero point -input_offset, which with the input offset folded
 * into the bias contributes exactly nothing. Portable C on cores without MVE.
 */
#ifndef TINYAOT_MVE_IM2COL_H
#define TINYAOT_MVE_IM2COL_H

#include "tinyaot_mve_support.h"

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t out_h, out_w;
    int8_t zp; /* the input zero point, -input_offset, in int8 since input_offset is in [-127, 128] */
} conv_geom;

#if TINYAOT_USE_MVE
/* dst[0..n) = src[0..n), n >= 1: 16-byte moves, the last one predicated (it writes only its lanes). */
static TINYAOT_ALWAYS_INLINE void col_copy(int8_t *dst, const int8_t *src, int32_t n)
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
static TINYAOT_ALWAYS_INLINE void col_set(int8_t *dst, int8x16_t v, int32_t n)
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
static inline void col_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = src[i];
    }
}

static inline void col_set(int8_t *dst, int8_t v, int32_t n)
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
#if TINYAOT_GNU
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
static inline void col_fill(int8_t *col, const conv_geom *g, const int8_t *input, const pixel_pos *q)
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
        const int8_t *src = in_b + (base_x + kx0) * in_c; /* the run's column in row 0 */
        int32_t iy = base_y;
        for (ky = 0; ky < k_h; ky++, col += run, iy += dil_h) {
            if (iy < 0 || iy >= in_h || span == 0) {
                col_set(col, zp, run);
                continue;
            }
            if (span < run) {
                col_set(col, zp, run);
                COL_BARRIER();
            }
            col_copy(col + lead, src + iy * row_bytes, span);
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

/* Bands (below) from this many input channels on: thinner inputs copy a byte or a few per chunk (kws_dscnn's first
   layer, in_c 1, ran 0.841x -> 0.860x int8's instructions with bands) and keep the OHWI columns; the compiler
   permutes the 2x1 weights for bands from the same count on (ops/compressed.py MVE_BAND_MIN_IN_C). */
#define TINYAOT_MVE_BAND_MIN_IN_C 8

/* A band of windows in kernel-column-major order (the Helium 2x1 kernel's window order, tinyaot_mve_block2x1.h):
   n input columns ix0, ix0 + step, ... of output row oy of image in_b, each as its k_h kernel rows' in_c values
   (chunk i, kernel row ky at dst + (i * k_h + ky) * in_c), padding the zero point. With step 1 (no horizontal
   dilation) the window of the output pixel whose first column is chunk i is the K = k_w * k_h * in_c bytes from
   chunk i on, so horizontally adjacent pixels share all but stride_w of their chunks; with step = dil_w and n = k_w
   it is one pixel's window. Each chunk is copied once (whole vectors, the last one of an in_c not a multiple of 16
   predicated: nothing is read or written past it). */
static TINYAOT_ALWAYS_INLINE void band_fill(int8_t *dst, const conv_geom *g, const int8_t *in_b, int32_t oy,
                                             int32_t ix0, int32_t n, int32_t step)
{
    const int32_t in_h = g->in_h;
    const int32_t in_w = g->in_w;
    const int32_t in_c = g->in_c;
    const int32_t k_h = g->k_h;
    const int32_t dil_h = g->dil_h;
    const int32_t chunk = k_h * in_c;      /* bytes between a kernel row's chunks in the band */
    const int32_t src_step = step * in_c;  /* between their input columns */
    const zp_fill zp = ZP_FILL(g->zp);
    /* the chunks inside the input: [i0, i1) */
    const int32_t i0 = ix0 >= 0 ? 0 : (-ix0 + step - 1) / step;
    const int32_t i1r = in_w > ix0 ? (in_w - ix0 + step - 1) / step : 0;
    const int32_t i1 = i1r < n ? i1r : n;
    int32_t iy = oy * g->stride_h - g->pad_t;
    int32_t ky, i;
    for (ky = 0; ky < k_h; ky++, dst += in_c, iy += dil_h) {
        int8_t *d = dst;
        if (iy < 0 || iy >= in_h || i1 <= i0) {
            for (i = 0; i < n; i++, d += chunk) {
                col_set(d, zp, in_c);
            }
            continue;
        }
        for (i = 0; i < i0; i++, d += chunk) {
            col_set(d, zp, in_c);
        }
        {
            const int8_t *s = in_b + (iy * in_w + ix0 + i0 * step) * in_c;
#if TINYAOT_USE_MVE
            if (in_c == 16) { /* one vector per chunk (ic's first stage) */
                for (; i < i1; i++, d += chunk, s += src_step) {
                    vst1q_s8(d, vld1q_s8(s));
                }
            } else if ((in_c & 15) == 0) { /* whole vectors */
                for (; i < i1; i++, d += chunk, s += src_step) {
                    int32_t v;
                    for (v = 0; v < in_c; v += 16) {
                        vst1q_s8(d + v, vld1q_s8(s + v));
                    }
                }
            } else if (in_c < 16) { /* one predicated vector per chunk */
                const mve_pred16_t pc = vctp8q((uint32_t)in_c);
                for (; i < i1; i++, d += chunk, s += src_step) {
                    vstrbq_p_s8(d, vldrbq_z_s8(s, pc), pc);
                }
            } else
#endif
            {
                for (; i < i1; i++, d += chunk, s += src_step) {
                    col_copy(d, s, in_c);
                }
            }
        }
        COL_BARRIER();
        for (; i < n; i++, d += chunk) {
            col_set(d, zp, in_c);
        }
        COL_BARRIER();
    }
}

#endif /* TINYAOT_MVE_IM2COL_H */
