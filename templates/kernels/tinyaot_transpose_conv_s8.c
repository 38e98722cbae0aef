/*
 * tinyaot_transpose_conv_s8: int8 NHWC transpose convolution (TFLite TRANSPOSE_CONV arithmetic, ONNX ConvTranspose
 * with group 1 and dilation 1), per-channel requantization.
 *
 * out[b, oy, ox, oc] = requant(bias[oc] + sum (in[b, iy, ix, ic] + input_offset) * filter[oc, ky, kx, ic])
 * over all iy * stride_h + ky - pad_top == oy and ix * stride_w + kx - pad_left == ox.
 *
 * TFLite scatters every input pixel into an int32 buffer as large as the output. Here each output pixel gathers its
 * contributions instead: the taps that reach row oy are ky = oy + pad_top - iy * stride_h for the input rows iy
 * that keep ky inside [0, kh), and likewise for columns. That needs no scratch, writes every output once, and each
 * contribution is a contiguous dot product over in_ch (input NHWC, filter OHWI), which the DSP path of
 * tinyaot_dot2_s8 runs two output channels at a time. Integer sums do not depend on order, so the result equals
 * the scatter form bit for bit. Output rows past the reach of every tap (ONNX output_padding) get the bias alone.
 * The int32 accumulator holds kh*kw*in_ch products of at most 255 * 127, as in conv.
 */
#include "tinyaot_nn.h"

int32_t tinyaot_transpose_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

/* The input rows (or columns) i in [*lo, *hi) whose tap t = target - i * stride lies in [0, k). */
static void contributing_range(int32_t target, int32_t stride, int32_t k, int32_t size, int32_t *lo, int32_t *hi)
{
    const int32_t first = target - k + 1; /* the smallest i * stride allowed */
    int32_t l = first <= 0 ? 0 : (first + stride - 1) / stride;
    int32_t h = target < 0 ? 0 : target / stride + 1;
    if (h > size) {
        h = size;
    }
    if (l > h) {
        l = h;
    }
    *lo = l;
    *hi = h;
}

tinyaot_status tinyaot_transpose_conv_s8(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                         const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                         const int8_t *input, const tinyaot_dims *filter_dims, const int8_t *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims,
                                         int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t out_c = filter_dims->n;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = conv_params->stride.h;
    const int32_t stride_w = conv_params->stride.w;
    const int32_t pad_t = conv_params->padding.h;
    const int32_t pad_l = conv_params->padding.w;
    const int32_t in_off = conv_params->input_offset;
    const int32_t out_off = conv_params->output_offset;
    const int32_t act_min = conv_params->activation.min;
    const int32_t act_max = conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    const int32_t filter_oc_skip = k_h * k_w * in_c;
    (void)ctx;
    (void)bias_dims;

    if (filter_dims->c != in_c || output_dims->c != out_c || output_dims->n != batches || stride_h <= 0 ||
        stride_w <= 0 || conv_params->dilation.h != 1 || conv_params->dilation.w != 1 || pad_t < 0 || pad_l < 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * in_h * in_w * in_c;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t ty = oy + pad_t;
            int32_t iy0, iy1;
            contributing_range(ty, stride_h, k_h, in_h, &iy0, &iy1);
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t tx = ox + pad_l;
                int32_t ix0, ix1;
                contributing_range(tx, stride_w, k_w, in_w, &ix0, &ix1);
                int8_t *out = output + ((b * out_h + oy) * out_w + ox) * out_c;
                int32_t oc = 0;
                for (; oc < out_c; oc += 2) {
                    /* an odd last channel runs as a pair with itself; only the first result is stored */
                    const int32_t oc1 = oc + 1 < out_c ? oc + 1 : oc;
                    int32_t acc0 = bias ? bias[oc] : 0;
                    int32_t acc1 = bias ? bias[oc1] : 0;
                    int32_t iy;
                    for (iy = iy0; iy < iy1; iy++) {
                        const int32_t ky = ty - iy * stride_h;
                        int32_t ix;
                        for (ix = ix0; ix < ix1; ix++) {
                            const int32_t kx = tx - ix * stride_w;
                            const int8_t *x = in_b + (iy * in_w + ix) * in_c;
                            const int8_t *w0 = filter + oc * filter_oc_skip + (ky * k_w + kx) * in_c;
                            const int8_t *w1 = filter + oc1 * filter_oc_skip + (ky * k_w + kx) * in_c;
                            tinyaot_dot2_s8(x, w0, w1, in_c, in_off, &acc0, &acc1);
                        }
                    }
                    out[oc] = tinyaot_requantize_s8(acc0, mult[oc], shift[oc], out_off, act_min, act_max);
                    if (oc1 != oc) {
                        out[oc1] = tinyaot_requantize_s8(acc1, mult[oc1], shift[oc1], out_off, act_min, act_max);
                    }
                }
            }
        }
    }
    return TINYAOT_OK;
}
