/*
 * The Helium convolutions (tinyaot_convolve_1x1_s8_mve.c, tinyaot_convolve_s8_mve.c) over int4 or clustered weights
 * (tinyaot_decoded_weights, tinyaot_decode.h), each weight decoded once per call into scratch in those kernels' own
 * blocked layout (tinyaot_mve_gemm.h: per block of four output channels, chunk by chunk of 16, the four rows'
 * values), so the multiply-accumulates run the dense Helium cores unchanged. Same arguments and result as the dense
 * kernels, the filter replaced by its codes in the dense kernel's layout (regions: blocks of four channels; padding
 * whose products never reach an output decodes to any codebook value, tinyaot/ops/mve.py _free_positions).
 *
 * 1x1 without padding: tile by tile of output channels (as many blocks of four as the tile holds, at least one:
 * 4 * K16 bytes each; the tile is a local array of TINYAOT_DECODE_STACK_TILE bytes when one block fits it, no scratch
 * then, else the scratch), the tile's weights are decoded and every output pixel runs against them, its outputs written
 * at their place in the layer's output. The output must not overlap the input (every tile reads every window).
 * Other convolutions: the whole filter (in tinyaot_convolve_s8_mve's layout, its direct path's padded kernel rows
 * included) is decoded into the scratch (rounded up to a word) and the dense kernel runs on it with the scratch
 * after it (its columns).
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_decode.h"
#include "tinyaot_mve_gemm.h"

static int32_t k16_of(const tinyaot_dims *filter_dims)
{
    return (filter_dims->h * filter_dims->w * filter_dims->c + 15) & ~15;
}

/* Codes of the whole blocked filter (out_c rounded up to four rows of k16). */
static int32_t blocked_size(const tinyaot_dims *filter_dims)
{
    return ((filter_dims->n + 3) & ~3) * k16_of(filter_dims);
}

/* Channels per tile: as many whole blocks of four as the scratch holds (at least one). */
static int32_t tile_channels(const tinyaot_context *ctx, const tinyaot_dims *filter_dims)
{
    const int32_t block = 4 * k16_of(filter_dims);
    return ctx->size >= block ? 4 * (ctx->size / block) : 0;
}

static void slice_requant(tinyaot_mve_requant *t, const tinyaot_mve_requant *q, int32_t o)
{
    *t = *q;
    t->bias = q->bias + o;
    t->mult = q->mult + o;
    t->shift = q->shift + o;
}

tinyaot_status tinyaot_convolve_1x1_s8_mve_decoded(TINYAOT_CONV_ARGS(tinyaot_decoded_weights))
{
    const int32_t in_c = input_dims->c;
    const int32_t out_c = output_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t k16 = k16_of(filter_dims);
    int32_t local[TINYAOT_DECODE_STACK_TILE / 4]; /* the stack tile (int32: word-aligned) */
    const int stacked = 4 * k16 <= TINYAOT_DECODE_STACK_TILE;
    const int32_t tile_c = stacked ? 4 * (TINYAOT_DECODE_STACK_TILE / (4 * k16))
                                   : (ctx != NULL && ctx->buf != NULL ? tile_channels(ctx, filter_dims) : 0);
    int8_t *const buf = stacked ? (int8_t *)local : (ctx != NULL ? (int8_t *)ctx->buf : NULL);
    tinyaot_mve_requant q;
    int32_t o;
    (void)bias_dims;
    if (filter == NULL || filter->count != blocked_size(filter_dims) || tile_c == 0 || buf == NULL ||
        TINYAOT_CONV_1X1_ARGS_BAD(conv_params, input_dims, filter_dims, output_dims, in_c, out_c, out_h, out_w) ||
        bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, conv_params);
    for (o = 0; o < out_c; o += tile_c) {
        const int32_t n_out = out_c - o < tile_c ? out_c - o : tile_c;
        const int8_t *tile = buf;
        tinyaot_mve_requant t;
        int32_t b, y;
        tinyaot_decode(filter, o * k16, ((n_out + 3) & ~3) * k16, buf);
        slice_requant(&t, &q, o);
        if (conv_params->stride.h == 1 && conv_params->stride.w == 1) {
            /* stride 1: the input pixels are the rows of one [pixels, in_c] matrix, in pairs, the last odd one alone */
            const int32_t pixels = output_dims->n * out_h * out_w;
            if (pixels / 2 > 0) {
                tinyaot_mve_gemm2_strided_s8(input, in_c, pixels / 2, in_c, tile, n_out, out_c, &t, output + o);
            }
            if (pixels % 2) {
                tinyaot_mve_gemm1_s8(input + (pixels - 1) * in_c, in_c, tile, n_out, &t,
                                     output + (pixels - 1) * out_c + o);
            }
            continue;
        }
        /* output row by row: the row's pixels in pairs (input pixels stride.w * in_c apart), an odd last one alone */
        for (b = 0; b < output_dims->n; b++) {
            for (y = 0; y < out_h; y++) {
                const int32_t p = (b * out_h + y) * out_w;
                const int8_t *x0 = input + ((b * input_dims->h + y * conv_params->stride.h) * input_dims->w) * in_c;
                const int32_t step = conv_params->stride.w * in_c;
                if (out_w / 2 > 0) {
                    tinyaot_mve_gemm2_strided_s8(x0, step, out_w / 2, in_c, tile, n_out, out_c, &t,
                                                 output + p * out_c + o);
                }
                if (out_w % 2) {
                    tinyaot_mve_gemm1_s8(x0 + (out_w - 1) * step, in_c, tile, n_out, &t,
                                         output + (p + out_w - 1) * out_c + o);
                }
            }
        }
    }
    return TINYAOT_OK;
}

tinyaot_status tinyaot_convolve_s8_mve_decoded(TINYAOT_CONV_ARGS(tinyaot_decoded_weights))
{
    /* the whole filter decoded (its length is the codes' count), then the dense kernel with the rest of the scratch
       as its columns */
    int32_t head;
    tinyaot_context rest;
    if (filter == NULL || ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
        filter->count <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    head = (filter->count + 3) & ~3;
    if (ctx->size < head) {
        return TINYAOT_ARG_ERROR;
    }
    rest.buf = (int8_t *)ctx->buf + head;
    rest.size = ctx->size - head;
    tinyaot_decode(filter, 0, filter->count, (int8_t *)ctx->buf);
    return tinyaot_convolve_s8_mve(&rest, conv_params, quant_params, input_dims, input, filter_dims,
                                   (const int8_t *)ctx->buf, bias_dims, bias, output_dims, output);
}
