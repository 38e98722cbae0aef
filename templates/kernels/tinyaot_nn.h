/*
 * tinyaot int8 kernels: the kernel API (CMSIS-NN-style, integer only, no allocation).
 *
 * Every kernel returns 0 on success and -1 when its dimensions are inconsistent (nothing is checked beyond what the
 * kernel needs to index safely). Scratch: each kernel with a ctx argument tells through its _get_buffer_size how
 * many bytes of ctx->buf it wants; all of them currently return 0, and ctx (or ctx->buf) may then be NULL.
 * Inputs and outputs of conv, depthwise conv, fully connected and pooling must not overlap; add and softmax may
 * write their output over an input of the same size (exactly in place).
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
   bias (one int32 per output channel) may be NULL. */
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

/* Fully connected: input_dims n = batches and h*w*c = depth; filter_dims n = depth, c = out_ch; filter is
   [out_ch][depth]. per_channel == 0 uses multiplier[0] / shift[0] for every output. bias may be NULL. */
int32_t tinyaot_fully_connected_s8_get_buffer_size(const tinyaot_dims *filter_dims);
int tinyaot_fully_connected_s8(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                               const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                               const int8_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                               const tinyaot_dims *output_dims, int8_t *output);

/* Pooling: filter_dims h, w = window; input and output share scale and zero point. Average pooling divides by the
   number of non-padding inputs in the window and rounds half away from zero. */
int32_t tinyaot_avgpool_s8_get_buffer_size(int32_t output_w, int32_t ch);
int tinyaot_avgpool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                       const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                       const tinyaot_dims *output_dims, int8_t *output);
int32_t tinyaot_max_pool_s8_get_buffer_size(int32_t output_w, int32_t ch);
int tinyaot_max_pool_s8(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                        const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                        const tinyaot_dims *output_dims, int8_t *output);

/* Elementwise add of two same-shaped int8 tensors (TFLite scheme: both inputs shifted left by left_shift <= 23,
   rescaled to a common scale, summed, rescaled to the output). output may equal input_1 or input_2. */
int tinyaot_elementwise_add_s8(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
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

#ifdef __cplusplus
}
#endif

#endif /* TINYAOT_NN_H */
