/*
 * tinyaot_fully_connected_s8_mve: out[b, o] = requant(bias[o] + sum_d in[b, d] * w[o, d]) with the input offset
 * folded into bias (tinyaot_nn_mve.h). Helium: four output channels per pass, two batch rows sharing each weight
 * load (tinyaot_mve_gemm.h); portable C elsewhere. Filter offset must be 0 (symmetric weights, as tinyaot
 * quantizes them; a pre-quantized layer with a filter zero point keeps the generic kernel) and the multipliers and
 * shifts per channel (per_channel 1; tinyaot repeats a per-tensor pair at compile time).
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_gemm.h"

tinyaot_status tinyaot_fully_connected_s8_mve(TINYAOT_FC_ARGS(int8_t))
{
    const int32_t batches = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    tinyaot_mve_requant q;
    int32_t b;
    (void)ctx;
    (void)bias_dims;
    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c ||
        fc_params->filter_offset != 0 || !per_channel || bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, fc_params);
    /* rows in pairs (each weight load serves two), the last odd row alone */
    b = batches / 2;
    if (b > 0) {
        tinyaot_mve_gemm2_s8(input, depth, b, depth, filter, out_c, &q, output);
    }
    b *= 2;
    if (b < batches) {
        tinyaot_mve_gemm1_s8(input + b * depth, depth, filter, out_c, &q, output + b * out_c);
    }
    return TINYAOT_OK;
}
