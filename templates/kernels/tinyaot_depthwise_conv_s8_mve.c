/*
 * tinyaot_depthwise_conv_s8_mve: int8 NHWC depthwise convolution (channel multiplier 1) for Helium (MVE) cores,
 * with the input offset folded into the bias and the per-channel constants laid out for the vector lanes at
 * compile time (tinyaot/ops/mve_depthwise.py builds the table).
 *
 * Folding: with folded_bias[c] = bias[c] + input_offset * sum_{ky, kx} w[ky, kx, c],
 *   bias[c] + sum_{valid taps} (x + input_offset) * w
 *     = folded_bias[c] + sum_{valid taps} x * w + sum_{padded taps} (-input_offset) * w,
 * so a window wholly inside the input (most of them) runs a loop without any tap test that multiplies raw int8
 * activations by raw int8 weights. A window reaching into the padding instead visits its valid taps only, on
 * x - z (z = -input_offset, the zero point) from the plain bias: the generic kernel's sum, with no padded tap.
 *
 * Lanes: both operands are widened to eight int16 lanes (VLDRB.S16, eight channels), and VMULLB / VMULLT form the
 * products of the even and the odd lanes in int32 (|x * w| <= 2^14, exact), added to two int32x4 accumulators:
 * six instructions per eight multiply-accumulates. A block of sixteen channels c..c+15 thus keeps four
 * accumulators holding channels c + {0,2,4,6}, c + {1,3,5,7}, c + {8,10,12,14}, c + {9,11,13,15}; after the
 * 16-channel blocks, an 8-channel block (c + {0,2,4,6}, c + {1,3,5,7}) if at least eight channels remain, then
 * groups of four channels in order, the last one tail predicated (VCTP: lanes past the end are neither read nor
 * written). Results are scattered back to their channels (VSTRB.32 with offsets {0, 2, 4, 6}).
 *
 * The table (`table`, in place of the bias): for each group of four lanes in that order, sixteen int32 values:
 * the four lanes' folded bias, bias, multiplier and shift, so the loops load them with immediate offsets from one
 * pointer. Requantization is TFLite's double rounding
 * (tinyaot_mve_support.h tinyaot_mve_requantize_split, bit-identical to tinyaot_requantize).
 *
 * Overflow: a full window's accumulator starts at folded_bias and adds products x * w with |x|, |w| <= 128, so
 * every partial sum is bounded by |bias| + sum|w| * |input_offset| + sum|w| * 128; a border window's sums
 * bias + sum (x + input_offset) * w. Both lie within |bias| + sum|w| * (128 + |input_offset|), the bound that
 * tinyaot/compress/bounds.py checks against int32 for every layer (folded_bias itself is checked at compile time,
 * ops/common.py fold_input_offset).
 *
 * Pixels: a row's run of windows wholly inside the input goes two pixels at a time (eight channels of both in four
 * accumulators, so each weight load and each group's requantization constants serve two pixels), their taps in one
 * flat loop stepping through a per-layer table of input steps (at most DWM_MAX_TAPS taps); other pixels go one at a
 * time, sixteen channels per pass. Where every channel shifts right and the clamp is all of int8, a shorter
 * requantization runs (dwm_requant_v), the same integers.
 *
 * Output pixels are computed in raster order, one or two at a time, each reading only its window, as the generic
 * kernel does, so the output may overlap the input at the same offsets (Conv.inplace_offset). No scratch; the step
 * table takes DWM_MAX_TAPS * 4 bytes of stack. On a core without MVE the same folded arithmetic runs in plain C from
 * the same table (the file compiles, and computes the same, everywhere); tinyaot selects this kernel only for MVE
 * targets. quant_params is not read.
 */
#include "tinyaot_nn.h"
#include "tinyaot_mve_support.h"

/* The layer's geometry and output parameters, and the current output pixel's window. */
typedef struct {
    const int8_t *in; /* input batch base */
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t dil_h, dil_w;
    int32_t zp; /* input zero point, what a padded tap holds */
    const int8_t *filter;
    const int32_t *table;
    int32_t out_off, act_min, act_max;
    int32_t y0, x0;             /* input coordinates of the window's tap (0, 0); may lie in the padding */
    int32_t ky0, ky1, kx0, kx1; /* its taps inside the input: [ky0, ky1) x [kx0, kx1) */
    int32_t taps;               /* k_h * k_w, at most DWM_MAX_TAPS */
    const int32_t *steps;       /* input bytes from tap t of a window inside the input to tap t + 1 */
} dwm_layer;

/* Windows inside the input walk their taps in one flat loop, the input pointer advanced by a per-layer table of
   steps (one row's columns, then the jump to the next row), so no per-row loop overhead; the table lives on the
   stack: DWM_MAX_TAPS * 4 bytes. */
#define DWM_MAX_TAPS 64

/* The table: per group of four lanes, DWM_G entries: the lanes' folded bias, bias, multiplier and shift, four
   each, at these offsets. */
#define DWM_G 16
#define DWM_FB 0
#define DWM_B 4
#define DWM_M 8
#define DWM_S 12

/* Where channel c's values sit in the table (the lane layout above): the index of its folded bias; its bias,
   multiplier and shift follow 4, 8 and 12 entries later. */
static int32_t dwm_slot(int32_t c, int32_t ch)
{
    const int32_t c16 = ch - ch % 16; /* channels in 16-channel blocks */
    if (c < c16) {
        const int32_t r = c % 16;
        return (c / 16) * 4 * DWM_G + ((r >= 8) * 2 + (r & 1)) * DWM_G + ((r & 7) >> 1);
    }
    const int32_t c8 = ch % 16 >= 8 ? c16 + 8 : c16; /* end of the 8-channel block, if any */
    if (c < c8) {
        const int32_t r = c - c16;
        return c16 / 4 * DWM_G + (r & 1) * DWM_G + (r >> 1);
    }
    return c8 / 4 * DWM_G + ((c - c8) / 4) * DWM_G + (c - c8) % 4;
}

#if TINYAOT_USE_MVE

/* Eight channels of a tap inside the input: x and w widened to int16, even and odd lanes' products into ae, ao. */
#define DWM_TAP8(xp, wp, ae, ao)                                                                                   \
    do {                                                                                                           \
        const int16x8_t xv_ = vldrbq_s16(xp);                                                                      \
        const int16x8_t wv_ = vldrbq_s16(wp);                                                                      \
        ae = vaddq_s32(ae, vmullbq_int_s16(xv_, wv_));                                                             \
        ao = vaddq_s32(ao, vmulltq_int_s16(xv_, wv_));                                                             \
    } while (0)

/* The same on x - z (border windows): |x - z| <= 255 fits the int16 lanes, the products int32. */
#define DWM_TAPZ8(xp, wp, ae, ao)                                                                                  \
    do {                                                                                                           \
        const int16x8_t xv_ = vsubq_n_s16(vldrbq_s16(xp), zp);                                                     \
        const int16x8_t wv_ = vldrbq_s16(wp);                                                                      \
        ae = vaddq_s32(ae, vmullbq_int_s16(xv_, wv_));                                                             \
        ao = vaddq_s32(ao, vmulltq_int_s16(xv_, wv_));                                                             \
    } while (0)

/* The taps of the current window for the channels from c. A window wholly inside the input runs TAP_X(x, w) on
   raw activations (its accumulators start at the folded bias); any other window runs TAP_XZ(x, w) on its valid taps
   [ky0, ky1) x [kx0, kx1) only, on x - z (its accumulators start at the plain bias):
   bias + sum_valid (x + input_offset) * w, the generic kernel's sum. No test per tap either way. */
#define DWM_WINDOW(L, c, TAP_X, TAP_XZ)                                                                            \
    do {                                                                                                           \
        const int32_t ch_ = (L)->in_c;                                                                             \
        const int32_t col_ = (L)->dil_w * ch_;                                                                     \
        int32_t ky_, kx_;                                                                                          \
        if (full) {                                                                                                \
            const int8_t *w_ = (L)->filter + (c);                                                                  \
            const int8_t *x_ = (L)->in + ((L)->y0 * (L)->in_w + (L)->x0) * ch_ + (c);                              \
            const int32_t *st_ = (L)->steps;                                                                       \
            int32_t t_;                                                                                            \
            for (t_ = 0; t_ < (L)->taps; t_++, w_ += ch_) {                                                        \
                TAP_X(x_, w_);                                                                                     \
                x_ += st_[t_];                                                                                     \
            }                                                                                                      \
        } else {                                                                                                   \
            for (ky_ = (L)->ky0; ky_ < (L)->ky1; ky_++) {                                                          \
                const int8_t *w_ = (L)->filter + (ky_ * (L)->k_w + (L)->kx0) * ch_ + (c);                          \
                const int8_t *x_ = (L)->in + (((L)->y0 + ky_ * (L)->dil_h) * (L)->in_w + (L)->x0 +                 \
                                              (L)->kx0 * (L)->dil_w) * ch_ + (c);                                  \
                for (kx_ = (L)->kx0; kx_ < (L)->kx1; kx_++, x_ += col_, w_ += ch_) {                               \
                    TAP_XZ(x_, w_);                                                                                \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

/* Requantization of four lanes with multipliers m and shifts s, plus the output offset and the clamp. `fast` (a
   constant where it is inlined): every shift of the layer is negative (a right shift, the VRSHL amount as it is)
   and the activation range is all of int8, so the steps that would do nothing are left out: no left shift, no
   splitting of the shifts; the ties fixup needs no mask (every lane is shifted); the clamp is a saturating shift
   up by 24 and an arithmetic shift back, which is a clamp to [-128, 127], without constant vectors. Same integers
   either way. (Layers with some shift 0 take the general form: a third instantiation for them measured 36,000
   fewer instructions on vww_mobilenetv1_025 for 2.2 KB more code on every model.) */
static TINYAOT_ALWAYS_INLINE int32x4_t dwm_requant_v(const dwm_layer *L, int32x4_t acc,
                                                                       int32x4_t m, int32x4_t s, int fast)
{
    if (fast) {
        int32x4_t v = vqrdmulhq_s32(acc, m);
        /* -1 on the negative lanes (all are shifted): ties away from zero (tinyaot_mve_rdbpot) */
        v = vrshlq_s32(vqaddq_s32(v, vshrq_n_s32(v, 31)), s);
        return vshrq_n_s32(vqshlq_n_s32(vqaddq_n_s32(v, L->out_off), 24), 24);
    }
    return tinyaot_mve_offset_clamp(tinyaot_mve_requantize(acc, m, s), L->out_off, L->act_min, L->act_max);
}

/* Requantize a group of four lanes with its table entries g (multiplier and shift). */
static TINYAOT_ALWAYS_INLINE int32x4_t dwm_requant(const dwm_layer *L, int32x4_t acc,
                                                                     const int32_t *g, int fast)
{
    return dwm_requant_v(L, acc, vldrwq_s32(g + DWM_M), vldrwq_s32(g + DWM_S), fast);
}

/* All channels of the current output pixel (instantiated below for both requantizations). */
static TINYAOT_ALWAYS_INLINE void dwm_pixel_body(const dwm_layer *L, int32_t full, int8_t *out,
                                                                 int fast)
{
    const int32_t ch = L->in_c;
    const int16_t zp = (int16_t)L->zp;
    const int32_t *g = L->table;
    int32_t c = 0;
    const int32_t init = full ? DWM_FB : DWM_B; /* folded bias for raw taps, bias for x - z */
    for (; c + 16 <= ch; c += 16, g += 4 * DWM_G) {
        int32x4_t a0 = vldrwq_s32(g + init);
        int32x4_t a1 = vldrwq_s32(g + DWM_G + init);
        int32x4_t a2 = vldrwq_s32(g + 2 * DWM_G + init);
        int32x4_t a3 = vldrwq_s32(g + 3 * DWM_G + init);
/* (the upper eight first: GCC then addresses both with immediate offsets instead of copying the pointers) */
#define DWM_X16(x, w)                                                                                              \
    do {                                                                                                           \
        DWM_TAP8((x) + 8, (w) + 8, a2, a3);                                                                        \
        DWM_TAP8(x, w, a0, a1);                                                                                    \
    } while (0)
#define DWM_Z16(x, w)                                                                                              \
    do {                                                                                                           \
        DWM_TAPZ8((x) + 8, (w) + 8, a2, a3);                                                                       \
        DWM_TAPZ8(x, w, a0, a1);                                                                                   \
    } while (0)
        DWM_WINDOW(L, c, DWM_X16, DWM_Z16);
#undef DWM_X16
#undef DWM_Z16
        const uint32x4_t idx = vidupq_n_u32(0, 2); /* {0, 2, 4, 6} */
        vstrbq_scatter_offset_s32(out + c, idx, dwm_requant(L, a0, g, fast));
        vstrbq_scatter_offset_s32(out + c + 1, idx, dwm_requant(L, a1, g + DWM_G, fast));
        vstrbq_scatter_offset_s32(out + c + 8, idx, dwm_requant(L, a2, g + 2 * DWM_G, fast));
        vstrbq_scatter_offset_s32(out + c + 9, idx, dwm_requant(L, a3, g + 3 * DWM_G, fast));
    }
    if (c + 8 <= ch) {
        int32x4_t a0 = vldrwq_s32(g + init);
        int32x4_t a1 = vldrwq_s32(g + DWM_G + init);
#define DWM_X8(x, w) DWM_TAP8(x, w, a0, a1)
#define DWM_Z8(x, w) DWM_TAPZ8(x, w, a0, a1)
        DWM_WINDOW(L, c, DWM_X8, DWM_Z8);
#undef DWM_X8
#undef DWM_Z8
        const uint32x4_t idx = vidupq_n_u32(0, 2);
        vstrbq_scatter_offset_s32(out + c, idx, dwm_requant(L, a0, g, fast));
        vstrbq_scatter_offset_s32(out + c + 1, idx, dwm_requant(L, a1, g + DWM_G, fast));
        c += 8;
        g += 2 * DWM_G;
    }
    for (; c < ch; c += 4, g += DWM_G) {
        /* four channels in order, int32 lanes; lanes past the last channel predicated off */
        const mve_pred16_t p = vctp32q((uint32_t)(ch - c));
        int32x4_t a = vldrwq_s32(g + init);
#define DWM_X4(x, w) a = vaddq_s32(a, vmulq_s32(vldrbq_z_s32(x, p), vldrbq_z_s32(w, p)))
#define DWM_Z4(x, w) a = vaddq_s32(a, vmulq_s32(vsubq_n_s32(vldrbq_z_s32(x, p), L->zp), vldrbq_z_s32(w, p)))
        DWM_WINDOW(L, c, DWM_X4, DWM_Z4);
#undef DWM_X4
#undef DWM_Z4
        vstrbq_p_s32(out + c, dwm_requant(L, a, g, fast), p);
    }
}

/* `pairs` pairs of output pixels of one row from (y0, x0) on, all windows wholly inside the input. A pair, (y0, x0)
   and the next pixel (x0 + stride_w):
   eight channels at a time in four accumulators (first pixel's even and odd lanes, then the second's), so each
   weight load and each group's multiplier and shifts serve both pixels. The eight channels from c have their two
   lane groups at table + (c / 4) * DWM_G and one group further in every block layout (16- and 8-channel blocks
   alike); the last 1..7 channels run four at a time, predicated, pixel by pixel. */
static TINYAOT_ALWAYS_INLINE void dwm_pair_body(const dwm_layer *L, int32_t pstep, int32_t pairs,
                                                                int8_t *out, int fast)
{
    const int32_t ch = L->in_c;
    const int32_t taps = L->taps;
    const int32_t *steps = L->steps;
    const int8_t *origin = L->in + (L->y0 * L->in_w + L->x0) * ch;
    const uint32x4_t idx = vidupq_n_u32(0, 2); /* {0, 2, 4, 6} */
    int32_t n;
    for (n = 0; n < pairs; n++, origin += 2 * pstep, out += 2 * ch) {
    const int32_t *g = L->table;
    int32_t c = 0;
    for (; c + 8 <= ch; c += 8, g += 2 * DWM_G) {
        int32x4_t a0 = vldrwq_s32(g + DWM_FB);
        int32x4_t a1 = vldrwq_s32(g + DWM_G + DWM_FB);
        int32x4_t a2 = a0;
        int32x4_t a3 = a1;
        const int8_t *x = origin + c;
        const int8_t *w = L->filter + c;
#define DWM_PAIR_TAP(xp, wp)                                                                                       \
    do {                                                                                                           \
        const int16x8_t wv = vldrbq_s16(wp);                                                                       \
        const int16x8_t xa = vldrbq_s16(xp);                                                                       \
        a0 = vaddq_s32(a0, vmullbq_int_s16(xa, wv));                                                               \
        a1 = vaddq_s32(a1, vmulltq_int_s16(xa, wv));                                                               \
        const int16x8_t xb = vldrbq_s16((xp) + pstep);                                                             \
        a2 = vaddq_s32(a2, vmullbq_int_s16(xb, wv));                                                               \
        a3 = vaddq_s32(a3, vmulltq_int_s16(xb, wv));                                                               \
    } while (0)
        int32_t t;
        for (t = 0; t < taps; t++, w += ch) {
            DWM_PAIR_TAP(x, w);
            x += steps[t];
        }
#undef DWM_PAIR_TAP
        {
            const int32x4_t m = vldrwq_s32(g + DWM_M), sh = vldrwq_s32(g + DWM_S);
            vstrbq_scatter_offset_s32(out + c, idx, dwm_requant_v(L, a0, m, sh, fast));
            vstrbq_scatter_offset_s32(out + ch + c, idx, dwm_requant_v(L, a2, m, sh, fast));
        }
        {
            const int32x4_t m = vldrwq_s32(g + DWM_G + DWM_M), sh = vldrwq_s32(g + DWM_G + DWM_S);
            vstrbq_scatter_offset_s32(out + c + 1, idx, dwm_requant_v(L, a1, m, sh, fast));
            vstrbq_scatter_offset_s32(out + ch + c + 1, idx, dwm_requant_v(L, a3, m, sh, fast));
        }
    }
    for (; c < ch; c += 4, g += DWM_G) {
        const mve_pred16_t p = vctp32q((uint32_t)(ch - c));
        int32_t px;
        for (px = 0; px < 2; px++) {
            int32x4_t a = vldrwq_s32(g + DWM_FB);
            const int8_t *x = origin + px * pstep + c;
            const int8_t *w = L->filter + c;
            int32_t t;
            for (t = 0; t < taps; t++, w += ch) {
                a = vaddq_s32(a, vmulq_s32(vldrbq_z_s32(x, p), vldrbq_z_s32(w, p)));
                x += steps[t];
            }
            vstrbq_p_s32(out + px * ch + c, dwm_requant(L, a, g, fast), p);
        }
    }
    }
}

/* The two instantiations of each: general requantization, and the shorter one (dwm_requant_v). Out of line
   so that their registers are their own (inlined into the pixel loops, GCC spills accumulators). */
static TINYAOT_NOINLINE void dwm_pixel(const dwm_layer *L, int32_t full, int8_t *out)
{
    dwm_pixel_body(L, full, out, 0);
}

static TINYAOT_NOINLINE void dwm_pixel_fast(const dwm_layer *L, int32_t full, int8_t *out)
{
    dwm_pixel_body(L, full, out, 1);
}


static TINYAOT_NOINLINE void dwm_pair(const dwm_layer *L, int32_t pstep, int32_t pairs, int8_t *out)
{
    dwm_pair_body(L, pstep, pairs, out, 0);
}

static TINYAOT_NOINLINE void dwm_pair_fast(const dwm_layer *L, int32_t pstep, int32_t pairs, int8_t *out)
{
    dwm_pair_body(L, pstep, pairs, out, 1);
}


#else /* plain C: the same folded arithmetic from the same table, one channel at a time */

static void dwm_pixel(const dwm_layer *L, int32_t full, int8_t *out)
{
    int32_t c;
    (void)full;
    for (c = 0; c < L->in_c; c++) {
        const int32_t *t = L->table + dwm_slot(c, L->in_c);
        int32_t a = t[0];
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
        out[c] = tinyaot_requantize_s8(a, t[DWM_M], t[DWM_S], L->out_off, L->act_min, L->act_max);
    }
}

#endif

int32_t tinyaot_depthwise_conv_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

int32_t tinyaot_depthwise_conv_s8_mve_table_slot(int32_t c, int32_t channels)
{
    return dwm_slot(c, channels);
}

tinyaot_status tinyaot_depthwise_conv_s8_mve(TINYAOT_DW_CONV_ARGS(int8_t, table))
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = dw_conv_params->stride.h;
    const int32_t stride_w = dw_conv_params->stride.w;
    (void)ctx;
    (void)bias_dims;
    (void)quant_params;

    if (dw_conv_params->ch_mult != 1 || filter_dims->c != in_c || output_dims->c != in_c || table == NULL ||
        stride_h <= 0 || stride_w <= 0 || dw_conv_params->dilation.h <= 0 || dw_conv_params->dilation.w <= 0 ||
        dw_conv_params->input_offset < -128 || dw_conv_params->input_offset > 128 ||
        filter_dims->h * filter_dims->w > DWM_MAX_TAPS) {
        return TINYAOT_ARG_ERROR; /* |z| <= 128 keeps x - z within the int16 lanes of the border windows' products */
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
    L.table = table;
    L.out_off = dw_conv_params->output_offset;
    L.act_min = dw_conv_params->activation.min;
    L.act_max = dw_conv_params->activation.max;
    L.taps = L.k_h * L.k_w;
    int32_t steps[DWM_MAX_TAPS];
    {
        int32_t t;
        for (t = 0; t < L.taps; t++) { /* the next tap in the row, or the first one of the next row */
            steps[t] = (t + 1) % L.k_w ? L.dil_w * in_c : (L.dil_h * in_w - (L.k_w - 1) * L.dil_w) * in_c;
        }
    }
    L.steps = steps;
#if TINYAOT_USE_MVE
    /* the shorter requantization (dwm_requant_v) where every shift is negative and the clamp is all of int8: the
       largest shift over every lane of the table (its unused lanes, past the last channel and never stored, hold
       shift -1: ops/mve_depthwise.py; any other value there could only select the general form, always exact) */
    int32_t fast = 0;
    if (L.act_min <= -128 && L.act_max >= 127) {
        int32_t most = TINYAOT_INT32_MIN;
        int32_t g;
        for (g = 0; g < (in_c + 3) / 4; g++) {
            most = vmaxvq_s32(most, vldrwq_s32(table + g * DWM_G + DWM_S));
        }
        fast = most < 0;
    }
#endif

    const int32_t span_w = (L.k_w - 1) * L.dil_w; /* from a window's first column to its last */
    /* past the last output column whose window ends inside the input (x0 + span_w < in_w) */
    const int32_t full_end = tinyaot_min_i32(
        out_w, in_w - span_w + dw_conv_params->padding.w <= 0
                   ? 0
                   : (in_w - span_w - 1 + dw_conv_params->padding.w) / stride_w + 1);
    (void)full_end;
    int32_t b;
    for (b = 0; b < batches; b++) {
        L.in = input + b * in_h * in_w * in_c;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            L.y0 = oy * stride_h - dw_conv_params->padding.h;
            tinyaot_valid_taps(L.y0, L.k_h, L.dil_h, in_h, &L.ky0, &L.ky1);
            const int32_t rows_in = L.ky0 == 0 && L.ky1 == L.k_h;
            int8_t *out_px = output + (b * out_h + oy) * out_w * in_c;
            int32_t ox;
            for (ox = 0; ox < out_w; ox++, out_px += in_c) {
                L.x0 = ox * stride_w - dw_conv_params->padding.w;
                tinyaot_valid_taps(L.x0, L.k_w, L.dil_w, in_w, &L.kx0, &L.kx1);
                const int32_t full = rows_in && L.kx0 == 0 && L.kx1 == L.k_w;
#if TINYAOT_USE_MVE
                /* this window and the next ones wholly inside the input (up to full_end): two at a time */
                const int32_t pairs = full ? (full_end - ox) / 2 : 0;
                if (pairs > 0) {
                    if (fast) {
                        dwm_pair_fast(&L, stride_w * in_c, pairs, out_px);
                    } else {
                        dwm_pair(&L, stride_w * in_c, pairs, out_px);
                    }
                    ox += 2 * pairs - 1;
                    out_px += (2 * pairs - 1) * in_c;
                    continue;
                }
#endif
#if TINYAOT_USE_MVE
                if (fast) {
                    dwm_pixel_fast(&L, full, out_px);
                    continue;
                }
#endif
                dwm_pixel(&L, full, out_px);
            }
        }
    }
    return TINYAOT_OK;
}
