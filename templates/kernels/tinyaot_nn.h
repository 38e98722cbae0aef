/*
 * tinyaot int8 kernels: the kernel API (CMSIS-NN-style, integer only, no allocation).
 *
 * Every kernel returns a tinyaot_status (tinyaot_status.h): TINYAOT_OK, or TINYAOT_ARG_ERROR when its arguments are
 * inconsistent (nothing is checked beyond what the kernel needs to index safely and compute without overflow), having
 * then written nothing a later layer could use. Every kernel a model file calls is declared here (or in
 * tinyaot_nn_mve.h, included below), inside extern "C": the model file and the kernels compile as C99 or C++ and link
 * in any mix. Scratch: a kernel with a ctx argument tells through its _get_buffer_size how many
 * bytes of ctx->buf (4-byte aligned) it can use. Only conv asks for any (two int16 im2col columns,
 * 4 * ceil_even(kh*kw*in_ch/groups) bytes, the same on every core; the compressed-weight convs a four-pixel column,
 * see below); scratch is always optional: with ctx or
 * ctx->buf NULL, or ctx->size too small, every kernel computes the same result in place, only slower.
 * Inputs and outputs of fully connected and pooling must not overlap; add and softmax may write their output over
 * an input of the same size (exactly in place). Conv and depthwise conv guarantee an order the memory planner may
 * build partial overlap on: output pixels are produced in raster order (batch, row, column), at most two at a time,
 * and once a pixel (pair) is finished its window is never read again; the only exception is conv with groups > 1
 * on the im2col (scratch) path, which runs group by group over all pixels.
 */
#ifndef TINYAOT_NN_H
#define TINYAOT_NN_H

#include <stdint.h>

#include "tinyaot_nn_types.h"
#include "tinyaot_nn_support.h"
#include "tinyaot_window.h"
#include "tinyaot_nn_mve.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conv: filter_dims = {out_ch, kh, kw, in_ch / groups}, groups = input_dims->c / filter_dims->c, weights OHWI.
   bias (one int32 per output channel) may be NULL. Scratch: 4 * ceil_even(kh * kw * in_ch/groups) bytes (im2col). */
int32_t tinyaot_convolve_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                   const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                   const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                   const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                   int8_t *output);

/* Depthwise conv: filter_dims = {1, kh, kw, in_ch * ch_mult}; output channel c * ch_mult + m reads input channel c.
   bias may be NULL. */
int32_t tinyaot_depthwise_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_depthwise_conv_s8(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                         const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                         const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                         int8_t *output);
/* Helium (MVE) depthwise, ch_mult 1: `table` (in place of the bias) holds per channel the bias with the input
   offset folded in, the multiplier and the shift split in two, laid out for the vector lanes (slot of channel c:
   tinyaot_depthwise_conv_s8_mve_table_slot); quant_params is not read. See tinyaot_depthwise_conv_s8_mve.c. Plain C
   on other cores. */
int32_t tinyaot_depthwise_conv_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int32_t tinyaot_depthwise_conv_s8_mve_table_slot(int32_t c, int32_t channels);
tinyaot_status tinyaot_depthwise_conv_s8_mve(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params,
                                             const tinyaot_dims *input_dims, const int8_t *input,
                                             const tinyaot_dims *filter_dims, const int8_t *filter,
                                             const tinyaot_dims *bias_dims, const int32_t *table,
                                             const tinyaot_dims *output_dims, int8_t *output);

/* Fully connected: input_dims n = batches and h*w*c = depth; filter_dims n = depth, c = out_ch; filter is
   [out_ch][depth]. per_channel == 0 uses multiplier[0] / shift[0] for every output. bias may be NULL. */
int32_t tinyaot_fully_connected_s8_get_buffer_size(const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_fully_connected_s8(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                          const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                          const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                          const int8_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                                          const tinyaot_dims *output_dims, int8_t *output);

/* The "fold" variants (tinyaot_convolve_s8_fold.c, tinyaot_fully_connected_s8_fold.c): same arguments as above
   (conv: one group only; fully connected: filter_offset 0), but bias holds the input offset folded in, quant_params
   a requantization table ({mult, radd} pairs and right shifts four per word: tinyaot_fold_support.h) and the
   filter is pre-arranged for the kernel's register block (the files' headers say how). Conv scratch: none when
   in_ch is a multiple of 4 (windows read in place; in_ch <= 256), else required: 4 * kh * kw * in_ch bytes,
   4-byte aligned. */
int32_t tinyaot_convolve_s8_fold_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_fold(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                        const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                        int8_t *output);
int32_t tinyaot_fully_connected_s8_fold_get_buffer_size(const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_fully_connected_s8_fold(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                               const tinyaot_dims *input_dims, const int8_t *input,
                                               const tinyaot_dims *filter_dims, const int8_t *filter,
                                               const tinyaot_dims *bias_dims, const int32_t *bias,
                                               const tinyaot_dims *output_dims, int8_t *output);

/* The fold convolution over int4 or clustered weights decoded once per call (tinyaot_convolve_s8_fold_decoded.c):
   arguments as tinyaot_convolve_s8_fold with the filter as its codes in the fold layout. Scratch (required, 4-byte
   aligned): 4 * K bytes when in_ch is a multiple of 4 (the output must then not overlap the input), else the whole
   filter rounded up to a word plus the fold kernel's column. */
int32_t tinyaot_convolve_s8_fold_decoded_get_buffer_size(const tinyaot_dims *input_dims,
                                                         const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_fold_decoded(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                                const tinyaot_per_channel_quant_params *quant_params,
                                                const tinyaot_dims *input_dims, const int8_t *input,
                                                const tinyaot_dims *filter_dims, const tinyaot_decoded_weights *filter,
                                                const tinyaot_dims *bias_dims, const int32_t *bias,
                                                const tinyaot_dims *output_dims, int8_t *output);

/* Conv and fully connected over block-sparse weights (tinyaot_block_weights; tinyaot_block_support.h): same
   arguments as the dense kernels (conv: one group only; fully connected: filter_offset 0), but bias holds the input
   offset folded in, quant_params the fold requantization table when filter->fold_table is set (else one multiplier
   and shift per channel), and the scratch is required: 8 * ceil4(K) bytes, 4-byte aligned (K = kh * kw * in_ch, or
   the fully connected depth; none for a fully connected layer of one row whose depth is a multiple of 4). Output
   pixels in pairs, raster order, as the dense kernels. */
int32_t tinyaot_convolve_s8_block_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                         const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                         const int8_t *input, const tinyaot_dims *filter_dims,
                                         const tinyaot_block_weights *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                                         const tinyaot_dims *output_dims, int8_t *output);
/* The same over 2x1 block-sparse weights (tinyaot_block2x1_weights): scratch 4 * K bytes, 4-byte aligned. */
int32_t tinyaot_convolve_s8_block2x1_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_block2x1(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                            const tinyaot_per_channel_quant_params *quant_params,
                                            const tinyaot_dims *input_dims, const int8_t *input,
                                            const tinyaot_dims *filter_dims, const tinyaot_block2x1_weights *filter,
                                            const tinyaot_dims *bias_dims, const int32_t *bias,
                                            const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_fully_connected_s8_block_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_fully_connected_s8_block(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                const tinyaot_dims *input_dims, const int8_t *input,
                                                const tinyaot_dims *filter_dims, const tinyaot_block_weights *filter,
                                                const tinyaot_dims *bias_dims, const int32_t *bias,
                                                const tinyaot_dims *output_dims, int8_t *output);

/* int4 fully connected on DSP cores (tinyaot_fully_connected_s4_fold.c: nibbles unpacked by masks; the _rq form
   takes one multiplier and shift per channel) and the 3x3 depthwise kernel over decoded int4/clustered weights. */
tinyaot_status tinyaot_depthwise_conv_s8_3x3_decoded(const int8_t *input, const tinyaot_decoded_weights *weights, int8_t *scratch,
                                                     int32_t scratch_size, const int32_t *qtab, int8_t *output, int32_t batches,
                                                     int32_t in_h, int32_t in_w, int32_t channels, int32_t out_h, int32_t out_w,
                                                     int32_t stride_h, int32_t stride_w, int32_t pad_t, int32_t pad_l,
                                                     int32_t input_offset, int32_t output_offset, int32_t act_min,
                                                     int32_t act_max, int32_t folded);
tinyaot_status tinyaot_fully_connected_s4_fold(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                               const tinyaot_dims *input_dims, const int8_t *input,
                                               const tinyaot_dims *filter_dims, const uint32_t *filter,
                                               const tinyaot_dims *bias_dims, const int32_t *bias,
                                               const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s4_fold_rq(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                  const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                  const tinyaot_dims *input_dims, const int8_t *input,
                                                  const tinyaot_dims *filter_dims, const uint32_t *filter,
                                                  const tinyaot_dims *bias_dims, const int32_t *bias,
                                                  const tinyaot_dims *output_dims, int8_t *output);
/* 5-bit grid fully connected on DSP cores (tinyaot_fully_connected_s5_fold.c: three lane pairs per word unpacked by
   masks; the _rq form takes one multiplier and shift per channel). */
tinyaot_status tinyaot_fully_connected_s5_fold(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                               const tinyaot_dims *input_dims, const int8_t *input,
                                               const tinyaot_dims *filter_dims, const uint32_t *filter,
                                               const tinyaot_dims *bias_dims, const int32_t *bias,
                                               const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s5_fold_rq(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                  const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                  const tinyaot_dims *input_dims, const int8_t *input,
                                                  const tinyaot_dims *filter_dims, const uint32_t *filter,
                                                  const tinyaot_dims *bias_dims, const int32_t *bias,
                                                  const tinyaot_dims *output_dims, int8_t *output);

/* Conv, depthwise conv and fully connected over compressed weights (structs in tinyaot_nn_types.h, formats in
   tinyaot/compress/storage.py): _s4 packed nibbles, _s8_clustered codebook indices, _s8_sparse bitmap sparsity,
   _s8_rle run-length sparsity, and for fully connected layers _s5 (5-bit grid values, six per word). Same arguments and results as the dense kernels above, bit for bit, with the filter
   replaced by its compressed form, decoded on the fly from flash (tinyaot_nn_compressed.h says how). Conv scratch:
   8 * ceil_even(kh * kw * in_ch/groups) bytes (a four-pixel im2col column), optional. Order for the planner: conv
   produces output pixels four at a time, depthwise sixteen at a time, in raster order and aligned at multiples of
   4 (16) from each batch's first pixel; a finished group's windows are never read again (conv with groups > 1 runs
   group by group). */
int32_t tinyaot_convolve_s4_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s4(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                   const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                   const int8_t *input, const tinyaot_dims *filter_dims, const uint8_t *filter,
                                   const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                   int8_t *output);
int32_t tinyaot_convolve_s8_clustered_get_buffer_size(const tinyaot_dims *input_dims,
                                                      const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_clustered(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params,
                                             const tinyaot_dims *input_dims, const int8_t *input,
                                             const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                             const tinyaot_dims *bias_dims, const int32_t *bias,
                                             const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_convolve_s8_sparse_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_sparse(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                          const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                          const int8_t *input, const tinyaot_dims *filter_dims,
                                          const tinyaot_sparse_weights *filter, const tinyaot_dims *bias_dims,
                                          const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_convolve_s8_rle_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_convolve_s8_rle(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                       const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                       const int8_t *input, const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                       const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                       int8_t *output);
tinyaot_status tinyaot_depthwise_conv_s4(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                         const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                         const int8_t *input, const tinyaot_dims *filter_dims, const uint8_t *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                         int8_t *output);
tinyaot_status tinyaot_depthwise_conv_s8_clustered(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                                   const tinyaot_per_channel_quant_params *quant_params,
                                                   const tinyaot_dims *input_dims, const int8_t *input,
                                                   const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                                   const tinyaot_dims *bias_dims, const int32_t *bias,
                                                   const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_depthwise_conv_s8_sparse(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                                const tinyaot_per_channel_quant_params *quant_params,
                                                const tinyaot_dims *input_dims, const int8_t *input,
                                                const tinyaot_dims *filter_dims, const tinyaot_sparse_weights *filter,
                                                const tinyaot_dims *bias_dims, const int32_t *bias,
                                                const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_depthwise_conv_s8_rle(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params,
                                             const tinyaot_dims *input_dims, const int8_t *input,
                                             const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                             const tinyaot_dims *bias_dims, const int32_t *bias,
                                             const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s4(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                          const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                          const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                          const uint8_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                                          const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s5(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                          const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                          const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                          const uint32_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                                          const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s8_clustered(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                    const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                    const tinyaot_dims *input_dims, const int8_t *input,
                                                    const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                                    const tinyaot_dims *bias_dims, const int32_t *bias,
                                                    const tinyaot_dims *output_dims, int8_t *output);
/* The same for 5-bit indices (rows in pairs on DSP cores; any width is accepted). */
tinyaot_status tinyaot_fully_connected_s8_clustered5(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                     const tinyaot_per_channel_quant_params *quant_params,
                                                     int32_t per_channel, const tinyaot_dims *input_dims,
                                                     const int8_t *input, const tinyaot_dims *filter_dims,
                                                     const tinyaot_clustered_weights *filter,
                                                     const tinyaot_dims *bias_dims, const int32_t *bias,
                                                     const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s8_sparse(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                                 const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                                 const tinyaot_dims *input_dims, const int8_t *input,
                                                 const tinyaot_dims *filter_dims, const tinyaot_sparse_weights *filter,
                                                 const tinyaot_dims *bias_dims, const int32_t *bias,
                                                 const tinyaot_dims *output_dims, int8_t *output);
tinyaot_status tinyaot_fully_connected_s8_rle(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                              const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                              const tinyaot_dims *input_dims, const int8_t *input,
                                              const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                              const tinyaot_dims *bias_dims, const int32_t *bias,
                                              const tinyaot_dims *output_dims, int8_t *output);

/* Pooling: filter_dims h, w = window; input and output share scale and zero point. Average pooling divides by the
   number of non-padding inputs in the window and rounds half away from zero. */
int32_t tinyaot_avgpool_s8_get_buffer_size(int32_t output_w, int32_t ch);
tinyaot_status tinyaot_avgpool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                  const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                  const tinyaot_dims *output_dims, int8_t *output);
/* Average pooling without padding that requantizes to its own output parameters (TFLite's integer MEAN): the sum
   of (x + input_offset) over the full window, rescaled by mult/shift = s_in / (s_out * kh * kw). No scratch.
   pool_params->padding must be zero. */
tinyaot_status tinyaot_avgpool_requant_s8(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                                          const int8_t *input, const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims,
                                          int32_t input_offset, int32_t output_offset, int32_t mult, int32_t shift,
                                          int8_t *output);
/* Average pooling with ONNX count_include_pad=1: padded cells count in the divisor (cells past the end padding,
   reached by a ceil_mode window, do not). pad_end = {bottom, right}; input_offset = -(input zero point); the output
   keeps the input's parameters. No scratch. */
tinyaot_status tinyaot_avgpool_count_pad_s8(const tinyaot_pool_params *pool_params, const tinyaot_tile *pad_end,
                                            int32_t input_offset, const tinyaot_dims *input_dims, const int8_t *input,
                                            const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_max_pool_s8_get_buffer_size(int32_t output_w, int32_t ch);
tinyaot_status tinyaot_max_pool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                   const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                   const tinyaot_dims *output_dims, int8_t *output);

/* Transpose conv (TFLite TRANSPOSE_CONV, ONNX ConvTranspose with group 1): filter_dims = {out_ch, kh, kw, in_ch},
   weights OHWI. Output (oy, ox) sums input (iy, ix) times tap (ky, kx) wherever iy * stride.h + ky - padding.h == oy
   and ix * stride.w + kx - padding.w == ox; dilation must be {1, 1}. bias may be NULL. No scratch. */
int32_t tinyaot_transpose_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
tinyaot_status tinyaot_transpose_conv_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                         const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                         const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                         int8_t *output);

/* Nearest-neighbour resize: output pixel (y, x) of each batch is input pixel (y_map[y], x_map[x]), all channels.
   The maps are computed at compile time; the output keeps the input's parameters. output may not overlap input. */
tinyaot_status tinyaot_resize_nearest_s8(const int8_t *input, const tinyaot_dims *input_dims, const int32_t *y_map,
                                         const int32_t *x_map, const tinyaot_dims *output_dims, int8_t *output);

/* Elementwise add of two same-shaped int8 tensors (TFLite scheme: both inputs shifted left by left_shift <= 23,
   rescaled to a common scale, summed, rescaled to the output). output may equal input_1 or input_2. */
tinyaot_status tinyaot_elementwise_add_s8(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                                          int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                                          int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                                          int32_t out_offset, int32_t out_mult, int32_t out_shift, int32_t out_activation_min,
                                          int32_t out_activation_max, int32_t block_size);
/* The same arguments and integers on Helium (MVE) cores, four elements per vector (tinyaot_elementwise_add_s8_mve.c);
   input offsets must lie in [-128, 128]. */
tinyaot_status tinyaot_elementwise_add_s8_mve(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                                              int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                                              int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                                              int32_t out_offset, int32_t out_mult, int32_t out_shift, int32_t out_activation_min,
                                              int32_t out_activation_max, int32_t block_size);

/* Softmax over each of num_rows rows of row_size (<= 4095) int8 values; output scale 1/256, zero point -128.
   mult/shift/diff_min as TFLite prepares them (tinyaot.ops.fixedpoint.softmax_params). output may equal input. */
tinyaot_status tinyaot_softmax_s8(const int8_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                                  int32_t diff_min, int8_t *output);

/* Clamp each int8 element to [act_min, act_max] (standalone ReLU/Clip). output may equal input. */
tinyaot_status tinyaot_clamp_s8(const int8_t *input, int8_t *output, int32_t size, int32_t act_min, int32_t act_max);

/* Transpose of a rank-4 int8 tensor: output axis i is input axis perm[i]. output may not overlap input. */
tinyaot_status tinyaot_transpose_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t perm[4]);

/* ADD, SUB or MUL of two int8 tensors with numpy broadcasting (TFLite int8 arithmetic, see tinyaot_binary_params).
   shape holds the output dims and each input's strides, 0 along broadcast axes. output may equal an input whose
   strides are the output's own (same shape, read element by element before it is written). */
tinyaot_status tinyaot_elementwise_binary_s8(const tinyaot_binary_params *params, const tinyaot_broadcast_shape *shape,
                                             const int8_t *input_1, const int8_t *input_2, int8_t *output);

/* Table lookup: output[i] = table[input[i] + 128] (sigmoid, tanh, hard-swish, leaky ReLU... tabulated at compile
   time on the input's quantization grid). output may equal input. */
tinyaot_status tinyaot_lut_s8(const int8_t *input, int8_t *output, int32_t size, const int8_t *table);

/* PRelu over [outer][count][inner] elements, slope k in [0, count) for the middle axis: v = (x - zp_in) << left_shift
   (<= 23, precision headroom) is rescaled by pos_mult/pos_shift (s_in / s_out / 2^left_shift) when >= 0, else by
   neg_mult[k]/neg_shift[k] (s_in * slope[k] / s_out / 2^left_shift, the multiplier negated for a negative slope).
   input_offset = -zp_in. output may equal input. */
tinyaot_status tinyaot_prelu_s8(const int8_t *input, int8_t *output, int32_t outer, int32_t count, int32_t inner,
                                int32_t input_offset, int32_t output_offset, int32_t left_shift, int32_t pos_mult,
                                int32_t pos_shift, const int32_t *neg_mult, const int32_t *neg_shift, int32_t act_min,
                                int32_t act_max);

/* One input of a concatenation: input [outer][in_inner] goes to output [outer][out_inner] at column out_pos. With
   requantize == 0 a plain copy (equal parameters); otherwise each value becomes
   output_offset + ((x + input_offset) << left_shift) * mult * 2^(shift - 31), saturated to int8 (left_shift <= 23
   is precision headroom; mult/shift encode s_in / s_out / 2^left_shift). */
tinyaot_status tinyaot_concat_s8(const int8_t *input, int32_t outer, int32_t in_inner, int32_t out_inner, int32_t out_pos,
                                 int32_t requantize, int32_t input_offset, int32_t left_shift, int32_t mult, int32_t shift,
                                 int32_t output_offset, int8_t *output);

/* Constant padding of a rank-4 tensor (lower ranks padded with leading unit axes): pre[i] and post[i] elements of
   pad_value before and after axis i. output may not overlap input. */
tinyaot_status tinyaot_pad_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t pre[4],
                              const int32_t post[4], int8_t pad_value);

/* Depthwise 3x3, channel multiplier 1, no dilation (tinyaot_depthwise_conv_s8_3x3.c: the layouts of weights and
   qtab the compiler prepares, tinyaot/ops/depthwise3x3.py). folded: 1 when qtab holds the biases with the input
   offset folded in. */
tinyaot_status tinyaot_depthwise_conv_s8_3x3(const int8_t *input, const int8_t *weights, const int32_t *qtab,
                                             int8_t *output, int32_t batches, int32_t in_h, int32_t in_w,
                                             int32_t channels, int32_t out_h, int32_t out_w, int32_t stride_h,
                                             int32_t stride_w, int32_t pad_t, int32_t pad_l, int32_t input_offset,
                                             int32_t output_offset, int32_t act_min, int32_t act_max,
                                             int32_t folded);

/* Max pooling and average pooling onto the output's own parameters on Helium (MVE) cores: the arguments and
   results of tinyaot_max_pool_s8 and tinyaot_avgpool_requant_s8; plain C on other cores. */
int32_t tinyaot_max_pool_s8_mve_get_buffer_size(int32_t output_w, int32_t ch);
tinyaot_status tinyaot_max_pool_s8_mve(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                       const tinyaot_dims *input_dims, const int8_t *input,
                                       const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims,
                                       int8_t *output);
tinyaot_status tinyaot_avgpool_requant_s8_mve(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                                              const int8_t *input, const tinyaot_dims *filter_dims,
                                              const tinyaot_dims *output_dims, int32_t input_offset,
                                              int32_t output_offset, int32_t mult, int32_t shift, int8_t *output);

/* Elementwise add with the parameters TFLite's preparation gives (tinyaot_elementwise_add_s8_fast.c says which,
   tinyaot/ops/add.py add_fast_params prepares them): the integers of tinyaot_elementwise_add_s8, fewer steps. */
tinyaot_status tinyaot_elementwise_add_s8_fast(const int8_t *input_1, const int8_t *input_2, int8_t *output,
                                               int32_t size, int32_t o1_20, int32_t o2_21, int32_t m2, int32_t e2,
                                               int32_t half2, int32_t out_mult, int32_t eo, int32_t radd,
                                               int32_t act_min, int32_t act_max, int32_t in2_half);

/* |x| requantized to the output (left_shift <= 23 is precision headroom). output may equal input. */
tinyaot_status tinyaot_abs_s8(const int8_t *input, int8_t *output, int32_t size, int32_t input_offset,
                              int32_t output_offset, int32_t left_shift, int32_t mult, int32_t shift, int32_t act_min,
                              int32_t act_max);

/* output[i] = input[src[i]] (Slice, Split, Gather with constant indices, Expand); every index is checked against
   input_size before any byte is written. output may not overlap input. */
tinyaot_status tinyaot_index_copy_s8(const int8_t *input, int8_t *output, const int32_t *src, int32_t size,
                                     int32_t input_size);

/* Softmax along an axis that is not the innermost one: [outer, axis_len, inner], each row's elements `inner`
   apart; the arithmetic of tinyaot_softmax_s8. output may equal input. */
tinyaot_status tinyaot_softmax_strided_s8(const int8_t *input, int32_t outer, int32_t axis_len, int32_t inner,
                                          int32_t mult, int32_t shift, int32_t diff_min, int8_t *output);

/* Matrix product of two int8 activations addressed by strides (broadcast batch axes: stride 0), per-tensor
   requantization; the output [d0, d1, M, N] must not overlap either operand. */
tinyaot_status tinyaot_batch_matmul_s8(const int8_t *lhs, const int8_t *rhs, int8_t *out, int32_t d0, int32_t d1,
                                       int32_t m_size, int32_t n_size, int32_t k_size, int32_t l_b0, int32_t l_b1,
                                       int32_t l_m, int32_t l_k, int32_t r_b0, int32_t r_b1, int32_t r_k, int32_t r_n,
                                       int32_t lhs_offset, int32_t rhs_offset, int32_t out_offset, int32_t mult,
                                       int32_t shift, int32_t act_min, int32_t act_max);

/* ONNX LSTM and GRU, integer only (tinyaot_lstm_s8.c, tinyaot_gru_s8.c: formats and overflow bounds; the numpy
   references are tinyaot/ops/lstm.py and gru.py). scratch: the layer's planned scratch buffer. */
tinyaot_status tinyaot_lstm_s8(const int8_t *x, int8_t *y, int8_t *scratch, int32_t steps, int32_t batch,
                               int32_t in_size, int32_t hidden, int32_t dirs, int32_t reverse, int32_t last_only,
                               int32_t x_offset, const int8_t *w, const int8_t *rw, const int32_t *bias,
                               const int32_t *mult_x, const int32_t *shift_x, const int32_t *mult_h,
                               const int32_t *shift_h, const int8_t *h0, const int16_t *c0);
tinyaot_status tinyaot_gru_s8(const int8_t *x, int8_t *y, int8_t *scratch, int32_t steps, int32_t batch,
                              int32_t in_size, int32_t hidden, int32_t dirs, int32_t reverse, int32_t last_only,
                              int32_t lbr, int32_t x_offset, const int8_t *w, const int8_t *rw, const int32_t *bias,
                              const int32_t *mult_x, const int32_t *shift_x, const int32_t *mult_h,
                              const int32_t *shift_h, const int8_t *h0);

/* ---------------------------------------------------------------------------------------------------------------
 * 16x8 kernels: int16 activations (zero point 0), int8 per-channel weights, int64 biases, TFLite's 16x8 scheme
 * (the tinyaot/ops/ files named after them are their numpy twins; each file's header gives its geom/p layout and overflow bound).
 * ------------------------------------------------------------------------------------------------------------- */
tinyaot_status tinyaot_convolve_s16(const int16_t *input, const int8_t *filter, const int64_t *bias,
                                    const int32_t *mult, const int32_t *shift, const int32_t *geom, int16_t *output);
tinyaot_status tinyaot_depthwise_conv_s16(const int16_t *input, const int8_t *filter, const int64_t *bias,
                                          const int32_t *mult, const int32_t *shift, const int32_t *geom,
                                          int16_t *output);
tinyaot_status tinyaot_fully_connected_s16(const int16_t *input, const int8_t *filter, const int64_t *bias,
                                           const int32_t *mult, const int32_t *shift, const int32_t *geom,
                                           int16_t *output);
tinyaot_status tinyaot_avgpool_s16(const int16_t *input, const int32_t *geom, int16_t *output);
tinyaot_status tinyaot_max_pool_s16(const int16_t *input, const int32_t *geom, int16_t *output);
tinyaot_status tinyaot_elementwise_add_s16(const int16_t *in1, const int16_t *in2, const int32_t *p, int32_t size,
                                           int16_t *output);
tinyaot_status tinyaot_elementwise_mul_s16(const int16_t *in1, const int16_t *in2, const int32_t *g,
                                           int16_t *output);
tinyaot_status tinyaot_concat_s16(const int16_t *input, int32_t outer, int32_t in_inner, int32_t out_inner,
                                  int32_t out_pos, int32_t requantize, int32_t mult, int32_t shift, int16_t *output);
tinyaot_status tinyaot_hard_sigmoid_s16(const int16_t *input, int32_t size, const int64_t *p, int16_t *output);
tinyaot_status tinyaot_hard_swish_s16(const int16_t *input, int32_t size, const int64_t *p, int16_t *output);
tinyaot_status tinyaot_lut_interp_s16(const int16_t *input, int32_t size, const int32_t *table, const int64_t *p,
                                      int16_t *output);
/* Width conversions between int8 and int16 layers (mixed precision). */
tinyaot_status tinyaot_requantize_s8_s16(const int8_t *input, int32_t size, int32_t input_offset, int32_t mult,
                                         int32_t shift, int32_t output_offset, int16_t *output);
tinyaot_status tinyaot_requantize_s16_s8(const int16_t *input, int32_t size, int32_t input_offset, int32_t mult,
                                         int32_t shift, int32_t output_offset, int8_t *output);
/* Softmax of int16 logits to int8 probabilities (scale 1/256, zero point -128). */
tinyaot_status tinyaot_softmax_s16_s8(const int16_t *input, int32_t num_rows, int32_t row_size, int32_t mult,
                                      int32_t shift, int32_t diff_min, int8_t *output);

/* Verification builds (TINYAOT_TRACE) call this between layers; the verification harness defines it. */
void tinyaot_mark(void);

#ifdef __cplusplus
}
#endif

#endif /* TINYAOT_NN_H */
