/*
 * tinyaot_depthwise_conv_s8_mve: int8 NHWC depthwise convolution (channel multiplier 1) for Helium (MVE) cores,
 * with the input offset folded into the bias at compile time.
 *
 * The caller passes `folded_bias[c] = bias[c] + input_offset * sum_{ky, kx} w[ky, kx, c]` (tinyaot/ops/conv.py
 * computes it in int64 and the layer's accumulator bound, below, guarantees it fits int32). Then
 *   bias[c] + sum_{valid taps} (x + input_offset) * w
 *     = folded_bias[c] + sum_{valid taps} x * w + sum_{padded taps} (-input_offset) * w,
 * i.e. every tap of the window is visited, a padded tap standing for the input zero point z = -input_offset, and
 * the inner loop multiplies raw int8 activations by raw int8 weights: one widening load of each (VLDRB.S32) and one
 * VMLA per four channels, no offset add. A window that lies wholly inside the input (most of them) runs a loop
 * without any tap test.
 *
 * Channels lie in the vector lanes: sixteen channels per pass in four int32x4 accumulators (the loads of the four
 * groups use immediate offsets +0, +4, +8, +12 from one pointer), then four at a time, the last group tail
 * predicated (VCTP), so any channel count works. Requantization is vectorised (tinyaot_mve_support.h, TFLite's
 * double rounding, bit-identical to tinyaot_requantize).
 *
 * Overflow: each accumulator starts at folded_bias and adds products x * w with |x| <= 128 (z too) and |w| <= 128,
 * so every partial sum is bounded by |bias| + sum|w| * |input_offset| + sum|w| * 128, within the bound
 * |bias| + sum|w| * (128 + |input_offset|) that tinyaot/compress/bounds.py checks against int32 for every layer.
 *
 * On a core without MVE the same folded arithmetic runs in plain C (so the file compiles, and computes the same,
 * everywhere); tinyaot only selects this kernel for MVE targets. No scratch.
 */
#include "tinyaot_nn.h"
#include "tinyaot_mve_support.h"

/* The layer's geometry and output parameters, and one output pixel's window. */
typedef struct {
    const int8_t *in;  /* input batch base */
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t dil_h, dil_w;
    int32_t zp;        /* input zero point, what a padded tap holds */
    const int8_t *filter;
    const int32_t *bias, *mult, *shift;
    int32_t out_off, act_min, act_max;
    int32_t y0, x0;    /* input coordinates of the current window's tap (0, 0); may lie in the padding */
    int32_t ky0, ky1, kx0, kx1; /* its taps inside the input: [ky0, ky1) x [kx0, kx1) */
} dwm_layer;

#if TINYAOT_USE_MVE

/* Requantize four channels c..c+3 and store the lanes selected by p. */
#define DWM_STORE(L, acc, out, c, p)                                                                                \
    vstrbq_p_s32((out) + (c),                                                                                      \
                 tinyaot_mve_requantize_s8x4((acc), (L)->mult + (c), (L)->shift + (c), (p), (L)->out_off,          \
                                             (L)->act_min, (L)->act_max),                                          \
                 (p))

/* Eight channels of one tap: both operands widened to int16 lanes (VLDRB.S16), the products of the even lanes
   (channels 0, 2, 4, 6 of the eight) and of the odd lanes (1, 3, 5, 7) formed in int32 by VMULLB / VMULLT and
   added to two accumulators: six instructions for eight multiply-accumulates. */
#define DWM_TAP8(xv, wp, ae, ao)                                                                                   \
    do {                                                                                                           \
        const int16x8_t wv_ = vldrbq_s16(wp);                                                                      \
        ae = vaddq_s32(ae, vmullbq_int_s16((xv), wv_));                                                             \
        ao = vaddq_s32(ao, vmulltq_int_s16((xv), wv_));                                                             \
    } while (0)

/* Eight channels of a padded tap: the zero point times the weights. |zp * w| <= 128 * 128 fits the int16 lanes of
   VMUL by a scalar, whose even and odd lanes are then widened (VMOVLB / VMOVLT) into the two accumulators. The
   zero point stays in a general register, leaving the Q registers to the accumulators. */
#define DWM_ZP8X(wp, ae, ao, zp)                                                                                   \
    do {                                                                                                           \
        const int16x8_t p_ = vmulq_n_s16(vldrbq_s16(wp), (zp));                                                    \
        ae = vaddq_s32(ae, vmovlbq_s16(p_));                                                                       \
        ao = vaddq_s32(ao, vmovltq_s16(p_));                                                                       \
    } while (0)

/* Requantize the four channels base + {0, 2, 4, 6} (an accumulator of even or odd lanes) and store them: the
   multipliers and shifts are gathered and the bytes scattered with the same offsets (`idx` = {0, 2, 4, 6}). */
static inline __attribute__((always_inline)) void dwm_store_strided(const dwm_layer *L, int32x4_t acc,
                                                                     int32_t base, uint32x4_t idx, int8_t *out)
{
    const int32x4_t m = vldrwq_gather_shifted_offset_s32(L->mult + base, idx);
    const int32x4_t s = vldrwq_gather_shifted_offset_s32(L->shift + base, idx);
    const int32x4_t r = tinyaot_mve_offset_clamp(tinyaot_mve_requantize(acc, m, s), L->out_off, L->act_min,
                                                 L->act_max);
    vstrbq_scatter_offset_s32(out + base, idx, r);
}

/* Walks one output pixel's window for the channels from c: TAP_X(x, w) for a tap inside the input (x, w: its
   input and weight bytes), TAP_ZP(w) for a tap in the padding. The valid taps [ky0, ky1) x [kx0, kx1) come from
   the caller, so there is no per-tap test: a window wholly inside the input runs only TAP_X. */
#define DWM_WINDOW(L, c, TAP_X, TAP_ZP)                                                                            \
    do {                                                                                                           \
        const int32_t ch_ = (L)->in_c;                                                                             \
        const int32_t col_step_ = (L)->dil_w * ch_;                                                                \
        const int8_t *w_ = (L)->filter + (c);                                                                      \
        int32_t ky_, kx_;                                                                                          \
        for (ky_ = 0; ky_ < (L)->k_h; ky_++) {                                                                     \
            if (ky_ < (L)->ky0 || ky_ >= (L)->ky1) {                                                               \
                for (kx_ = 0; kx_ < (L)->k_w; kx_++, w_ += ch_) {                                                  \
                    TAP_ZP(w_);                                                                                    \
                }                                                                                                  \
                continue;                                                                                          \
            }                                                                                                      \
            for (kx_ = 0; kx_ < (L)->kx0; kx_++, w_ += ch_) {                                                      \
                TAP_ZP(w_);                                                                                        \
            }                                                                                                      \
            const int8_t *x_ = (L)->in +                                                                           \
                               (((L)->y0 + ky_ * (L)->dil_h) * (L)->in_w + (L)->x0 + kx_ * (L)->dil_w) * ch_ + (c); \
            for (; kx_ < (L)->kx1; kx_++, x_ += col_step_, w_ += ch_) {                                            \
                TAP_X(x_, w_);                                                                                     \
            }                                                                                                      \
            for (; kx_ < (L)->k_w; kx_++, w_ += ch_) {                                                             \
                TAP_ZP(w_);                                                                                        \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

/* Sixteen channels c..c+15 of one output pixel, in four accumulators: channels c + {0,2,4,6}, c + {1,3,5,7},
   c + {8,10,12,14}, c + {9,11,13,15}. A padded tap multiplies the weights by the zero point. Out of line so that
   its Q registers are its own. */
static TINYAOT_NOINLINE void dwm_block16(const dwm_layer *L, int32_t c, int8_t *out)
{
    const uint32x4_t idx = vidupq_n_u32(0, 2); /* {0, 2, 4, 6} */
    const int16_t zp = (int16_t)L->zp;
    int32x4_t a0 = vldrwq_gather_shifted_offset_s32(L->bias + c, idx);
    int32x4_t a1 = vldrwq_gather_shifted_offset_s32(L->bias + c + 1, idx);
    int32x4_t a2 = vldrwq_gather_shifted_offset_s32(L->bias + c + 8, idx);
    int32x4_t a3 = vldrwq_gather_shifted_offset_s32(L->bias + c + 9, idx);
#define DWM_X16(x, w)                                                                                              \
    do {                                                                                                           \
        const int16x8_t x0_ = vldrbq_s16(x);                                                                       \
        DWM_TAP8(x0_, w, a0, a1);                                                                                  \
        const int16x8_t x1_ = vldrbq_s16((x) + 8);                                                                 \
        DWM_TAP8(x1_, (w) + 8, a2, a3);                                                                            \
    } while (0)
#define DWM_ZP16(w)                                                                                                \
    do {                                                                                                           \
        DWM_ZP8X(w, a0, a1, zp);                                                                                   \
        DWM_ZP8X((w) + 8, a2, a3, zp);                                                                                 \
    } while (0)
    DWM_WINDOW(L, c, DWM_X16, DWM_ZP16);
#undef DWM_X16
#undef DWM_ZP16
    dwm_store_strided(L, a0, c, idx, out);
    dwm_store_strided(L, a1, c + 1, idx, out);
    dwm_store_strided(L, a2, c + 8, idx, out);
    dwm_store_strided(L, a3, c + 9, idx, out);
}

/* Eight channels c..c+7: channels c + {0,2,4,6} and c + {1,3,5,7}. */
static TINYAOT_NOINLINE void dwm_block8(const dwm_layer *L, int32_t c, int8_t *out)
{
    const uint32x4_t idx = vidupq_n_u32(0, 2);
    const int16_t zp = (int16_t)L->zp;
    int32x4_t a0 = vldrwq_gather_shifted_offset_s32(L->bias + c, idx);
    int32x4_t a1 = vldrwq_gather_shifted_offset_s32(L->bias + c + 1, idx);
#define DWM_X8(x, w)                                                                                               \
    do {                                                                                                           \
        const int16x8_t x0_ = vldrbq_s16(x);                                                                       \
        DWM_TAP8(x0_, w, a0, a1);                                                                                  \
    } while (0)
#define DWM_ZP8(w) DWM_ZP8X(w, a0, a1, zp)
    DWM_WINDOW(L, c, DWM_X8, DWM_ZP8);
#undef DWM_X8
#undef DWM_ZP8
    dwm_store_strided(L, a0, c, idx, out);
    dwm_store_strided(L, a1, c + 1, idx, out);
}

/* Up to four channels c..c+n-1 (n in 1..4) of one output pixel, int32 lanes in channel order: lanes past n are
   predicated off (loaded as zero, never stored), so no byte outside the tensors is read or written. */
static TINYAOT_NOINLINE void dwm_block4(const dwm_layer *L, int32_t c, int8_t *out)
{
    const mve_pred16_t p = vctp32q((uint32_t)(L->in_c - c));
    int32x4_t a = vldrwq_z_s32(L->bias + c, p);
#define DWM_X4(x, w) a = vaddq_s32(a, vmulq_s32(vldrbq_z_s32(x, p), vldrbq_z_s32(w, p)))
#define DWM_ZP4(w) a = vmlaq_n_s32(a, vldrbq_z_s32(w, p), L->zp)
    DWM_WINDOW(L, c, DWM_X4, DWM_ZP4);
#undef DWM_X4
#undef DWM_ZP4
    DWM_STORE(L, a, out, c, p);
}

static void dwm_pixel(const dwm_layer *L, int8_t *out)
{
    int32_t c = 0;
    for (; c + 16 <= L->in_c; c += 16) {
        dwm_block16(L, c, out);
    }
    if (c + 8 <= L->in_c) {
        dwm_block8(L, c, out);
        c += 8;
    }
    for (; c < L->in_c; c += 4) {
        dwm_block4(L, c, out);
    }
}

#else /* plain C: the same folded arithmetic, one channel at a time */

static void dwm_pixel_plain(const dwm_layer *L, int8_t *out)
{
    int32_t c;
    for (c = 0; c < L->in_c; c++) {
        int32_t a = L->bias[c];
        int32_t ky, kx;
        for (ky = 0; ky < L->k_h; ky++) {
            const int32_t iy = L->y0 + ky * L->dil_h;
            for (kx = 0; kx < L->k_w; kx++) {
                const int32_t ix = L->x0 + kx * L->dil_w;
                const int32_t wv = L->filter[(ky * L->k_w + kx) * L->in_c + c];
                const int32_t xv = (iy >= 0 && iy < L->in_h && ix >= 0 && ix < L->in_w)
                                       ? (int32_t)L->in[(iy * L->in_w + ix) * L->in_c + c]
                                       : L->zp;
                a += xv * wv;
            }
        }
        out[c] = tinyaot_requantize_s8(a, L->mult[c], L->shift[c], L->out_off, L->act_min, L->act_max);
    }
}

#endif

int32_t tinyaot_depthwise_conv_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

int tinyaot_depthwise_conv_s8_mve(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                  const tinyaot_per_channel_quant_params *quant_params,
                                  const tinyaot_dims *input_dims, const int8_t *input,
                                  const tinyaot_dims *filter_dims, const int8_t *filter,
                                  const tinyaot_dims *bias_dims, const int32_t *folded_bias,
                                  const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = dw_conv_params->stride.h;
    const int32_t stride_w = dw_conv_params->stride.w;
    const int32_t out_off = dw_conv_params->output_offset;
    const int32_t act_min = dw_conv_params->activation.min;
    const int32_t act_max = dw_conv_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    (void)ctx;
    (void)bias_dims;

    if (dw_conv_params->ch_mult != 1 || filter_dims->c != in_c || output_dims->c != in_c || folded_bias == NULL ||
        stride_h <= 0 || stride_w <= 0 || dw_conv_params->dilation.h <= 0 || dw_conv_params->dilation.w <= 0) {
        return -1;
    }
    dwm_layer L;
    L.in_h = in_h;
    L.in_w = in_w;
    L.in_c = in_c;
    L.k_h = filter_dims->h;
    L.k_w = filter_dims->w;
    L.dil_h = dw_conv_params->dilation.h;
    L.dil_w = dw_conv_params->dilation.w;
    L.zp = -dw_conv_params->input_offset;
    L.filter = filter;
    L.bias = folded_bias;
    L.mult = mult;
    L.shift = shift;
    L.out_off = out_off;
    L.act_min = act_min;
    L.act_max = act_max;
    int32_t b;
    for (b = 0; b < batches; b++) {
        L.in = input + b * in_h * in_w * in_c;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            L.y0 = oy * stride_h - dw_conv_params->padding.h;
            tinyaot_valid_taps(L.y0, L.k_h, L.dil_h, in_h, &L.ky0, &L.ky1);
            int8_t *out_px = output + (b * out_h + oy) * out_w * in_c;
            int32_t ox;
            for (ox = 0; ox < out_w; ox++, out_px += in_c) {
                L.x0 = ox * stride_w - dw_conv_params->padding.w;
                tinyaot_valid_taps(L.x0, L.k_w, L.dil_w, in_w, &L.kx0, &L.kx1);
#if TINYAOT_USE_MVE
                dwm_pixel(&L, out_px);
#else
                dwm_pixel_plain(&L, out_px);
#endif
            }
        }
    }
    return 0;
}
