/*
 * tinyaot_depthwise_conv_s8_mve_decoded: the Helium depthwise kernel (tinyaot_depthwise_conv_s8_mve.c) over int4 or
 * clustered weights: the codes, kept in that kernel's weight layout (the 1HWC array; tinyaot/ops/decoded.py), are
 * decoded once per call into the scratch (kh * kw * channels bytes), then the dense kernel runs on them. Same
 * arguments and result as tinyaot_depthwise_conv_s8_mve otherwise, including where the output may overlap the input
 * (the decode writes only the scratch).
 */
#include "tinyaot_nn.h"
#include "tinyaot_decode.h"

tinyaot_status tinyaot_depthwise_conv_s8_mve_decoded(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                                     const tinyaot_per_channel_quant_params *quant_params,
                                                     const tinyaot_dims *input_dims, const int8_t *input,
                                                     const tinyaot_dims *filter_dims, const tinyaot_decoded_weights *filter,
                                                     const tinyaot_dims *bias_dims, const int32_t *table,
                                                     const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t n = filter_dims->h * filter_dims->w * filter_dims->c;
    if (filter == NULL || ctx == NULL || ctx->buf == NULL || n <= 0 || filter->count != n || ctx->size < n) {
        return TINYAOT_ARG_ERROR;
    }
    tinyaot_decode(filter, 0, n, (int8_t *)ctx->buf);
    return tinyaot_depthwise_conv_s8_mve(NULL, dw_conv_params, quant_params, input_dims, input, filter_dims,
                                         (const int8_t *)ctx->buf, bias_dims, table, output_dims, output);
}
