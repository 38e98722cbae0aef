/*
 * The entry of the Helium block-sparse convolutions (tinyaot_convolve_s8_block_mve.c: 4x4 blocks,
 * tinyaot_convolve_s8_block2x1_mve.c: 2x1 blocks), which differ only in their row loop (tinyaot_mve_block.h,
 * tinyaot_mve_block2x1.h): output pixels in pairs in raster order (a lone last one alone); a 1x1 convolution without
 * padding whose input channels are a multiple of 4 reads each pixel's channels in place (no scratch), otherwise each
 * pixel's window is copied into an int8 im2col column (tinyaot_mve_im2col.h), two of them in the scratch (2 * K4
 * bytes, K4 = kh * kw * in_ch rounded up to a multiple of 4, 4-byte aligned; the positions past K hold 0). A pair's
 * windows are read before its outputs are written, so the output may overlap the input as for the dense kernels.
 */
#ifndef TINYAOT_MVE_BLOCK_CONV_H
#define TINYAOT_MVE_BLOCK_CONV_H

#include "tinyaot_nn_mve.h"
#include "tinyaot_window.h"
#include "tinyaot_mve_block.h"
#include "tinyaot_mve_im2col.h"

/* A row loop: every block-row against two columns (or one). */
typedef void (*tinyaot_mve_block_two_fn)(const int8_t *xa, const int8_t *xb, int8_t *out,
                                         const tinyaot_mve_block_job *job);
typedef void (*tinyaot_mve_block_one_fn)(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *job);

static TINYAOT_ALWAYS_INLINE int tinyaot_mve_block_in_place(const tinyaot_conv_params *p, const tinyaot_dims *input_dims,
                                                      const tinyaot_dims *filter_dims)
{
    return filter_dims->h == 1 && filter_dims->w == 1 && p->padding.h == 0 && p->padding.w == 0 &&
           input_dims->c % 4 == 0;
}

/* The scratch: two int8 columns (the in-place case also needs no padding, which is not known here: asked for by the
   compiler only then). */
static TINYAOT_ALWAYS_INLINE int32_t tinyaot_mve_block_conv_buffer_size(const tinyaot_dims *filter_dims)
{
    return 2 * ((filter_dims->h * filter_dims->w * filter_dims->c + 3) & ~3);
}

/* The convolution with row loops two_rows / one_row (called with constants: GCC calls them directly); values: the
   2x1 loop's weights (filter->values then holds its positions), else NULL; band: windows in kernel-column-major
   order from bands of the next pixels of an output row (band_fill; the 2x1 kernel where the input has at least
   TINYAOT_MVE_BAND_MIN_IN_C channels), else OHWI im2col columns. */
static TINYAOT_ALWAYS_INLINE tinyaot_status tinyaot_mve_block_conv(TINYAOT_CONV_ARGS(tinyaot_block_weights),
                                                                 const int8_t *values, int band,
                                                                 tinyaot_mve_block_two_fn two_rows,
                                                                 tinyaot_mve_block_one_fn one_row)
{
    const int32_t out_c = filter_dims->n;
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t k4 = (k + 3) & ~3;
    const int in_place = tinyaot_mve_block_in_place(conv_params, input_dims, filter_dims);
    conv_geom g;
    pixel_pos pa;
    tinyaot_mve_block_job job;
    int8_t *col = NULL;
    int32_t n_pix, p;
    int32_t band_px = 1, band_step = 0, band_start = 0, band_end = 0;
    (void)bias_dims;
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL ||
        filter == NULL || (in_place && ((uintptr_t)input & 3u) != 0)) {
        return TINYAOT_ARG_ERROR;
    }
    if (!in_place) {
        if (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 || ctx->size < 2 * k4) {
            return TINYAOT_ARG_ERROR;
        }
        col = (int8_t *)ctx->buf;
        for (p = k; p < k4; p++) { /* positions past K multiply zero weights: any value, but a defined one */
            col[p] = 0;
            col[k4 + p] = 0;
        }
    }
    TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
    g.out_h = output_dims->h;
    g.out_w = output_dims->w;
    g.zp = (int8_t)(-conv_params->input_offset);
    (void)quant_params; /* per-row requantization words in bias (tinyaot_mve_block.h) */
    tinyaot_mve_block_job_of(&job, filter->values, bias, out_c, conv_params->output_offset,
                             conv_params->activation.min, conv_params->activation.max);
    job.values = values;
    n_pix = input_dims->n * g.out_h * g.out_w;
    if (band) {
        /* the pixels a band of 2 * k4 bytes holds: (band_px - 1) * stride_w + k_w chunks of k_h * in_c bytes */
        const int32_t chunks = 2 * k4 / (g.k_h * g.in_c);
        band_px = g.dil_w == 1 ? (chunks - g.k_w) / g.stride_w + 1 : 1;
        band_step = g.stride_w * g.k_h * g.in_c;
    }
    pa.b = pa.oy = pa.ox = 0;
    for (p = 0; p < n_pix; p += 2) {
        const int two = (p + 1 < n_pix);
        pixel_pos pb = pa;
        const int8_t *xa, *xb;
        int8_t *out_a = output + p * out_c;
        next_pixel(&pb, &g);
        if (in_place) {
            xa = input + ((pa.b * g.in_h + pa.oy * g.stride_h) * g.in_w + pa.ox * g.stride_w) * g.in_c;
            xb = input + ((pb.b * g.in_h + pb.oy * g.stride_h) * g.in_w + pb.ox * g.stride_w) * g.in_c;
        } else if (band) {
            /* windows in kernel-column-major order (band_fill): a band of the row's next pixels, kept while the
               pair lies in it, else each pixel's own window */
            if (p + two >= band_end) {
                const int8_t *in_a = input + pa.b * g.in_h * g.in_w * g.in_c;
                const int32_t left = g.out_w - pa.ox;
                const int32_t q = left < band_px ? left : band_px;
                if (two && q >= 2) {
                    band_fill(col, &g, in_a, pa.oy, pa.ox * g.stride_w - g.pad_l, (q - 1) * g.stride_w + g.k_w, 1);
                    band_start = p;
                    band_end = p + q;
                } else {
                    band_fill(col, &g, in_a, pa.oy, pa.ox * g.stride_w - g.pad_l, g.k_w, g.dil_w);
                    if (two) {
                        band_fill(col + k4, &g, input + pb.b * g.in_h * g.in_w * g.in_c, pb.oy,
                                  pb.ox * g.stride_w - g.pad_l, g.k_w, g.dil_w);
                    }
                    band_start = p;
                    band_end = p; /* (refilled at the next pair) */
                }
            }
            if (band_end > p) {
                xa = col + (p - band_start) * band_step;
                xb = xa + band_step;
            } else {
                xa = col;
                xb = col + k4;
            }
        } else {
            col_fill(col, &g, input, &pa);
            if (two) {
                col_fill(col + k4, &g, input, &pb);
            }
            xa = col;
            xb = col + k4;
        }
        if (two) {
            two_rows(xa, xb, out_a, &job);
        } else {
            one_row(xa, out_a, &job);
        }
        pa = pb;
        next_pixel(&pa, &g);
    }
    return TINYAOT_OK;
}

#endif /* TINYAOT_MVE_BLOCK_CONV_H */
