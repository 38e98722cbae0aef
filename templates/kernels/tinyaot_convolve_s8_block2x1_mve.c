/*
 * tinyaot_convolve_s8_block2x1_mve: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) over
 * 2x1 block-sparse weights in the Helium layout (tinyaot_mve_block2x1.h: per channel pair a bitmap of its kept
 * positions and their weights, the positions decoded once per call into the scratch, gathered 16 at a time), the
 * input offset folded into the bias, biases, multipliers and shifts one per channel zero-padded to a multiple of four
 * (tinyaot_nn_mve.h). Same result as tinyaot_convolve_s8 on the decoded weights, bit for bit; portable C on cores
 * without MVE. Rows of at most 256 positions (one offset byte per position); tinyaot_convolve_s8_block2x1_mve_long
 * takes longer ones (segments of 256 positions: tinyaot_mve_block2x1.h).
 *
 * Pixels as tinyaot_convolve_s8_block_mve: output pixels in pairs in raster order (a lone last one alone); a 1x1
 * convolution without padding whose input channels are a multiple of 4 reads each pixel's channels in place.
 * Otherwise windows are read in kernel-column-major order (kx, ky, c; the compiler permutes the bitmaps and weights
 * so: ops/compressed.py mve_block2x1_storage) from a band (tinyaot_mve_im2col.h band_fill) of the next pixels of an
 * output row: each input column's k_h * in_c values copied once for all the pixels whose windows hold it (ic's 3x3
 * stride-1 layers: 4 pixels from 6 columns instead of 2 windows of 9 taps), a pair across rows or a dilated width
 * one window per pixel. Scratch (4-byte aligned; none when both parts are 0): the band (2 * K4 bytes, K4 = K rounded
 * up to a multiple of 4; none in place), then filter->decoded bytes of position stream. filter->decoded 0: the
 * compiler put the stream itself in flash in place of the bitmaps (filter->bitmap; where it is no larger, very
 * sparse layers: ops/compressed.py mve_block2x1_positions), read as it is, nothing decoded per call. A pair's windows are read before its outputs are written, so the output may overlap the input as
 * for the dense kernels.
 */
#include "tinyaot_mve_block_conv.h"
#include "tinyaot_mve_block2x1.h"

int32_t tinyaot_convolve_s8_block2x1_mve_get_buffer_size(const tinyaot_dims *input_dims,
                                                         const tinyaot_dims *filter_dims)
{
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    (void)input_dims;
    /* every position kept (a filler after an odd K): per channel pair at most K + 1 bytes and 3 per segment of 256
       positions (rows past 256: _long), and 20 the decoding writes past them; the compiler plans the layer's own
       filter->decoded */
    return tinyaot_mve_block_conv_buffer_size(filter_dims) +
           2 * ((filter_dims->n + 3) / 4) * (3 * ((k + 255) / 256) + k + 1) + 20;
}

/* The pixel loop with bands or OHWI columns and the row loops of either stream, each compiled on its own (a run-time
   band choice inside one pixel loop cost ic_resnet8 ~17K instructions on the M55: registers). */
#define TINYAOT_B2X1_MVE_PIXELS(name, band, two_rows, one_row)                                                       \
    static TINYAOT_NOINLINE tinyaot_status name(TINYAOT_CONV_ARGS(tinyaot_block_weights), const int8_t *values)        \
    {                                                                                                                \
        return tinyaot_mve_block_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter,        \
                                      bias_dims, bias, output_dims, output, values, band, two_rows, one_row);        \
    }
TINYAOT_B2X1_MVE_PIXELS(b2x1_mve_bands, 1, tinyaot_mve_block2x1_two, tinyaot_mve_block2x1_one)
TINYAOT_B2X1_MVE_PIXELS(b2x1_mve_cols, 0, tinyaot_mve_block2x1_two, tinyaot_mve_block2x1_one)
TINYAOT_B2X1_MVE_PIXELS(b2x1_mve_cols_const, 0, tinyaot_mve_block2x1_two_const, tinyaot_mve_block2x1_one_const)
TINYAOT_B2X1_MVE_PIXELS(b2x1_mve_bands_long, 1, tinyaot_mve_block2x1_two_long, tinyaot_mve_block2x1_one_long)
TINYAOT_B2X1_MVE_PIXELS(b2x1_mve_cols_long, 0, tinyaot_mve_block2x1_two_long, tinyaot_mve_block2x1_one_long)

/* Either entry (seg: the segmented stream of rows past 256 positions; called with constants, so each keeps its own
   decoder and pixel loops only). */
static TINYAOT_ALWAYS_INLINE tinyaot_status block2x1_mve_conv(TINYAOT_CONV_ARGS(tinyaot_block2x1_weights), int seg)
{
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t cols = tinyaot_mve_block_in_place(conv_params, input_dims, filter_dims)
                             ? 0 : tinyaot_mve_block_conv_buffer_size(filter_dims);
    if (filter == NULL || filter->bitmap == NULL || k > (seg ? 255 * 256 : 256) || filter->decoded < 0) {
        return TINYAOT_ARG_ERROR;
    }
    if (cols + filter->decoded > 0 && (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
                                       ctx->size < cols + filter->decoded)) {
        return TINYAOT_ARG_ERROR;
    }
    /* the positions: decoded once per call after the columns, or (decoded 0) the stream itself in flash */
    const uint8_t *pos = filter->bitmap;
    if (filter->decoded > 0) {
        uint8_t *const dst = (uint8_t *)ctx->buf + cols;
        if (seg) {
            (void)tinyaot_mve_b2x1_positions_long(filter->bitmap, filter_dims->n, k, dst);
        } else {
            (void)tinyaot_mve_b2x1_positions(filter->bitmap, filter_dims->n, k, dst);
        }
        pos = dst;
    }
    const tinyaot_block_weights stream = {(const int8_t *)pos, NULL, NULL, 0};
    const int band = input_dims->c >= TINYAOT_MVE_BAND_MIN_IN_C;
    if (seg) {
        return (band ? b2x1_mve_bands_long : b2x1_mve_cols_long)(ctx, conv_params, quant_params, input_dims, input,
                                                                 filter_dims, &stream, bias_dims, bias, output_dims,
                                                                 output, filter->values);
    }
    return (band ? b2x1_mve_bands : b2x1_mve_cols)(ctx, conv_params, quant_params, input_dims, input, filter_dims,
                                                   &stream, bias_dims, bias, output_dims, output, filter->values);
}

tinyaot_status tinyaot_convolve_s8_block2x1_mve(TINYAOT_CONV_ARGS(tinyaot_block2x1_weights))
{
    return block2x1_mve_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias_dims, bias,
                             output_dims, output, 0);
}

int32_t tinyaot_convolve_s8_block2x1_mve_long_get_buffer_size(const tinyaot_dims *input_dims,
                                                              const tinyaot_dims *filter_dims)
{
    return tinyaot_convolve_s8_block2x1_mve_get_buffer_size(input_dims, filter_dims);
}

tinyaot_status tinyaot_convolve_s8_block2x1_mve_long(TINYAOT_CONV_ARGS(tinyaot_block2x1_weights))
{
    return block2x1_mve_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias_dims, bias,
                             output_dims, output, 1);
}

int32_t tinyaot_convolve_s8_block2x1_mve_const_get_buffer_size(const tinyaot_dims *input_dims,
                                                               const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    return tinyaot_mve_block_conv_buffer_size(filter_dims);
}

/* A 1x1 layer whose stream the compiler put in flash with constant block-rows (TINYAOT_MVE_B2X1_CONST_ROW;
   filter->decoded 0): an entry of its own, so the layers without it do not link its loops (~2.8 KB). */
tinyaot_status tinyaot_convolve_s8_block2x1_mve_const(TINYAOT_CONV_ARGS(tinyaot_block2x1_weights))
{
    const int32_t cols = tinyaot_mve_block_in_place(conv_params, input_dims, filter_dims)
                             ? 0 : tinyaot_mve_block_conv_buffer_size(filter_dims);
    if (filter == NULL || filter->bitmap == NULL || filter->decoded != 0 || filter_dims->h != 1 ||
        filter_dims->w != 1 || filter_dims->c > 256) {
        return TINYAOT_ARG_ERROR;
    }
    if (cols > 0 && (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 || ctx->size < cols)) {
        return TINYAOT_ARG_ERROR;
    }
    const tinyaot_block_weights stream = {(const int8_t *)filter->bitmap, NULL, NULL, 0};
    /* (1x1: the window order is the kernel's in either column form) */
    return b2x1_mve_cols_const(ctx, conv_params, quant_params, input_dims, input, filter_dims, &stream, bias_dims,
                               bias, output_dims, output, filter->values);
}
