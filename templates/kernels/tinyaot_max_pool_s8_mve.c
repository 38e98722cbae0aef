/*
 * tinyaot_max_pool_s8_mve: int8 NHWC max pooling for Helium (MVE) cores; the same arguments and results as
 * tinyaot_max_pool_s8 (each output the maximum of the non-padding inputs of its window, clamped to the activation
 * range; input and output share quantization).
 *
 * Sixteen channels per vector in int8 lanes: one load and one VMAX per tap, the window clipped to the input
 * beforehand (padding never competes), the clamp as two more VMAX/VMIN per output vector. The last 1..15 channels
 * of a pixel run one tail-predicated pass (VCTP: lanes past the end are neither read nor written). No arithmetic
 * can overflow (only comparisons). No scratch; on a core without MVE this file runs the scalar loop.
 */
#include "tinyaot_nn.h"
#include "tinyaot_mve_support.h"

int32_t tinyaot_max_pool_s8_mve_get_buffer_size(int32_t output_w, int32_t ch)
{
    (void)output_w;
    (void)ch;
    return 0;
}

tinyaot_status tinyaot_max_pool_s8_mve(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                                       const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                                       const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t ch = input_dims->c;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = pool_params->stride.h;
    const int32_t stride_w = pool_params->stride.w;
    const int32_t act_min = pool_params->activation.min;
    const int32_t act_max = pool_params->activation.max;
    const int32_t row_skip = in_w * ch;
    (void)ctx;

    if (output_dims->c != ch || stride_h <= 0 || stride_w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
#if TINYAOT_USE_MVE
    const int8x16_t lo = vdupq_n_s8((int8_t)tinyaot_clamp_i32(act_min, -128, 127));
    const int8x16_t hi = vdupq_n_s8((int8_t)tinyaot_clamp_i32(act_max, -128, 127));
#endif
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * in_h * in_w * ch;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pool_params->padding.h;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, k_h, 1, in_h, &ky0, &ky1);
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t base_x = ox * stride_w - pool_params->padding.w;
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, k_w, 1, in_w, &kx0, &kx1);
                if (ky1 <= ky0 || kx1 <= kx0) {
                    return TINYAOT_ARG_ERROR; /* window entirely in the padding: no maximum exists */
                }
                int8_t *out = output + ((b * out_h + oy) * out_w + ox) * ch;
                const int8_t *win = in_b + ((base_y + ky0) * in_w + base_x + kx0) * ch;
                const int32_t rows = ky1 - ky0;
                const int32_t cols = kx1 - kx0;
                int32_t c;
#if TINYAOT_USE_MVE
                for (c = 0; c < ch; c += 16) {
                    const mve_pred16_t p = vctp8q((uint32_t)(ch - c));
                    int8x16_t m = vdupq_n_s8(-128);
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = 0; ky < rows; ky++, r += row_skip) {
                        const int8_t *q = r;
                        int32_t kx;
                        for (kx = 0; kx < cols; kx++, q += ch) {
                            m = vmaxq_s8(m, vldrbq_z_s8(q, p)); /* masked-off lanes read as 0, never stored */
                        }
                    }
                    vstrbq_p_s8(out + c, vminq_s8(vmaxq_s8(m, lo), hi), p);
                }
#else
                for (c = 0; c < ch; c++) {
                    int32_t m = -128;
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = 0; ky < rows; ky++, r += row_skip) {
                        int32_t kx;
                        for (kx = 0; kx < cols; kx++) {
                            m = tinyaot_max_i32(m, r[kx * ch]);
                        }
                    }
                    out[c] = (int8_t)tinyaot_clamp_i32(m, act_min, act_max);
                }
#endif
            }
        }
    }
    return TINYAOT_OK;
}
