/*
 * tinyaot_depthwise_conv_s8_3x3: int8 NHWC depthwise convolution for one shape class, 3x3 filter, channel
 * multiplier 1, no dilation, any stride and padding (the "dw3x3" and "dw3x3_fold" variants of ops/conv.py).
 *
 * out[y, x, c] = requant(bias[c] + sum_{ky, kx < 3} (in[y*sh - pt + ky, x*sw - pl + kx, c] + input_offset)
 *                                                   * w[c, ky, kx])
 *
 * What the compiler prepared (tinyaot/ops/depthwise3x3.py), so the kernel does less per output:
 * - weights: per group of four channels, the nine taps of the group as four bytes each (tap-major), 36 bytes per
 *   group; the last group padded with zero weights. Every weight load of a pass is at a constant offset.
 * - qtab: per group of four channels 13 int32: the four biases, the four multipliers, the four radd and one word
 *   of the four e as bytes (channel j in byte j, little-endian, read as bytes), where e = -shift in 1..30 (a right
 *   shift) and radd = 2^(e-1) + output_offset * 2^e: the rounding half of
 *   TFLite's RoundingDivideByPOT and the output zero point, added before one arithmetic shift. Padded to whole
 *   groups like the weights. With `folded` (cores without DSP) 17 values per group: four more, the folded biases
 *   bias + input_offset * (sum of the channel's nine weights), from which interior pixels start so that their taps
 *   multiply raw inputs (one add less per multiply); border pixels keep the bias and the offset. The folded bias
 *   and every partial sum from it stay within the accumulator bound below.
 * - bounds, checked by the compiler per channel: |acc| < 2^30, where |acc| <= |bias| + sum|w| * (128 +
 *   |input_offset|), and |acc| + 2^(e-1) + 128 * 2^e < 2^31. A group with a channel that fails them or whose
 *   shift is not a right shift in 1..30 (0, or a left shift: channels with raised or odd scales) is marked slow
 *   (bit 31 of its e word) and requantized channel by channel as its bytes say (dw3_out_slow): the short form,
 *   shift 0 (the identity rounding), or TFLite's general requantization with the shift in the radd slot. Its
 *   int32 sums are exact by the bound compress/bounds.py checks.
 *
 * Requantization: TFLite's double rounding computed exactly in fewer steps under those bounds, one rounding high
 * multiply-accumulate and one shift (tinyaot_dw3_support.h, shared with the compressed weights' 3x3 path).
 *
 * Window taps: output pixels whose 3x3 window lies inside the input (the interior) take a fully unrolled path with
 * no bounds checks; border pixels visit only their valid taps (padding holds the zero point and contributes
 * nothing). Four channels per pass: the DSP path loads four input and four filter bytes per tap as words, unpacks
 * lanes (0, 2) and (1, 3) with SXTAB16 / SXTB16 and multiplies lane by lane with SMLABB / SMLATT; the plain C path
 * does the same per byte. Channels past the last multiple of four go one at a time. Pixels are visited in raster
 * order, each pixel's channels completed before the next pixel's window is read (Conv.inplace_offset holds).
 * Accumulator bound: |acc| < 2^30 (above), so no int32 step overflows.
 */
#include "tinyaot_nn.h"
#include "tinyaot_dw3_support.h"

#define DW3_GROUP_BYTES 36 /* nine taps of four channels */

#if defined(__ARM_FEATURE_SAT) && TINYAOT_GNU
#define DW3_HAS_SSAT 1 /* SSAT: ARMv7-M and up, DSP or not */
#include <arm_acle.h>
#else
#define DW3_HAS_SSAT 0
#endif

/* What a pixel's channel loop needs besides its pointers. */
typedef struct {
    int32_t groups; /* channels / 4 */
    int32_t in_c;   /* input bytes from one tap to the next in a row */
    int32_t in_row; /* input bytes from one row to the next */
    int32_t in_off;
    int32_t act_min, act_max;
    int32_t qstride; /* int32 table values per group: 13, or 17 with the folded biases */
    int32_t out_off; /* output zero point (the general requantization) */
} dw3_layer;

/* One tap of four channels: input word at p, filter word t of the group (tinyaot_dw3_support.h). */
#define DW3_TAP(p, t) TINYAOT_DW3_MAC4((p), w + (t) * 4)

/* Clamp to the activation range; `full` (a constant after inlining) when it is all of int8: one SSAT. */
static TINYAOT_ALWAYS_INLINE int32_t dw3_clamp(int32_t v, int full, int32_t act_min,
                                                               int32_t act_max)
{
#if DW3_HAS_SSAT
    if (full) {
        return TINYAOT_SSAT8(v);
    }
#else
    (void)full;
#endif
    v = v < act_min ? act_min : v;
    return v > act_max ? act_max : v;
}

/* Channel j of a group: its requantization (see the header comment; tinyaot_dw3_support.h, shared with the
   compressed weights' 3x3 path), q the group's table values, e its right shift. */
static TINYAOT_ALWAYS_INLINE int8_t dw3_out(int32_t acc, const int32_t *q, int32_t j, int32_t e,
                                                            int full, int32_t act_min, int32_t act_max)
{
    return (int8_t)dw3_clamp(tinyaot_dw3_short_rq(acc, q[4 + j], q[8 + j], e), full, act_min, act_max);
}

/* Right shift of channel j from its group's e word (byte j). */
#define DW3_E(ew, j) ((int32_t)(((uint32_t)(ew) >> (8 * (j))) & 0xFFu))

/* A group marked slow (bit 31 of its e word set): channel by channel, byte j & 0x7F of the e word says how.
   1..30: the short form with that right shift; DW3_MODE_LEFT + s (s = 0..30): a shift s >= 0, applied as a left
   shift before the multiply as TFLite does, where the compiler found |acc| * 2^(s+1) < 2^31 so it never
   saturates; RoundingDivideByPOT is then the identity and the output is SRDHM(acc * 2^s, m) + output_offset (radd
   holds the output offset); DW3_MODE_GENERAL: TFLite's requantization in general (sums too large for the short
   forms; the radd slot holds the shift). */
#define DW3_MODE_LEFT 0x40
#define DW3_MODE_GENERAL 0x7F

/* TFLite's requantization in general (a slow group's DW3_MODE_GENERAL channel: the radd slot holds the shift). */
static TINYAOT_NOINLINE int8_t dw3_out_general(int32_t acc, const int32_t *q, int32_t j, const dw3_layer *L)
{
    return tinyaot_requantize_s8(acc, q[4 + j], q[8 + j], L->out_off, L->act_min, L->act_max);
}

/* Channel j of a slow group by its mode byte (see above). */
static TINYAOT_ALWAYS_INLINE int8_t dw3_out_mode(int32_t acc, const int32_t *q, int32_t j, int32_t mode,
                                                 const dw3_layer *L)
{
    if (mode < DW3_MODE_LEFT) {
        return dw3_out(acc, q, j, mode, 0, L->act_min, L->act_max);
    }
    if (mode != DW3_MODE_GENERAL) {
        /* SRDHM(acc * 2^s, m) + offset: 2 * acc * 2^s fits int32 (checked by the compiler) */
        const int32_t acc2 = (int32_t)((uint32_t)acc << (mode - DW3_MODE_LEFT + 1));
        return (int8_t)tinyaot_clamp_i32(tinyaot_dw3_mmlar(acc2, q[4 + j], q[8 + j]), L->act_min, L->act_max);
    }
    return dw3_out_general(acc, q, j, L);
}

/* The four channels of a slow group, written out (no accumulator array, no loop: int4 layers, whose larger weight
   scales give many channels a left shift, run a third of their groups or more here). */
static TINYAOT_NOINLINE void dw3_out_slow(int32_t a0, int32_t a1, int32_t a2, int32_t a3, const int32_t *q,
                                          int8_t *out, const dw3_layer *L)
{
    const uint32_t ew = (uint32_t)q[12];
    out[0] = dw3_out_mode(a0, q, 0, (int32_t)(ew & 0x7Fu), L);
    out[1] = dw3_out_mode(a1, q, 1, (int32_t)((ew >> 8) & 0x7Fu), L);
    out[2] = dw3_out_mode(a2, q, 2, (int32_t)((ew >> 16) & 0x7Fu), L);
    out[3] = dw3_out_mode(a3, q, 3, (int32_t)((ew >> 24) & 0x7Fu), L);
}

/* One output, any kind (bias-only pixels and the channels past the last multiple of four). */
static int8_t dw3_out1(int32_t acc, const int32_t *q, int32_t j, const dw3_layer *L)
{
    const int32_t ew = q[12];
    if (ew < 0) {
        int8_t o[4];
        dw3_out_slow(acc, acc, acc, acc, q, o, L);
        return o[j];
    }
    if (L->act_min == -128 && L->act_max == 127) {
        return dw3_out(acc, q, j, DW3_E(ew, j), 1, -128, 127);
    }
    return dw3_out(acc, q, j, DW3_E(ew, j), 0, L->act_min, L->act_max);
}

#define DW3_STORE4()                                                                                                   \
    do {                                                                                                               \
        const int32_t ew_ = q[12];                                                                                     \
        if (ew_ >= 0) {                                                                                                \
            out[0] = dw3_out(a0, q, 0, DW3_E(ew_, 0), full, L->act_min, L->act_max);                                   \
            out[1] = dw3_out(a1, q, 1, DW3_E(ew_, 1), full, L->act_min, L->act_max);                                   \
            out[2] = dw3_out(a2, q, 2, DW3_E(ew_, 2), full, L->act_min, L->act_max);                                   \
            out[3] = dw3_out(a3, q, 3, DW3_E(ew_, 3), full, L->act_min, L->act_max);                                   \
        } else {                                                                                                       \
            dw3_out_slow(a0, a1, a2, a3, q, out, L);                                                                   \
        }                                                                                                              \
    } while (0)

/* All channel groups of `npix` interior pixels in a row (nine taps each, no bounds checks, requantized as they
   finish), the next pixel's window `x_step` bytes on. x: the first window's top-left tap, channel 0. When the
   channel count is not a multiple of four the caller passes one pixel at a time and does its last channels. */
static TINYAOT_ALWAYS_INLINE void dw3_interior_body(const int8_t *x, const int8_t *w0,
                                                                   const int32_t *q0, int8_t *out,
                                                                   const dw3_layer *L, int32_t npix,
                                                                   int32_t x_step, int full, int folded)
{
    const int32_t in_c = L->in_c;
    const int32_t in_row = L->in_row;
    /* folded: the accumulators start from bias + input_offset * (sum of the channel's weights) and the taps
       multiply raw inputs (every tap of an interior window is a real input) */
    const int32_t in_off = folded ? 0 : L->in_off;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(in_off);
#endif
    for (; npix > 0; npix--) {
        const int8_t *w = w0;
        const int32_t *q = q0;
        const int8_t *xg = x;
        int32_t g;
        for (g = L->groups; g > 0; g--) {
            const int32_t *b = folded ? q + 13 : q;
            int32_t a0 = b[0], a1 = b[1], a2 = b[2], a3 = b[3];
            const int8_t *r = xg;
            DW3_TAP(r, 0);
            DW3_TAP(r + in_c, 1);
            DW3_TAP(r + 2 * in_c, 2);
            r += in_row;
            DW3_TAP(r, 3);
            DW3_TAP(r + in_c, 4);
            DW3_TAP(r + 2 * in_c, 5);
            r += in_row;
            DW3_TAP(r, 6);
            DW3_TAP(r + in_c, 7);
            DW3_TAP(r + 2 * in_c, 8);
            DW3_STORE4();
            xg += 4;
            w += DW3_GROUP_BYTES;
            q += folded ? 17 : 13;
            out += 4;
        }
        x += x_step;
    }
}

/* All channel groups of one border pixel: `rows` x `cols` valid taps (each 1..3), x at the first valid tap and
   w0 the offset of its filter word in a group. Taps in the padding hold the zero point and are skipped. */
static TINYAOT_ALWAYS_INLINE void dw3_border_body(const int8_t *x, const int8_t *w, int32_t w0,
                                                                 const int32_t *q, int8_t *out, const dw3_layer *L,
                                                                 int32_t rows, int32_t cols, int full)
{
    const int32_t in_c = L->in_c;
    const int32_t in_row = L->in_row;
    const int32_t in_off = L->in_off;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(in_off);
#endif
    int32_t g;
    w += w0;
    for (g = L->groups; g > 0; g--) {
        int32_t a0 = q[0], a1 = q[1], a2 = q[2], a3 = q[3];
        const int8_t *r = x;
        const int8_t *wg = w;
        int32_t k;
        for (k = 0; k < rows; k++) {
            /* the row's taps, last first: every case falls through to the ones before it */
            switch (cols) {
            case 3:
                DW3_TAP(r + 2 * in_c, 2);
                /* fall through */
            case 2:
                DW3_TAP(r + in_c, 1);
                /* fall through */
            default:
                DW3_TAP(r, 0);
            }
            r += in_row;
            w += 12;
        }
        w = wg;
        DW3_STORE4();
        x += 4;
        w += DW3_GROUP_BYTES;
        q += L->qstride;
        out += 4;
    }
}

TINYAOT_DW3_NOSCHED
static TINYAOT_NOINLINE void dw3_interior_full(const int8_t *x, const int8_t *w, const int32_t *q,
                                               int8_t *out, const dw3_layer *L, int32_t npix,
                                               int32_t x_step)
{
    dw3_interior_body(x, w, q, out, L, npix, x_step, 1, 0);
}

TINYAOT_DW3_NOSCHED
static TINYAOT_NOINLINE void dw3_interior_clamp(const int8_t *x, const int8_t *w, const int32_t *q,
                                                int8_t *out, const dw3_layer *L, int32_t npix,
                                                int32_t x_step)
{
    dw3_interior_body(x, w, q, out, L, npix, x_step, 0, 0);
}

#if !TINYAOT_USE_DSP
/* The folded tables (variant dw3x3_fold, for cores without DSP, where it saves an add per multiply; on DSP cores
   the offset rides along in SXTAB16 for free and the compiler does not fold). */
TINYAOT_DW3_NOSCHED
static TINYAOT_NOINLINE void dw3_interior_full_fold(const int8_t *x, const int8_t *w, const int32_t *q,
                                                    int8_t *out, const dw3_layer *L, int32_t npix,
                                                    int32_t x_step)
{
    dw3_interior_body(x, w, q, out, L, npix, x_step, 1, 1);
}

TINYAOT_DW3_NOSCHED
static TINYAOT_NOINLINE void dw3_interior_clamp_fold(const int8_t *x, const int8_t *w, const int32_t *q,
                                                     int8_t *out, const dw3_layer *L, int32_t npix,
                                                     int32_t x_step)
{
    dw3_interior_body(x, w, q, out, L, npix, x_step, 0, 1);
}
#endif

/* The interior pixels of one call: the instantiation for the activation range and the table kind. */
static void dw3_interior(const int8_t *x, const int8_t *w, const int32_t *q, int8_t *out, const dw3_layer *L,
                         int32_t npix, int32_t x_step, int full)
{
#if !TINYAOT_USE_DSP
    if (L->qstride == 17) {
        if (full) {
            dw3_interior_full_fold(x, w, q, out, L, npix, x_step);
        } else {
            dw3_interior_clamp_fold(x, w, q, out, L, npix, x_step);
        }
        return;
    }
#endif
    if (full) {
        dw3_interior_full(x, w, q, out, L, npix, x_step);
    } else {
        dw3_interior_clamp(x, w, q, out, L, npix, x_step);
    }
}

TINYAOT_DW3_NOSCHED
static TINYAOT_NOINLINE void dw3_border(const int8_t *x, const int8_t *w, int32_t w0, const int32_t *q,
                                        int8_t *out, const dw3_layer *L, int32_t rows, int32_t cols)
{
    if (L->act_min == -128 && L->act_max == 127) {
        dw3_border_body(x, w, w0, q, out, L, rows, cols, 1);
    } else {
        dw3_border_body(x, w, w0, q, out, L, rows, cols, 0);
    }
}

tinyaot_status tinyaot_depthwise_conv_s8_3x3(const int8_t *input, const int8_t *weights, const int32_t *qtab, int8_t *output,
                                             int32_t batches, int32_t in_h, int32_t in_w, int32_t channels, int32_t out_h,
                                             int32_t out_w, int32_t stride_h, int32_t stride_w, int32_t pad_t, int32_t pad_l,
                                             int32_t input_offset, int32_t output_offset, int32_t act_min, int32_t act_max,
                                             int32_t folded)
{
    if (channels <= 0 || stride_h <= 0 || stride_w <= 0 || pad_t < 0 || pad_l < 0 || (folded != 0 && folded != 1)) {
        return TINYAOT_ARG_ERROR;
    }
#if TINYAOT_USE_DSP
    if (folded) {
        return TINYAOT_ARG_ERROR; /* folded tables are made for cores without DSP only */
    }
#endif
    const int32_t in_row = in_w * channels;
    const int32_t c4 = channels & ~3;
    const int full = act_min == -128 && act_max == 127;
    dw3_layer L;
    L.groups = c4 / 4;
    L.in_c = channels;
    L.in_row = in_row;
    L.in_off = input_offset;
    L.act_min = act_min;
    L.act_max = act_max;
    L.qstride = folded ? 17 : 13;
    L.out_off = output_offset;
    /* where the channels past the last multiple of four start, in the weights and in the table */
    const int8_t *w_tail = weights + L.groups * DW3_GROUP_BYTES;
    const int32_t *q_tail = qtab + L.groups * L.qstride;
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *in_b = input + b * in_h * in_row;
        int32_t oy;
        for (oy = 0; oy < out_h; oy++) {
            const int32_t base_y = oy * stride_h - pad_t;
            int32_t ky0, ky1;
            tinyaot_valid_taps(base_y, 3, 1, in_h, &ky0, &ky1);
            /* the output columns whose windows lie inside the input horizontally: [ox_lo, ox_hi) */
            int32_t ox_lo = (pad_l + stride_w - 1) / stride_w;
            int32_t ox_hi = in_w - 3 + pad_l < 0 ? 0 : (in_w - 3 + pad_l) / stride_w + 1;
            ox_hi = ox_hi > out_w ? out_w : ox_hi;
            if (ky1 - ky0 != 3 || ox_hi <= ox_lo) {
                ox_lo = ox_hi = out_w; /* no interior pixel in this row */
            }
            int32_t ox;
            for (ox = 0; ox < out_w; ox++) {
                const int32_t base_x = ox * stride_w - pad_l;
                if (ox == ox_lo && c4 == channels && L.groups > 0) {
                    /* the row's interior pixels in one call (whole groups only: see dw3_interior_body) */
                    const int32_t first = base_y * in_row + base_x * channels;
                    int8_t *out_px = output + ((b * out_h + oy) * out_w + ox) * channels;
                    dw3_interior(in_b + first, weights, qtab, out_px, &L, ox_hi - ox_lo, stride_w * channels,
                                 full);
                    ox = ox_hi - 1;
                    continue;
                }
                int32_t kx0, kx1;
                tinyaot_valid_taps(base_x, 3, 1, in_w, &kx0, &kx1);
                const int32_t rows = ky1 - ky0, cols = kx1 - kx0;
                /* the first valid tap (only valid taps are ever addressed) and its offset in a 36-byte group */
                const int32_t first = (base_y + ky0) * in_row + (base_x + kx0) * channels;
                const int32_t wfirst = (ky0 * 3 + kx0) * 4;
                int8_t *out_px = output + ((b * out_h + oy) * out_w + ox) * channels;
                if (rows <= 0 || cols <= 0) {
                    /* the window lies entirely in the padding: bias only */
                    int32_t c;
                    for (c = 0; c < channels; c++) {
                        const int32_t *q = qtab + (c / 4) * L.qstride;
                        out_px[c] = dw3_out1(q[c % 4], q, c % 4, &L);
                    }
                    continue;
                }
                if (L.groups > 0) {
                    if (rows == 3 && cols == 3) {
                        dw3_interior(in_b + first, weights, qtab, out_px, &L, 1, 0, full);
                    } else {
                        dw3_border(in_b + first, weights, wfirst, qtab, out_px, &L, rows, cols);
                    }
                }
                /* the last channels (fewer than four), one at a time; their weights and table entries sit in a
                   padded group */
                int32_t c;
                for (c = c4; c < channels; c++) {
                    const int32_t j = c - c4;
                    int32_t acc = q_tail[j];
                    int32_t r;
                    for (r = 0; r < rows; r++) {
                        int32_t k;
                        for (k = 0; k < cols; k++) {
                            acc += ((int32_t)in_b[first + r * in_row + k * channels + c] + input_offset) *
                                   w_tail[wfirst + (r * 3 + k) * 4 + j];
                        }
                    }
                    out_px[c] = dw3_out1(acc, q_tail, j, &L);
                }
            }
        }
    }
    return TINYAOT_OK;
}
