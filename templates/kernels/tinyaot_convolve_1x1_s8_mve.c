/*
 * tinyaot_convolve_1x1_s8_mve: 1x1 convolution without padding, any stride, one group, input offset folded into
 * the bias (tinyaot_nn_mve.h). Output pixel (y, x) is the matrix product of input pixel (y * sh, x * sw)'s channels
 * (contiguous in NHWC, read in place) with the filter rows. Helium: four output channels x two pixels per pass
 * (tinyaot_mve_gemm.h), a whole image (stride 1) or output row (strided) per call; portable C elsewhere. Pixels
 * are produced in raster order, two at a time, and a pixel's input is not read after its pair is written (the
 * order tinyaot_nn.h promises the memory planner).
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_gemm.h"

/* Input pixel of output pixel q (raster order over batch, row, column). */
static const int8_t *pixel_in(const int8_t *input, const tinyaot_dims *in, const tinyaot_conv_params *cp,
                              int32_t out_h, int32_t out_w, int32_t q)
{
    const int32_t x = q % out_w;
    const int32_t y = (q / out_w) % out_h;
    const int32_t b = q / (out_w * out_h);
    return input + ((b * in->h + y * cp->stride.h) * in->w + x * cp->stride.w) * in->c;
}

tinyaot_status tinyaot_convolve_1x1_s8_mve(TINYAOT_CONV_ARGS(int8_t))
{
    const int32_t in_c = input_dims->c;
    const int32_t out_c = output_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t pixels = output_dims->n * out_h * out_w;
    tinyaot_mve_requant q;
    int32_t p;
    (void)ctx;
    (void)bias_dims;
    if (TINYAOT_CONV_1X1_ARGS_BAD(conv_params, input_dims, filter_dims, output_dims, in_c, out_c, out_h, out_w) ||
        bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, conv_params);
    if (conv_params->stride.h == 1 && conv_params->stride.w == 1) {
        /* stride 1: the input pixels are the rows of one [pixels, in_c] matrix, in pairs, the last odd one alone */
        const int32_t pairs = pixels / 2;
        if (pairs > 0) {
            tinyaot_mve_gemm2_s8(input, in_c, pairs, in_c, filter, out_c, &q, output);
        }
        if (pixels % 2) {
            tinyaot_mve_gemm1_s8(input + (pixels - 1) * in_c, in_c, filter, out_c, &q, output + (pixels - 1) * out_c);
        }
        return TINYAOT_OK;
    }
    /* strided: output row by row, the row's pixels in pairs (input pixels stride.w * in_c apart), an odd last one
       alone */
    for (p = 0; p < pixels; p += out_w) {
        const int8_t *x0 = pixel_in(input, input_dims, conv_params, out_h, out_w, p);
        const int32_t pairs = out_w / 2;
        if (pairs > 0) {
            tinyaot_mve_gemm2_s8(x0, conv_params->stride.w * in_c, pairs, in_c, filter, out_c, &q, output + p * out_c);
        }
        if (out_w % 2) {
            tinyaot_mve_gemm1_s8(x0 + (out_w - 1) * conv_params->stride.w * in_c, in_c, filter, out_c, &q,
                                 output + (p + out_w - 1) * out_c);
        }
    }
    return TINYAOT_OK;
}
