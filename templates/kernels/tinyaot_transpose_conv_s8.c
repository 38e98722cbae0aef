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

tinyaot_status tinyaot_transpose_conv_s8(TINYAOT_CONV_ARGS(int8_t))
{
    tinyaot_window_geom g;
    tinyaot_conv_geom(&g, conv_params, input_dims, filter_dims, output_dims);
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    const int32_t filter_oc_skip = g.k_h * g.k_w * g.in_c;
    (void)ctx;
    (void)bias_dims;

    if (filter_dims->c != g.in_c || output_dims->n != g.batches || !tinyaot_window_steps_ok(&g, output_dims) ||
        g.dil_h != 1 || g.dil_w != 1 || g.pad_t < 0 || g.pad_l < 0) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = tinyaot_window_image(&g, input, b);
        for (oy = 0; oy < g.out_h; oy++) {
            const int32_t ty = oy + g.pad_t;
            int32_t iy0, iy1;
            contributing_range(ty, g.stride_h, g.k_h, g.in_h, &iy0, &iy1);
            for (ox = 0; ox < g.out_w; ox++) {
                const int32_t tx = ox + g.pad_l;
                int32_t ix0, ix1;
                contributing_range(tx, g.stride_w, g.k_w, g.in_w, &ix0, &ix1);
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                int32_t oc = 0;
                for (; oc < g.out_c; oc += 2) {
                    /* an odd last channel runs as a pair with itself; only the first result is stored */
                    const int32_t oc1 = oc + 1 < g.out_c ? oc + 1 : oc;
                    int32_t acc0 = bias ? bias[oc] : 0;
                    int32_t acc1 = bias ? bias[oc1] : 0;
                    int32_t iy;
                    for (iy = iy0; iy < iy1; iy++) {
                        const int32_t ky = ty - iy * g.stride_h;
                        int32_t ix;
                        for (ix = ix0; ix < ix1; ix++) {
                            const int32_t kx = tx - ix * g.stride_w;
                            const int8_t *x = in_b + (iy * g.in_w + ix) * g.in_c;
                            const int8_t *w0 = filter + oc * filter_oc_skip + (ky * g.k_w + kx) * g.in_c;
                            const int8_t *w1 = filter + oc1 * filter_oc_skip + (ky * g.k_w + kx) * g.in_c;
                            tinyaot_dot2_s8(x, w0, w1, g.in_c, g.in_off, &acc0, &acc1);
                        }
                    }
                    out[oc] = tinyaot_requantize_s8(acc0, mult[oc], shift[oc], g.out_off, g.act_min, g.act_max);
                    if (oc1 != oc) {
                        out[oc1] = tinyaot_requantize_s8(acc1, mult[oc1], shift[oc1], g.out_off, g.act_min, g.act_max);
                    }
                }
            }
        }
    }
    return TINYAOT_OK;
}
