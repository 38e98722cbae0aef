/*
 * tinyaot_convolve_s8_block2x1_mve: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) over
 * 2x1 block-sparse weights in the Helium layout (tinyaot_mve_block2x1.h: per channel pair its kept positions,
 * gathered 16 at a time), the input offset folded into the bias, biases, multipliers and shifts one per channel
 * zero-padded to a multiple of four (tinyaot_nn_mve.h). Same result as tinyaot_convolve_s8 on the decoded weights,
 * bit for bit; portable C on cores without MVE. Rows of at most 256 positions (one offset byte per position).
 *
 * Pixels, columns and scratch as tinyaot_convolve_s8_block_mve: output pixels in pairs in raster order (a lone last
 * one alone); a 1x1 convolution without padding whose input channels are a multiple of 4 reads each pixel's channels
 * in place, otherwise each window is copied into an int8 im2col column (two in the scratch, 2 * K4 bytes, K4 = K
 * rounded up to a multiple of 4, 4-byte aligned). A pair's windows are read before its outputs are written, so the
 * output may overlap the input as for the dense kernels.
 */
#include "tinyaot_mve_block_conv.h"
#include "tinyaot_mve_block2x1.h"

int32_t tinyaot_convolve_s8_block2x1_mve_get_buffer_size(const tinyaot_dims *input_dims,
                                                         const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    return tinyaot_mve_block_conv_buffer_size(filter_dims);
}

tinyaot_status tinyaot_convolve_s8_block2x1_mve(TINYAOT_CONV_ARGS(tinyaot_block_weights))
{
    return tinyaot_mve_block_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias_dims,
                                  bias, output_dims, output, tinyaot_mve_block2x1_two, tinyaot_mve_block2x1_one);
}
