/*
 * tinyaot int8 kernels: the Helium (MVE) convolution and fully connected kernels (mve-mac). Same arguments as the
 * generic kernels in tinyaot_nn.h, except that
 *   - `bias` (required, not NULL) holds the input offset folded in: bias[o] = b[o] + input_offset * sum(w[o])
 *     (tinyaot/ops/common.py fold_input_offset);
 *   - bias, multipliers and shifts (one per output channel) are zero-padded to a multiple of four entries, and the
 *     filter is in the blocked layout of tinyaot_mve_gemm.h (tinyaot/ops/mve.py renders both).
 * A kernel returns TINYAOT_ARG_ERROR when its arguments do not fit it. On cores without MVE (and on the host) the same files
 * compile to portable C computing the same integers. See tinyaot_mve_gemm.h for the inner loops and the overflow
 * bound.
 */
#ifndef TINYAOT_NN_MVE_H
#define TINYAOT_NN_MVE_H

#include <stdint.h>

#include "tinyaot_nn_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Standard convolution, one group (filter_dims->c == input_dims->c), any kernel size, stride, dilation, padding:
   each output pixel's window is gathered into an int8 im2col column, padded taps holding the input zero point
   (-input_offset), which cancels their share of the folded bias. Scratch (required): one column of
   kh * kw * in_ch bytes; with room for two, two pixels run per pass. Without enough scratch: TINYAOT_ARG_ERROR. */
int32_t tinyaot_convolve_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_mve(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                       const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                       const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                       const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                       int8_t *output);

/* 1x1 convolution without padding, any stride: each output pixel is one input pixel's channels, read in place
   (no scratch), two pixels per pass. */
tinyaot_status tinyaot_convolve_1x1_s8_mve(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                           const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                           const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                           const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                           int8_t *output);

/* Fully connected, filter_offset 0 and per_channel 1 (TINYAOT_ARG_ERROR otherwise); two batch rows per pass. No scratch. */
tinyaot_status tinyaot_fully_connected_s8_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                              const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                              const tinyaot_dims *input_dims, const int8_t *input,
                                              const tinyaot_dims *filter_dims, const int8_t *filter,
                                              const tinyaot_dims *bias_dims, const int32_t *bias,
                                              const tinyaot_dims *output_dims, int8_t *output);

/* Fully connected on 4-bit weights, two rows per byte (tinyaot_fully_connected_s8_nibble_mve.c for the layouts):
   int4 weights as biased / two's-complement nibbles, clustered codes of at most 16 entries (bits 4; row_bytes
   unused), or of 17..32 entries (_clustered5_mve, bits 5, a plane of fifth bits). Conditions as
   tinyaot_fully_connected_s8_mve, depth at most 65536. No scratch. */
tinyaot_status tinyaot_fully_connected_s4_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                              const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                              const tinyaot_dims *input_dims, const int8_t *input,
                                              const tinyaot_dims *filter_dims, const int8_t *filter,
                                              const tinyaot_dims *bias_dims, const int32_t *bias,
                                              const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s8_clustered_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                        const tinyaot_per_channel_quant_params *quant_params,
                                                        int32_t per_channel, const tinyaot_dims *input_dims,
                                                        const int8_t *input, const tinyaot_dims *filter_dims,
                                                        const tinyaot_clustered_weights *filter,
                                                        const tinyaot_dims *bias_dims, const int32_t *bias,
                                                        const tinyaot_dims *output_dims, int8_t *output);

tinyaot_status tinyaot_fully_connected_s8_clustered5_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                         const tinyaot_per_channel_quant_params *quant_params,
                                                         int32_t per_channel, const tinyaot_dims *input_dims,
                                                         const int8_t *input, const tinyaot_dims *filter_dims,
                                                         const tinyaot_clustered_weights *filter,
                                                         const tinyaot_dims *bias_dims, const int32_t *bias,
                                                         const tinyaot_dims *output_dims, int8_t *output);

/* Fully connected on 5-bit grid weights (int5 storage), three rows in two bytes (tinyaot_fully_connected_s5_mve.c for
   the layout). Conditions as tinyaot_fully_connected_s8_mve, depth at most 65536. No scratch. */
tinyaot_status tinyaot_fully_connected_s5_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                              const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                              const tinyaot_dims *input_dims, const int8_t *input,
                                              const tinyaot_dims *filter_dims, const uint8_t *filter,
                                              const tinyaot_dims *bias_dims, const int32_t *bias,
                                              const tinyaot_dims *output_dims, int8_t *output);

/* Block-sparse convolution (one group) and fully connected (filter_offset 0): the filter is a tinyaot_block_weights
   whose values are in the Helium layout and whose `deltas` hold each stored block's absolute block column (rows of
   at most 1024 positions; tinyaot_mve_block.h). Scratch: none for a 1x1 convolution without padding on a multiple
   of 4 input channels, or a fully connected depth that is a multiple of 4; else two int8 columns of K rounded up to
   a multiple of 4 (required, 4-byte aligned). Input read in place must be 4-byte aligned. */
int32_t tinyaot_convolve_s8_block_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block_mve(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                             const int8_t *input, const tinyaot_dims *filter_dims,
                                             const tinyaot_block_weights *filter, const tinyaot_dims *bias_dims,
                                             const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output);

/* The same over 2x1 block-sparse weights (tinyaot_block2x1_weights, values in the order of tinyaot_mve_block2x1.h;
   rows of at most 256 positions). Scratch (required): the columns of tinyaot_convolve_s8_block_mve (none in place),
   then filter->decoded bytes of positions decoded from the bitmaps once per call (0: filter->bitmap holds the
   kernel's position stream itself, read in place). */
int32_t tinyaot_convolve_s8_block2x1_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block2x1_mve(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                                const tinyaot_per_channel_quant_params *quant_params,
                                                const tinyaot_dims *input_dims, const int8_t *input,
                                                const tinyaot_dims *filter_dims, const tinyaot_block2x1_weights *filter,
                                                const tinyaot_dims *bias_dims, const int32_t *bias,
                                                const tinyaot_dims *output_dims, int8_t *output);

/* The same for a 1x1 layer whose stream is in flash with constant block-rows (decoded 0; tinyaot_mve_block2x1.h
   TINYAOT_MVE_B2X1_CONST_ROW). Scratch: the columns only (none in place). */
int32_t tinyaot_convolve_s8_block2x1_mve_const_get_buffer_size(const tinyaot_dims *input_dims,
                                                               const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block2x1_mve_const(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                                const tinyaot_per_channel_quant_params *quant_params,
                                                const tinyaot_dims *input_dims, const int8_t *input,
                                                const tinyaot_dims *filter_dims, const tinyaot_block2x1_weights *filter,
                                                const tinyaot_dims *bias_dims, const int32_t *bias,
                                                const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_convolve_s8_block2x1_mve_long_get_buffer_size(const tinyaot_dims *input_dims,
                                                              const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block2x1_mve_long(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                                     const tinyaot_per_channel_quant_params *quant_params,
                                                     const tinyaot_dims *input_dims, const int8_t *input,
                                                     const tinyaot_dims *filter_dims, const tinyaot_block2x1_weights *filter,
                                                     const tinyaot_dims *bias_dims, const int32_t *bias,
                                                     const tinyaot_dims *output_dims, int8_t *output);

/* Helium convolutions and depthwise over int4 or clustered weights decoded once per call (tinyaot_decode.h). */
tinyaot_status tinyaot_convolve_1x1_s8_mve_decoded(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                                   const tinyaot_per_channel_quant_params *quant_params,
                                                   const tinyaot_dims *input_dims, const int8_t *input,
                                                   const tinyaot_dims *filter_dims, const tinyaot_decoded_weights *filter,
                                                   const tinyaot_dims *bias_dims, const int32_t *bias,
                                                   const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_convolve_s8_mve_decoded(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                               const tinyaot_per_channel_quant_params *quant_params,
                                               const tinyaot_dims *input_dims, const int8_t *input,
                                               const tinyaot_dims *filter_dims, const tinyaot_decoded_weights *filter,
                                               const tinyaot_dims *bias_dims, const int32_t *bias,
                                               const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_depthwise_conv_s8_mve_decoded(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                                     const tinyaot_per_channel_quant_params *quant_params,
                                                     const tinyaot_dims *input_dims, const int8_t *input,
                                                     const tinyaot_dims *filter_dims, const tinyaot_decoded_weights *filter,
                                                     const tinyaot_dims *bias_dims, const int32_t *table,
                                                     const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_fully_connected_s8_block_mve_get_buffer_size(const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_fully_connected_s8_block_mve(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                    const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                    const tinyaot_dims *input_dims, const int8_t *input,
                                                    const tinyaot_dims *filter_dims, const tinyaot_block_weights *filter,
                                                    const tinyaot_dims *bias_dims, const int32_t *bias,
                                                    const tinyaot_dims *output_dims, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* TINYAOT_NN_MVE_H */
