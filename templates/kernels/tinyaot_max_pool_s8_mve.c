/*
 * tinyaot_max_pool_s8_mve: int8 NHWC max pooling for Helium (MVE) cores; the same arguments and results as
 * tinyaot_max_pool_s8 (each output the maximum of the non-padding inputs of its window, clamped to the activation
 * range; input and output share quantization).
 *
 * Sixteen channels per vector in int8 lanes: one load and one VMAX per tap, the window clipped to the input
 * beforehand (padding never competes), the clamp as two more VMAX/VMIN per output vector. The last 1..15 channels
 * of a pixel run one tail-predicated pass (VCTP: lanes past the end are neither read nor written). No arithmetic
 * can overflow (only comparisons). No scratch; on a core without MVE this file runs tinyaot_max_pool_s8's loop
 * (tinyaot_pool_s8, tinyaot_window.h).
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
    (void)ctx;
#if TINYAOT_USE_MVE
    tinyaot_window_geom g;
    if (tinyaot_pool_geom(&g, pool_params, input_dims, filter_dims, output_dims) != TINYAOT_OK) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t ch = g.in_c;
    const int32_t row_skip = g.in_w * ch;
    const int8x16_t lo = vdupq_n_s8((int8_t)tinyaot_clamp_i32(g.act_min, -128, 127));
    const int8x16_t hi = vdupq_n_s8((int8_t)tinyaot_clamp_i32(g.act_max, -128, 127));
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = tinyaot_window_image(&g, input, b);
        for (oy = 0; oy < g.out_h; oy++) {
            const tinyaot_span y = tinyaot_window_rows(&g, oy);
            for (ox = 0; ox < g.out_w; ox++) {
                const tinyaot_span x = tinyaot_window_cols(&g, ox);
                if (y.k1 <= y.k0 || x.k1 <= x.k0) {
                    return TINYAOT_ARG_ERROR; /* window entirely in the padding: no maximum exists */
                }
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                const int8_t *win = tinyaot_window_first_tap(&g, in_b, &y, &x);
                const int32_t rows = y.k1 - y.k0;
                const int32_t cols = x.k1 - x.k0;
                int32_t c;
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
            }
        }
    }
    return TINYAOT_OK;
#else
    return tinyaot_pool_s8(TINYAOT_POOL_MAX, pool_params, input_dims, input, filter_dims, output_dims, output);
#endif
}
