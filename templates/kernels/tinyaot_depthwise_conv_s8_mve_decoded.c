/*
 * tinyaot_depthwise_conv_s8_mve_decoded: the Helium depthwise kernel (tinyaot_depthwise_conv_s8_mve.c) over int4 or
 * clustered weights: the codes, kept in that kernel's weight layout (the 1HWC array; tinyaot/ops/decoded.py), are
 * decoded once per call into a local array when they fit TINYAOT_DECODE_STACK_TILE bytes, else into the scratch
 * (kh * kw * channels bytes), then the dense kernel runs on them. Same
 * arguments and result as tinyaot_depthwise_conv_s8_mve otherwise, including where the output may overlap the input
 * (the decode writes only the scratch).
 */
#include "tinyaot_nn.h"
#include "tinyaot_decode.h"

tinyaot_status tinyaot_depthwise_conv_s8_mve_decoded(TINYAOT_DW_CONV_ARGS(tinyaot_decoded_weights, table))
{
    const int32_t n = filter_dims->h * filter_dims->w * filter_dims->c;
    int32_t local[TINYAOT_DECODE_STACK_TILE / 4]; /* the stack tile (int32: word-aligned) */
    const int stacked = n > 0 && n <= TINYAOT_DECODE_STACK_TILE;
    if (filter == NULL || n <= 0 || filter->count != n ||
        (!stacked && (ctx == NULL || ctx->buf == NULL || ctx->size < n))) {
        return TINYAOT_ARG_ERROR;
    }
    {
        int8_t *w = stacked ? (int8_t *)local : (int8_t *)ctx->buf;
        tinyaot_decode(filter, 0, n, w);
        return tinyaot_depthwise_conv_s8_mve(NULL, dw_conv_params, quant_params, input_dims, input, filter_dims,
                                             w, bias_dims, table, output_dims, output);
    }
}
