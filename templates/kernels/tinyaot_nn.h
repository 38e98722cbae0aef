/*
 * tinyaot int8 kernels: the kernel API (CMSIS-NN-style, integer only, no allocation).
 *
 * Every kernel returns 0 on success and -1 when its dimensions are inconsistent (nothing is checked beyond what the
 * kernel needs to index safely). Scratch: a kernel with a ctx argument tells through its _get_buffer_size how many
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

#ifdef __cplusplus
extern "C" {
#endif

/* Conv: filter_dims = {out_ch, kh, kw, in_ch / groups}, groups = input_dims->c / filter_dims->c, weights OHWI.
   bias (one int32 per output channel) may be NULL. Scratch: 4 * ceil_even(kh * kw * in_ch/groups) bytes (im2col). */
int32_t tinyaot_convolve_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_convolve_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                        const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                        int8_t *output);

/* Depthwise conv: filter_dims = {1, kh, kw, in_ch * ch_mult}; output channel c * ch_mult + m reads input channel c.
   bias may be NULL. */
int32_t tinyaot_depthwise_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_depthwise_conv_s8(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
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
int tinyaot_depthwise_conv_s8_mve(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                  const tinyaot_per_channel_quant_params *quant_params,
                                  const tinyaot_dims *input_dims, const int8_t *input,
                                  const tinyaot_dims *filter_dims, const int8_t *filter,
                                  const tinyaot_dims *bias_dims, const int32_t *table,
                                  const tinyaot_dims *output_dims, int8_t *output);

/* Fully connected: input_dims n = batches and h*w*c = depth; filter_dims n = depth, c = out_ch; filter is
   [out_ch][depth]. per_channel == 0 uses multiplier[0] / shift[0] for every output. bias may be NULL. */
int32_t tinyaot_fully_connected_s8_get_buffer_size(const tinyaot_dims *filter_dims);
int tinyaot_fully_connected_s8(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
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
int tinyaot_convolve_s8_fold(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                             const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                             const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                             const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                             int8_t *output);
int32_t tinyaot_fully_connected_s8_fold_get_buffer_size(const tinyaot_dims *filter_dims);
int tinyaot_fully_connected_s8_fold(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                    const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                    const tinyaot_dims *input_dims, const int8_t *input,
                                    const tinyaot_dims *filter_dims, const int8_t *filter,
                                    const tinyaot_dims *bias_dims, const int32_t *bias,
                                    const tinyaot_dims *output_dims, int8_t *output);

/* Conv, depthwise conv and fully connected over compressed weights (structs in tinyaot_nn_types.h, formats in
   tinyaot/compress/storage.py): _s4 packed nibbles, _s8_clustered codebook indices, _s8_sparse bitmap sparsity,
   _s8_rle run-length sparsity. Same arguments and results as the dense kernels above, bit for bit, with the filter
   replaced by its compressed form, decoded on the fly from flash (tinyaot_nn_compressed.h says how). Conv scratch:
   8 * ceil_even(kh * kw * in_ch/groups) bytes (a four-pixel im2col column), optional. Order for the planner: conv
   produces output pixels four at a time, depthwise sixteen at a time, in raster order and aligned at multiples of
   4 (16) from each batch's first pixel; a finished group's windows are never read again (conv with groups > 1 runs
   group by group). */
int32_t tinyaot_convolve_s4_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_convolve_s4(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                        const int8_t *input, const tinyaot_dims *filter_dims, const uint8_t *filter,
                        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                        int8_t *output);
int32_t tinyaot_convolve_s8_clustered_get_buffer_size(const tinyaot_dims *input_dims,
                                                      const tinyaot_dims *filter_dims);
int tinyaot_convolve_s8_clustered(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                  const tinyaot_per_channel_quant_params *quant_params,
                                  const tinyaot_dims *input_dims, const int8_t *input,
                                  const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                  const tinyaot_dims *bias_dims, const int32_t *bias,
                                  const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_convolve_s8_sparse_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_convolve_s8_sparse(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                               const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                               const int8_t *input, const tinyaot_dims *filter_dims,
                               const tinyaot_sparse_weights *filter, const tinyaot_dims *bias_dims,
                               const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_convolve_s8_rle_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_convolve_s8_rle(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                            const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                            const int8_t *input, const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                            const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                            int8_t *output);
int tinyaot_depthwise_conv_s4(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                              const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                              const int8_t *input, const tinyaot_dims *filter_dims, const uint8_t *filter,
                              const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                              int8_t *output);
int tinyaot_depthwise_conv_s8_clustered(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                        const tinyaot_per_channel_quant_params *quant_params,
                                        const tinyaot_dims *input_dims, const int8_t *input,
                                        const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                        const tinyaot_dims *bias_dims, const int32_t *bias,
                                        const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_depthwise_conv_s8_sparse(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                     const tinyaot_per_channel_quant_params *quant_params,
                                     const tinyaot_dims *input_dims, const int8_t *input,
                                     const tinyaot_dims *filter_dims, const tinyaot_sparse_weights *filter,
                                     const tinyaot_dims *bias_dims, const int32_t *bias,
                                     const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_depthwise_conv_s8_rle(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                  const tinyaot_per_channel_quant_params *quant_params,
                                  const tinyaot_dims *input_dims, const int8_t *input,
                                  const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                  const tinyaot_dims *bias_dims, const int32_t *bias,
                                  const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_fully_connected_s4(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                               const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                               const uint8_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                               const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_fully_connected_s8_clustered(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                         const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                         const tinyaot_dims *input_dims, const int8_t *input,
                                         const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias,
                                         const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_fully_connected_s8_sparse(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                      const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                      const tinyaot_dims *input_dims, const int8_t *input,
                                      const tinyaot_dims *filter_dims, const tinyaot_sparse_weights *filter,
                                      const tinyaot_dims *bias_dims, const int32_t *bias,
                                      const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_fully_connected_s8_rle(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                   const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                   const tinyaot_dims *input_dims, const int8_t *input,
                                   const tinyaot_dims *filter_dims, const tinyaot_rle_weights *filter,
                                   const tinyaot_dims *bias_dims, const int32_t *bias,
                                   const tinyaot_dims *output_dims, int8_t *output);

/* Pooling: filter_dims h, w = window; input and output share scale and zero point. Average pooling divides by the
   number of non-padding inputs in the window and rounds half away from zero. */
int32_t tinyaot_avgpool_s8_get_buffer_size(int32_t output_w, int32_t ch);
int tinyaot_avgpool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                       const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                       const tinyaot_dims *output_dims, int8_t *output);
/* Average pooling without padding that requantizes to its own output parameters (TFLite's integer MEAN): the sum
   of (x + input_offset) over the full window, rescaled by mult/shift = s_in / (s_out * kh * kw). No scratch.
   pool_params->padding must be zero. */
int tinyaot_avgpool_requant_s8(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                               const int8_t *input, const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims,
                               int32_t input_offset, int32_t output_offset, int32_t mult, int32_t shift,
                               int8_t *output);
/* Average pooling with ONNX count_include_pad=1: padded cells count in the divisor (cells past the end padding,
   reached by a ceil_mode window, do not). pad_end = {bottom, right}; input_offset = -(input zero point); the output
   keeps the input's parameters. No scratch. */
int tinyaot_avgpool_count_pad_s8(const tinyaot_pool_params *pool_params, const tinyaot_tile *pad_end,
                                 int32_t input_offset, const tinyaot_dims *input_dims, const int8_t *input,
                                 const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_max_pool_s8_get_buffer_size(int32_t output_w, int32_t ch);
int tinyaot_max_pool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                        const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                        const tinyaot_dims *output_dims, int8_t *output);

/* Transpose conv (TFLite TRANSPOSE_CONV, ONNX ConvTranspose with group 1): filter_dims = {out_ch, kh, kw, in_ch},
   weights OHWI. Output (oy, ox) sums input (iy, ix) times tap (ky, kx) wherever iy * stride.h + ky - padding.h == oy
   and ix * stride.w + kx - padding.w == ox; dilation must be {1, 1}. bias may be NULL. No scratch. */
int32_t tinyaot_transpose_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims);
int tinyaot_transpose_conv_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                              const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                              const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                              const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                              int8_t *output);

/* Nearest-neighbour resize: output pixel (y, x) of each batch is input pixel (y_map[y], x_map[x]), all channels.
   The maps are computed at compile time; the output keeps the input's parameters. output may not overlap input. */
void tinyaot_resize_nearest_s8(const int8_t *input, const tinyaot_dims *input_dims, const int32_t *y_map,
                               const int32_t *x_map, const tinyaot_dims *output_dims, int8_t *output);

/* Elementwise add of two same-shaped int8 tensors (TFLite scheme: both inputs shifted left by left_shift <= 23,
   rescaled to a common scale, summed, rescaled to the output). output may equal input_1 or input_2. */
int tinyaot_elementwise_add_s8(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                               int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                               int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                               int32_t out_offset, int32_t out_mult, int32_t out_shift, int32_t out_activation_min,
                               int32_t out_activation_max, int32_t block_size);
/* The same arguments and integers on Helium (MVE) cores, four elements per vector (tinyaot_elementwise_add_s8_mve.c);
   input offsets must lie in [-128, 128]. */
int tinyaot_elementwise_add_s8_mve(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                                   int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                                   int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                                   int32_t out_offset, int32_t out_mult, int32_t out_shift, int32_t out_activation_min,
                                   int32_t out_activation_max, int32_t block_size);

/* Softmax over each of num_rows rows of row_size (<= 4095) int8 values; output scale 1/256, zero point -128.
   mult/shift/diff_min as TFLite prepares them (tinyaot.ops.fixedpoint.softmax_params). output may equal input. */
void tinyaot_softmax_s8(const int8_t *input, int32_t num_rows, int32_t row_size, int32_t mult, int32_t shift,
                        int32_t diff_min, int8_t *output);

/* Clamp each int8 element to [act_min, act_max] (standalone ReLU/Clip). output may equal input. */
void tinyaot_clamp_s8(const int8_t *input, int8_t *output, int32_t size, int32_t act_min, int32_t act_max);

/* Transpose of a rank-4 int8 tensor: output axis i is input axis perm[i]. output may not overlap input. */
void tinyaot_transpose_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t perm[4]);

/* ADD, SUB or MUL of two int8 tensors with numpy broadcasting (TFLite int8 arithmetic, see tinyaot_binary_params).
   shape holds the output dims and each input's strides, 0 along broadcast axes. output may equal an input whose
   strides are the output's own (same shape, read element by element before it is written). */
int tinyaot_elementwise_binary_s8(const tinyaot_binary_params *params, const tinyaot_broadcast_shape *shape,
                                  const int8_t *input_1, const int8_t *input_2, int8_t *output);

/* Table lookup: output[i] = table[input[i] + 128] (sigmoid, tanh, hard-swish, leaky ReLU... tabulated at compile
   time on the input's quantization grid). output may equal input. */
void tinyaot_lut_s8(const int8_t *input, int8_t *output, int32_t size, const int8_t *table);

/* PRelu over [outer][count][inner] elements, slope k in [0, count) for the middle axis: v = (x - zp_in) << left_shift
   (<= 23, precision headroom) is rescaled by pos_mult/pos_shift (s_in / s_out / 2^left_shift) when >= 0, else by
   neg_mult[k]/neg_shift[k] (s_in * slope[k] / s_out / 2^left_shift, the multiplier negated for a negative slope).
   input_offset = -zp_in. output may equal input. */
int tinyaot_prelu_s8(const int8_t *input, int8_t *output, int32_t outer, int32_t count, int32_t inner,
                     int32_t input_offset, int32_t output_offset, int32_t left_shift, int32_t pos_mult,
                     int32_t pos_shift, const int32_t *neg_mult, const int32_t *neg_shift, int32_t act_min,
                     int32_t act_max);

/* One input of a concatenation: input [outer][in_inner] goes to output [outer][out_inner] at column out_pos. With
   requantize == 0 a plain copy (equal parameters); otherwise each value becomes
   output_offset + ((x + input_offset) << left_shift) * mult * 2^(shift - 31), saturated to int8 (left_shift <= 23
   is precision headroom; mult/shift encode s_in / s_out / 2^left_shift). */
int tinyaot_concat_s8(const int8_t *input, int32_t outer, int32_t in_inner, int32_t out_inner, int32_t out_pos,
                      int32_t requantize, int32_t input_offset, int32_t left_shift, int32_t mult, int32_t shift,
                      int32_t output_offset, int8_t *output);

/* Constant padding of a rank-4 tensor (lower ranks padded with leading unit axes): pre[i] and post[i] elements of
   pad_value before and after axis i. output may not overlap input. */
int tinyaot_pad_s8(const int8_t *input, int8_t *output, const int32_t in_dims[4], const int32_t pre[4],
                   const int32_t post[4], int8_t pad_value);

#ifdef __cplusplus
}
#endif

#endif /* TINYAOT_NN_H */
