/*
 * tinyaot_avgpool_requant_s8_mve: int8 NHWC average pooling without padding onto its own output parameters
 * (TFLite's integer MEAN scheme) for Helium (MVE) cores; the same arguments and results as
 * tinyaot_avgpool_requant_s8 (tinyaot_avgpool_requant_s8.c explains the scheme):
 *   out = requant(sum_{window} (x + input_offset), mult, shift) + output_offset, clamped.
 *
 * Channels lie in the lanes. For windows of at most 256 taps the raw sums are exact in int16: each x is in
 * [-128, 127], so a sum of n <= 256 values lies in [-32768, 32512]; sixteen channels per pass then cost two loads
 * (VLDRB.S16) and two adds per tap. The sums are widened to int32 (VMOVLB / VMOVLT: even and odd lanes), the
 * window's offset (input_offset * taps, |.| <= 128 * taps) added, requantized per tensor on four lanes
 * (tinyaot_mve_support.h, TFLite's double rounding) and scattered back to their channels. Larger windows, and
 * the last channels (fewer than eight), sum in int32 lanes, four channels in order, the last group tail
 * predicated. No scratch; on a core without MVE this file runs the scalar loop.
 */
#include "tinyaot_nn.h"
#include "tinyaot_mve_support.h"

#if TINYAOT_USE_MVE
/* requant + output offset + clamp of four int32 window sums (offset not yet added) */
static TINYAOT_ALWAYS_INLINE int32x4_t avgm_out(int32x4_t s, int32_t window_offset, int32_t mult,
                                                                  int32_t shift, int32_t out_off, int32_t act_min,
                                                                  int32_t act_max)
{
    const int32x4_t r = tinyaot_mve_requantize_n(vaddq_n_s32(s, window_offset), mult, shift);
    return tinyaot_mve_offset_clamp(r, out_off, act_min, act_max);
}
#endif

tinyaot_status tinyaot_avgpool_requant_s8_mve(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                                              const int8_t *input, const tinyaot_dims *filter_dims,
                                              const tinyaot_dims *output_dims, int32_t input_offset, int32_t output_offset,
                                              int32_t mult, int32_t shift, int8_t *output)
{
    tinyaot_window_geom g;
    const tinyaot_status status = tinyaot_pool_geom_unpadded(&g, pool_params, input_dims, filter_dims, output_dims);
    const int32_t ch = g.in_c;
    /* every tap contributes input_offset once: added per window; |.| <= 128 * taps */
    const int32_t window_offset = input_offset * g.k_h * g.k_w;
    if (status != TINYAOT_OK) {
        return status;
    }
    const int32_t row_skip = g.in_w * ch;
    const int32_t narrow = g.k_h * g.k_w <= 256; /* int16 sums are exact */
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = tinyaot_window_image(&g, input, b);
        for (oy = 0; oy < g.out_h; oy++) {
            for (ox = 0; ox < g.out_w; ox++) {
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                const int8_t *win = in_b + (oy * g.stride_h * g.in_w + ox * g.stride_w) * ch;
                int32_t c = 0;
#if TINYAOT_USE_MVE
                const uint32x4_t idx = vidupq_n_u32(0, 2); /* {0, 2, 4, 6} */
                if (narrow) {
                    for (; c + 16 <= ch; c += 16) {
                        int16x8_t s0 = vdupq_n_s16(0), s1 = vdupq_n_s16(0);
                        const int8_t *r = win + c;
                        int32_t ky, kx;
                        for (ky = 0; ky < g.k_h; ky++, r += row_skip) {
                            const int8_t *q = r;
                            for (kx = 0; kx < g.k_w; kx++, q += ch) {
                                s0 = vaddq_s16(s0, vldrbq_s16(q));
                                s1 = vaddq_s16(s1, vldrbq_s16(q + 8));
                            }
                        }
                        vstrbq_scatter_offset_s32(out + c, idx, avgm_out(vmovlbq_s16(s0), window_offset, mult, shift,
                                                                         output_offset, g.act_min, g.act_max));
                        vstrbq_scatter_offset_s32(out + c + 1, idx, avgm_out(vmovltq_s16(s0), window_offset, mult,
                                                                             shift, output_offset, g.act_min, g.act_max));
                        vstrbq_scatter_offset_s32(out + c + 8, idx, avgm_out(vmovlbq_s16(s1), window_offset, mult,
                                                                             shift, output_offset, g.act_min, g.act_max));
                        vstrbq_scatter_offset_s32(out + c + 9, idx, avgm_out(vmovltq_s16(s1), window_offset, mult,
                                                                             shift, output_offset, g.act_min, g.act_max));
                    }
                    for (; c + 8 <= ch; c += 8) {
                        int16x8_t s0 = vdupq_n_s16(0);
                        const int8_t *r = win + c;
                        int32_t ky, kx;
                        for (ky = 0; ky < g.k_h; ky++, r += row_skip) {
                            const int8_t *q = r;
                            for (kx = 0; kx < g.k_w; kx++, q += ch) {
                                s0 = vaddq_s16(s0, vldrbq_s16(q));
                            }
                        }
                        vstrbq_scatter_offset_s32(out + c, idx, avgm_out(vmovlbq_s16(s0), window_offset, mult, shift,
                                                                         output_offset, g.act_min, g.act_max));
                        vstrbq_scatter_offset_s32(out + c + 1, idx, avgm_out(vmovltq_s16(s0), window_offset, mult,
                                                                             shift, output_offset, g.act_min, g.act_max));
                    }
                }
                for (; c < ch; c += 4) {
                    const mve_pred16_t p = vctp32q((uint32_t)(ch - c));
                    int32x4_t s = vdupq_n_s32(0);
                    const int8_t *r = win + c;
                    int32_t ky, kx;
                    for (ky = 0; ky < g.k_h; ky++, r += row_skip) {
                        const int8_t *q = r;
                        for (kx = 0; kx < g.k_w; kx++, q += ch) {
                            s = vaddq_s32(s, vldrbq_z_s32(q, p));
                        }
                    }
                    vstrbq_p_s32(out + c, avgm_out(s, window_offset, mult, shift, output_offset, g.act_min, g.act_max),
                                 p);
                }
#else
                (void)narrow;
                for (; c < ch; c++) {
                    const int32_t s = window_offset + tinyaot_window_sum_s8(win + c, g.k_h, g.k_w, row_skip, ch);
                    out[c] = tinyaot_requantize_s8(s, mult, shift, output_offset, g.act_min, g.act_max);
                }
#endif
            }
        }
    }
    return TINYAOT_OK;
}
