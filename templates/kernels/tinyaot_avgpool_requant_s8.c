/*
 * tinyaot_avgpool_requant_s8: int8 NHWC average pooling without padding that moves to its own output quantization
 * (TFLite's integer MEAN scheme).
 *
 * out[b, y, x, c] = requant(sum_{ky, kx} (in[b, y*sh + ky, x*sw + kx, c] + input_offset), mult, shift)
 *                   + output_offset, clamped to the activation range,
 * where (mult, shift) encode s_in / (s_out * kh * kw). Why not keep the input's parameters as tinyaot_avgpool_s8
 * does: an average over a large window (a global pool before the classifier) spans a much narrower range than its
 * input, and at the input's scale most of the int8 codes go unused (ResNet-8: 4.2 vs 30.5, so the pooled features
 * would get ~35 levels). Every window is full (no padding), so the divisor is the same for all outputs and folds
 * into the multiplier; the sums cannot overflow: |sum| <= 255 * kh * kw. Four channels per pass, no scratch.
 * On DSP cores windows of up to 256 taps sum eight channels per pass in 16-bit lanes (SXTAB16 adds two sign-extended
 * bytes to two lanes in one instruction): a lane holds at most 256 * 128 = 2^15 in magnitude (the offset, which
 * could push it past int16, is added once per window in int32), so no lane wraps and the sums are the same.
 */
#include "tinyaot_nn.h"

/* The output requantization, one multiplier and shift for the tensor. When the shift is 0 or a right shift e in
   1..30 and the window sums are small enough (|sum| <= 255 * taps =: B with B < 2^30 and
   B + 2^(e-1) + 128 * 2^e < 2^31, checked once per call) TFLite's two roundings take a short exact form:
   SaturatingRoundingDoublingHighMul(s, m) = floor((2s * m + 2^31) / 2^32) (2s fits int32), and
   RoundingDivideByPOT(h, e) + output_offset = floor((h + radd - [s < 0]) / 2^e) with radd = 2^(e-1) +
   output_offset * 2^e (the sign of s stands for the sign of h: they differ only when h = 0, where the -1 cannot
   cross a multiple of 2^e); for e = 0 simply h + output_offset (fast == 2). Otherwise (fast == 0) the general
   tinyaot_requantize_s8. */
typedef struct {
    int32_t mult, shift, out_off, act_min, act_max;
    int32_t fast, radd, e;
} pool_rq;

static void pool_rq_init(pool_rq *r, int32_t mult, int32_t shift, int32_t out_off, int32_t act_min, int32_t act_max,
                         int32_t taps)
{
    const int64_t bound = (int64_t)255 * taps;
    r->mult = mult;
    r->shift = shift;
    r->out_off = out_off;
    r->act_min = act_min;
    r->act_max = act_max;
    r->e = -shift;
    r->fast = 0;
    r->radd = 0;
    if (shift == 0 && bound < ((int64_t)1 << 30)) {
        r->fast = 2;
        r->radd = out_off;
    } else if (shift <= -1 && shift >= -30 && bound < ((int64_t)1 << 30) &&
               bound + ((int64_t)1 << (r->e - 1)) + ((int64_t)128 << r->e) < ((int64_t)1 << 31)) {
        r->fast = 1;
        r->radd = (int32_t)(((int64_t)1 << (r->e - 1)) + (int64_t)out_off * ((int64_t)1 << r->e));
    }
}

/* `fast` is r->fast, passed separately so that a caller may make it a constant */
static TINYAOT_ALWAYS_INLINE int8_t pool_requant_k(int32_t acc, const pool_rq *r, int32_t fast)
{
    if (fast == 0) {
        return tinyaot_requantize_s8(acc, r->mult, r->shift, r->out_off, r->act_min, r->act_max);
    }
    const int32_t acc2 = (int32_t)((uint32_t)acc << 1);
    const int32_t t = fast == 1 ? r->radd + (acc >> 31) : r->radd;
#if TINYAOT_USE_DSP && TINYAOT_GNU
    int32_t v;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(v) : "r"(acc2), "r"(r->mult), "r"(t));
#else
    /* one SMLAL: the value is (t + h) * 2^32 + low with t + h in int32, so no int64 step overflows */
    const int32_t v = (int32_t)(((int64_t)t * 4294967296LL + 2147483648LL + (int64_t)acc2 * r->mult) >> 32);
#endif
    return (int8_t)tinyaot_clamp_i32(fast == 1 ? v >> r->e : v, r->act_min, r->act_max);
}

static inline int8_t pool_requant(int32_t acc, const pool_rq *r)
{
    return pool_requant_k(acc, r, r->fast);
}

#if TINYAOT_USE_DSP
/* Lanes: the low and the high 16-bit halves of a word, sign-extended. */
static inline int32_t lane_lo(int32_t v) { return (int32_t)(int16_t)(uint16_t)((uint32_t)v & 0xFFFFu); }
static inline int32_t lane_hi(int32_t v) { return v >> 16; }

/* Eight channels' sums over a k_h x k_w window (k_h * k_w <= 256), channels c..c+7 of the window at r. */
static void sum8_dsp(const int8_t *r, int32_t k_h, int32_t k_w, int32_t row_skip, int32_t ch, int32_t s[8])
{
    int32_t a02 = 0, a13 = 0, b02 = 0, b13 = 0; /* lanes (c0, c2), (c1, c3), (c4, c6), (c5, c7) */
    int32_t ky;
    for (ky = 0; ky < k_h; ky++, r += row_skip) {
        const int8_t *p = r;
        int32_t kx;
        for (kx = 0; kx < k_w; kx++, p += ch) {
            const int32_t va = tinyaot_read_s8x4(p);
            const int32_t vb = tinyaot_read_s8x4(p + 4);
            a02 = __sxtab16(a02, va);
            a13 = tinyaot_sxtab16_ror8(a13, va);
            b02 = __sxtab16(b02, vb);
            b13 = tinyaot_sxtab16_ror8(b13, vb);
        }
    }
    s[0] = lane_lo(a02);
    s[1] = lane_lo(a13);
    s[2] = lane_hi(a02);
    s[3] = lane_hi(a13);
    s[4] = lane_lo(b02);
    s[5] = lane_lo(b13);
    s[6] = lane_hi(b02);
    s[7] = lane_hi(b13);
}
#endif

tinyaot_status tinyaot_avgpool_requant_s8(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                                          const int8_t *input, const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims,
                                          int32_t input_offset, int32_t output_offset, int32_t mult, int32_t shift,
                                          int8_t *output)
{
    tinyaot_window_geom g;
    const tinyaot_status status = tinyaot_pool_geom_unpadded(&g, pool_params, input_dims, filter_dims, output_dims);
    const int32_t ch = g.in_c;
    /* Every tap contributes input_offset once: add it per window instead of per tap. */
    const int32_t window_offset = input_offset * g.k_h * g.k_w;
    if (status != TINYAOT_OK) {
        return status;
    }
    pool_rq rq;
    pool_rq_init(&rq, mult, shift, output_offset, g.act_min, g.act_max, g.k_h * g.k_w);
    const int32_t row_skip = g.in_w * ch;
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = tinyaot_window_image(&g, input, b);
        for (oy = 0; oy < g.out_h; oy++) {
            for (ox = 0; ox < g.out_w; ox++) {
                int8_t *out = tinyaot_window_out(&g, output, b, oy, ox);
                const int8_t *win = in_b + (oy * g.stride_h * g.in_w + ox * g.stride_w) * ch;
                int32_t c = 0;
#if TINYAOT_USE_DSP
                if (g.k_h * g.k_w <= 256) {
                    for (; c + 8 <= ch; c += 8) {
                        int32_t sums[8];
                        int32_t j;
                        sum8_dsp(win + c, g.k_h, g.k_w, row_skip, ch, sums);
                        if (rq.fast == 1) {
                            for (j = 0; j < 8; j++) {
                                out[c + j] = pool_requant_k(window_offset + sums[j], &rq, 1);
                            }
                        } else if (rq.fast == 2) {
                            for (j = 0; j < 8; j++) {
                                out[c + j] = pool_requant_k(window_offset + sums[j], &rq, 2);
                            }
                        } else {
                            for (j = 0; j < 8; j++) {
                                out[c + j] = pool_requant_k(window_offset + sums[j], &rq, 0);
                            }
                        }
                    }
                }
#endif
                for (; c + 4 <= ch; c += 4) {
                    int32_t s0 = window_offset, s1 = window_offset, s2 = window_offset, s3 = window_offset;
                    const int8_t *r = win + c;
                    int32_t ky;
                    for (ky = 0; ky < g.k_h; ky++, r += row_skip) {
                        const int8_t *p = r;
                        int32_t kx;
                        for (kx = 0; kx < g.k_w; kx++, p += ch) {
                            s0 += p[0];
                            s1 += p[1];
                            s2 += p[2];
                            s3 += p[3];
                        }
                    }
                    out[c] = pool_requant(s0, &rq);
                    out[c + 1] = pool_requant(s1, &rq);
                    out[c + 2] = pool_requant(s2, &rq);
                    out[c + 3] = pool_requant(s3, &rq);
                }
                for (; c < ch; c++) {
                    const int32_t s = window_offset + tinyaot_window_sum_s8(win + c, g.k_h, g.k_w, row_skip, ch);
                    out[c] = pool_requant(s, &rq);
                }
            }
        }
    }
    return TINYAOT_OK;
}
