/*
 * tinyaot_convolve_s8_block_mve: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) over
 * block-sparse weights in the Helium layout (tinyaot_mve_block.h), the input offset folded into the bias, biases,
 * multipliers and shifts one per channel zero-padded to a multiple of four (tinyaot_nn_mve.h). Same result as
 * tinyaot_convolve_s8 on the decoded weights, bit for bit; portable C on cores without MVE.
 *
 * Output pixels go in pairs in raster order (a lone last one alone). A 1x1 convolution without padding whose input
 * channels are a multiple of 4 reads each pixel's channels in place (no scratch); otherwise each pixel's window is
 * copied into an int8 im2col column (tinyaot_mve_im2col.h), two of them in the scratch (required then: 2 * K4 bytes,
 * K4 = kh * kw * in_ch rounded up to a multiple of 4, 4-byte aligned; the positions past K hold 0). Every
 * block-row's stored blocks then run against both columns (tinyaot_mve_block.h) and are requantized four lanes at
 * a time. A pair's windows are read before its outputs are written, so the output may overlap the input as for
 * the dense kernels.
 */
#include "tinyaot_mve_block_conv.h"

int32_t tinyaot_convolve_s8_block_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    return tinyaot_mve_block_conv_buffer_size(filter_dims);
}

tinyaot_status tinyaot_convolve_s8_block_mve(TINYAOT_CONV_ARGS(tinyaot_block_weights))
{
    return tinyaot_mve_block_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias_dims,
                                  bias, output_dims, output, NULL, 0, tinyaot_mve_block_two, tinyaot_mve_block_one);
}
