/*
 * tinyaot_convolve_s8_fold_decoded: the fold convolution (tinyaot_convolve_s8_fold.c) over int4 or clustered
 * weights (tinyaot_decoded_weights, tinyaot_decode.h), each weight decoded once per call into scratch in the fold
 * kernel's own layout, so the multiply-accumulates run the dense 4x2 blocks unchanged. Same arguments as
 * tinyaot_convolve_s8_fold (folded bias, fold requantization table), the filter replaced by its codes, whose regions
 * are the fold layout's blocks of four output channels (4 * K codes each; the out_ch % 4 last channels one shorter
 * region).
 *
 * in_ch a multiple of 4 (the fold kernel's in-place path): tile by tile of output channels (as many blocks of four
 * as the tile holds, at least one: 4 * K bytes each; the tile is a local array of TINYAOT_DECODE_STACK_TILE bytes
 * when one block fits it, no scratch then, else the scratch), their weights are decoded into it and every
 * output pixel pair runs against them; the windows are read in place. Each weight is decoded once, each window read
 * once per block (as the dense kernel does); a pixel pair's bookkeeping is paid once per tile. The output must not
 * overlap the input (every tile reads every window).
 * Other in_ch (the fold kernel's column path, thin first layers): the whole filter is decoded into the scratch
 * (out_ch * K bytes, 4-byte aligned) and the dense kernel runs on it with the scratch after it (its column).
 */
#include "tinyaot_fold_conv.h"
#include "tinyaot_decode.h"

static int32_t fold_k(const tinyaot_dims *filter_dims)
{
    return filter_dims->h * filter_dims->w * filter_dims->c;
}

int32_t tinyaot_convolve_s8_fold_decoded_get_buffer_size(const tinyaot_dims *input_dims,
                                                         const tinyaot_dims *filter_dims)
{
    const int32_t k = fold_k(filter_dims);
    if (filter_dims->c % 4 == 0) {
        /* none when a block fits the stack tile; else one block's tile: the least, more blocks per tile run faster
           (the compiler may give more) */
        return 4 * k <= TINYAOT_DECODE_STACK_TILE ? 0 : 4 * k;
    }
    /* the whole filter, rounded up to a word, then the dense kernel's column */
    return ((filter_dims->n * k + 3) & ~3) + tinyaot_convolve_s8_fold_get_buffer_size(input_dims, filter_dims);
}

/* Where the raster walk over output pixels wraps, so that the next pixel is found without a division (the walk
   runs once per tile: fold_locate's two divisions per pixel were a third of a tile pass's bookkeeping). */
typedef struct {
    int32_t last_x, last_y; /* base_x / base_y of the last output column / row */
    int32_t max_x, max_y;   /* the largest base_x / base_y whose window lies inside the input */
    int32_t batch;          /* input bytes per batch image */
} fold_walk;

/* px := the next output pixel in raster order (within a batch image, then the next image). */
static TINYAOT_ALWAYS_INLINE void fold_next(const fold_geom *g, const fold_walk *wk, fold_pixel *px)
{
    px->base_x += g->stride_w;
    if (px->base_x > wk->last_x) {
        px->base_x = -g->pad_l;
        px->base_y += g->stride_h;
        if (px->base_y > wk->last_y) {
            px->base_y = -g->pad_t;
            px->in_b += wk->batch;
        }
    }
    px->inside = (px->base_y >= 0 && px->base_y <= wk->max_y && px->base_x >= 0 && px->base_x <= wk->max_x);
}

/* Channels o0 .. o1-1 (o0 a multiple of 4; their weights w in the fold layout: whole blocks of four, then the last
   channels each in order) over every output pixel pair, windows read in place. */
static void fold_tile_pixels(const fold_geom *g, const int8_t *input, const int8_t *w, const fold_out *q, int32_t o0,
                             int32_t o1, int32_t n_pix, int32_t out_h, int32_t out_w, const int8_t *zrow,
                             int8_t *output)
{
    const int32_t out_c = q->out_c;
    const int32_t row_n4 = (g->k_w * g->in_c) >> 2;
    const int32_t row_step = g->dil_h * g->in_w * g->in_c;
    const int rows_run = (g->dil_w == 1);
    fold_walk wk;
    fold_pixel pa, pb;
    int32_t p;
    wk.last_x = (out_w - 1) * g->stride_w - g->pad_l;
    wk.last_y = (out_h - 1) * g->stride_h - g->pad_t;
    wk.max_x = g->in_w - 1 - (g->k_w - 1) * g->dil_w;
    wk.max_y = g->in_h - 1 - (g->k_h - 1) * g->dil_h;
    wk.batch = g->in_h * g->in_w * g->in_c;
    fold_locate(g, input, out_h, out_w, 0, &pb);
    for (p = 0; p < n_pix; p += 2) {
        /* a lone last pixel is computed twice (slot b holds it again and writes the same results over slot a's) */
        const int two_pix = (p + 1 < n_pix);
        int8_t *out_a = output + p * out_c;
        int8_t *out_b = two_pix ? out_a + out_c : out_a;
        const int8_t *wb = w;
        int32_t o, c, ky;
        pa = pb; /* pixel p: the pixel after the last pair's b (p = 0: located above) */
        if (p > 0) {
            fold_next(g, &wk, &pa);
        }
        pb = pa;
        if (two_pix) {
            fold_next(g, &wk, &pb);
        }
        if (!(rows_run && pa.inside && pb.inside)) {
            fold_pair_clipped(g, &pa, &pb, zrow, w, q, o0, o1, out_a, out_b);
            continue;
        }
        {
            const int8_t *xa0 = pa.in_b + (pa.base_y * g->in_w + pa.base_x) * g->in_c;
            const int8_t *xb0 = pb.in_b + (pb.base_y * g->in_w + pb.base_x) * g->in_c;
            for (o = o0; o + 3 < o1; o += 4) {
                const int8_t *xa = xa0;
                const int8_t *xb = xb0;
                int32_t acc[8];
                for (c = 0; c < 4; c++) {
                    acc[c] = acc[4 + c] = q->bias[o + c];
                }
                for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, wb += 16 * row_n4) {
                    fold_mac_4x2_s8(xa, xb, wb, row_n4, acc);
                }
                fold_store_4x2(q, o, acc, out_a, out_b);
            }
            for (; o < o1; o++) { /* the last channels, each its K values in order */
                const int8_t *xa = xa0;
                const int8_t *xb = xb0;
                int32_t acc_a = q->bias[o];
                int32_t acc_b = acc_a;
                for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, wb += 4 * row_n4) {
                    acc_a = fold_dot_s8(xa, wb, row_n4, acc_a);
                    acc_b = fold_dot_s8(xb, wb, row_n4, acc_b);
                }
                out_a[o] = tinyaot_fold_rq(acc_a, q->mr + 2 * o, tinyaot_fold_e(q->e, o), q->act_min, q->act_max);
                out_b[o] = tinyaot_fold_rq(acc_b, q->mr + 2 * o, tinyaot_fold_e(q->e, o), q->act_min, q->act_max);
            }
        }
    }
}

tinyaot_status tinyaot_convolve_s8_fold_decoded(TINYAOT_CONV_ARGS(tinyaot_decoded_weights))
{
    const int32_t out_c = filter_dims->n;
    const int32_t k = fold_k(filter_dims);
    const int stacked = filter_dims->c % 4 == 0 && 4 * k <= TINYAOT_DECODE_STACK_TILE; /* the tile is local */
    if (filter == NULL || filter->count != out_c * k ||
        (!stacked && (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
                      ctx->size < tinyaot_convolve_s8_fold_decoded_get_buffer_size(input_dims, filter_dims)))) {
        return TINYAOT_ARG_ERROR;
    }
    if (filter_dims->c % 4 != 0) {
        /* the whole filter decoded, then the dense kernel with the rest of the scratch as its column */
        const int32_t head = (out_c * k + 3) & ~3;
        const tinyaot_context rest = {(int8_t *)ctx->buf + head, ctx->size - head};
        tinyaot_decode(filter, 0, out_c * k, (int8_t *)ctx->buf);
        return tinyaot_convolve_s8_fold(&rest, conv_params, quant_params, input_dims, input, filter_dims,
                                        (const int8_t *)ctx->buf, bias_dims, bias, output_dims, output);
    }
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL ||
        input_dims->c > FOLD_ZP_BYTES) {
        return TINYAOT_ARG_ERROR; /* as tinyaot_convolve_s8_fold (a padded tap reads in_ch zero points from the stack) */
    }
    {
        uint32_t zwords[FOLD_ZP_BYTES / 4]; /* zero points for clipped windows (fold_pair_clipped) */
        int32_t local[TINYAOT_DECODE_STACK_TILE / 4]; /* the stack tile (int32: word-aligned) */
        fold_out q;
        fold_geom g;
        int8_t *tile = stacked ? (int8_t *)local : (int8_t *)ctx->buf;
        const int32_t tile_bytes = stacked ? TINYAOT_DECODE_STACK_TILE : ctx->size;
        int32_t o, i;
        const uint32_t z4 = ((uint32_t)(-conv_params->input_offset) & 0xFFu) * 0x01010101u;
        (void)bias_dims;
        for (i = 0; i < FOLD_ZP_BYTES / 4; i++) {
            zwords[i] = z4;
        }
        FOLD_OUT_SET(q, bias, quant_params, out_c, conv_params);
        TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
        g.zp = -conv_params->input_offset;
        g.k = k;
        g.k4 = k & ~3;
        /* channels per tile: as many whole blocks of four as the tile holds */
        const int32_t tile_c = 4 * (tile_bytes / (4 * k));
        for (o = 0; o < out_c; o += tile_c) {
            const int32_t o1 = out_c - o < tile_c ? out_c : o + tile_c;
            tinyaot_decode(filter, o * k, (o1 - o) * k, tile);
            fold_tile_pixels(&g, input, tile, &q, o, o1, input_dims->n * output_dims->h * output_dims->w,
                             output_dims->h, output_dims->w, (const int8_t *)zwords, output);
        }
    }
    return TINYAOT_OK;
}
