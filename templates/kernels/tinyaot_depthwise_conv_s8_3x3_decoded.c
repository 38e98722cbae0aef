/*
 * tinyaot_depthwise_conv_s8_3x3_decoded: the 3x3 depthwise kernel (tinyaot_depthwise_conv_s8_3x3.c) over int4 or
 * clustered weights: the codes, kept in that kernel's weight layout (per group of four channels the nine taps as
 * four bytes each; tinyaot/ops/decoded.py), are decoded once per call into a local array when they fit
 * TINYAOT_DECODE_STACK_TILE bytes, else into `scratch` (9 * channels bytes, channels a multiple of 4), then the dense
 * kernel runs on them. Same arguments and result as tinyaot_depthwise_conv_s8_3x3
 * otherwise, including where the output may overlap the input (the decode writes only the scratch).
 */
#include "tinyaot_nn.h"
#include "tinyaot_decode.h"

tinyaot_status tinyaot_depthwise_conv_s8_3x3_decoded(const int8_t *input, const tinyaot_decoded_weights *weights, int8_t *scratch,
                                                     int32_t scratch_size, const int32_t *qtab, int8_t *output, int32_t batches,
                                                     int32_t in_h, int32_t in_w, int32_t channels, int32_t out_h, int32_t out_w,
                                                     int32_t stride_h, int32_t stride_w, int32_t pad_t, int32_t pad_l,
                                                     int32_t input_offset, int32_t output_offset, int32_t act_min,
                                                     int32_t act_max, int32_t folded)
{
    int32_t local[TINYAOT_DECODE_STACK_TILE / 4]; /* the stack tile (int32: word-aligned) */
    const int stacked = channels > 0 && 9 * channels <= TINYAOT_DECODE_STACK_TILE;
    int8_t *w = stacked ? (int8_t *)local : scratch;
    if (weights == NULL || channels <= 0 || channels % 4 != 0 || weights->count != 9 * channels ||
        (!stacked && (scratch == NULL || scratch_size < 9 * channels))) {
        return TINYAOT_ARG_ERROR;
    }
    tinyaot_decode(weights, 0, 9 * channels, w);
    return tinyaot_depthwise_conv_s8_3x3(input, w, qtab, output, batches, in_h, in_w, channels, out_h, out_w,
                                         stride_h, stride_w, pad_t, pad_l, input_offset, output_offset, act_min,
                                         act_max, folded);
}
