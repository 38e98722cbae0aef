/*
 * tinyaot_depthwise_conv_s8: int8 NHWC depthwise convolution with channel multiplier, stride, dilation, padding.
 *
 * out[b, y, x, c*M + m] = requant(bias[c*M + m] + sum_{ky, kx} (in[b, y*sh - pt + ky*dh, x*sw - pl + kx*dw, c]
 *                                                               + input_offset) * w[0, ky, kx, c*M + m])
 *
 * Only the valid taps of each window are visited (padding holds the zero point and contributes nothing). Four
 * output channels are accumulated at once: four consecutive channels when M == 1 (four input bytes and four filter
 * bytes per tap, which the DSP path unpacks with SXTB16 and multiplies lane by lane with SMLABB/SMLATT), or four
 * multipliers of one input channel when M > 1. No scratch. int32 accumulators: see tinyaot_nn_support.h.
 */
#include "tinyaot_nn.h"

/* The valid taps of one output pixel's window as pointers and steps (taps in the padding already removed). */
typedef struct {
    const int8_t *in;    /* input at the first valid tap, channel 0 */
    const int8_t *w;     /* filter at the first valid tap, output channel 0 */
    int32_t rows, cols;  /* valid taps vertically and horizontally */
    int32_t in_col_step; /* input bytes from one tap to the next in a row */
    int32_t in_row_skip; /* input bytes from just past a row's last tap to the next row's first */
    int32_t w_col_step;  /* the same two for the filter */
    int32_t w_row_skip;
    int32_t in_off;
} dw_window;

/* The tap loops live in small functions of their own (TINYAOT_NOINLINE): inlined into the pixel loops they run
   out of registers and spill pointers in the innermost loop. */
/* Channels c..c+3 (input) / oc..oc+3 (output), ch_mult == 1 so c == oc. */
static TINYAOT_NOINLINE void dw_acc_channels4(const dw_window *win, int32_t c, int32_t oc, const int32_t *bias,
                                              int32_t acc[4])
{
    int32_t a0 = bias ? bias[oc] : 0;
    int32_t a1 = bias ? bias[oc + 1] : 0;
    int32_t a2 = bias ? bias[oc + 2] : 0;
    int32_t a3 = bias ? bias[oc + 3] : 0;
    const int8_t *x = win->in + c;
    const int8_t *w = win->w + oc;
    const int32_t x_step = win->in_col_step;
    const int32_t w_step = win->w_col_step;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(win->in_off);
#else
    const int32_t off = win->in_off;
#endif
    int32_t r;
    for (r = 0; r < win->rows; r++) {
        int32_t k;
        for (k = 0; k < win->cols; k++) {
#if TINYAOT_USE_DSP
            /* four channels in one word each: lanes (c0, c2) and (c1, c3), multiplied lane by lane */
            const int32_t xv = tinyaot_read_s8x4(x);
            const int32_t wv = tinyaot_read_s8x4(w);
            const int32_t x02 = __sxtab16(off2, xv);
            const int32_t x13 = tinyaot_sxtab16_ror8(off2, xv);
            const int32_t w02 = __sxtb16(wv);
            const int32_t w13 = tinyaot_sxtb16_ror8(wv);
            a0 = __smlabb(x02, w02, a0);
            a2 = __smlatt(x02, w02, a2);
            a1 = __smlabb(x13, w13, a1);
            a3 = __smlatt(x13, w13, a3);
#else
            a0 += ((int32_t)x[0] + off) * w[0];
            a1 += ((int32_t)x[1] + off) * w[1];
            a2 += ((int32_t)x[2] + off) * w[2];
            a3 += ((int32_t)x[3] + off) * w[3];
#endif
            x += x_step;
            w += w_step;
        }
        x += win->in_row_skip;
        w += win->w_row_skip;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* Output channels oc..oc+3, all reading input channel c (ch_mult a multiple of 4). */
static TINYAOT_NOINLINE void dw_acc_mults4(const dw_window *win, int32_t c, int32_t oc, const int32_t *bias,
                                           int32_t acc[4])
{
    int32_t a0 = bias ? bias[oc] : 0;
    int32_t a1 = bias ? bias[oc + 1] : 0;
    int32_t a2 = bias ? bias[oc + 2] : 0;
    int32_t a3 = bias ? bias[oc + 3] : 0;
    const int8_t *x = win->in + c;
    const int8_t *w = win->w + oc;
    const int32_t off = win->in_off;
    int32_t r;
    for (r = 0; r < win->rows; r++) {
        int32_t k;
        for (k = 0; k < win->cols; k++) {
            const int32_t xv = (int32_t)*x + off;
            a0 += xv * w[0];
            a1 += xv * w[1];
            a2 += xv * w[2];
            a3 += xv * w[3];
            x += win->in_col_step;
            w += win->w_col_step;
        }
        x += win->in_row_skip;
        w += win->w_row_skip;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* One output channel oc reading input channel c. */
static int32_t dw_acc_one(const dw_window *win, int32_t c, int32_t oc, const int32_t *bias)
{
    int32_t a = bias ? bias[oc] : 0;
    const int8_t *x = win->in + c;
    const int8_t *w = win->w + oc;
    int32_t r;
    for (r = 0; r < win->rows; r++) {
        int32_t k;
        for (k = 0; k < win->cols; k++) {
            a += ((int32_t)*x + win->in_off) * *w;
            x += win->in_col_step;
            w += win->w_col_step;
        }
        x += win->in_row_skip;
        w += win->w_row_skip;
    }
    return a;
}

static void store4(int8_t *out, const int32_t acc[4], const int32_t *mult, const int32_t *shift, int32_t out_off,
                   int32_t act_min, int32_t act_max)
{
    int32_t i;
    for (i = 0; i < 4; i++) {
        out[i] = tinyaot_requantize_s8(acc[i], mult[i], shift[i], out_off, act_min, act_max);
    }
}

int32_t tinyaot_depthwise_conv_s8_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    (void)filter_dims;
    return 0;
}

tinyaot_status tinyaot_depthwise_conv_s8(TINYAOT_DW_CONV_ARGS(int8_t, bias))
{
    tinyaot_window_geom g;
    tinyaot_dw_conv_geom(&g, dw_conv_params, input_dims, filter_dims, output_dims);
    const int32_t ch_mult = dw_conv_params->ch_mult;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    (void)ctx;
    (void)bias_dims;

    if (ch_mult <= 0 || g.out_c != g.in_c * ch_mult || !tinyaot_window_steps_ok(&g, output_dims)) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t in_row = g.in_w * g.in_c;
    /* the window's steps that no pixel changes, set once: win's address goes to the tap loops, so each field set
       in the pixel loop is a store per pixel */
    dw_window win;
    win.in_col_step = g.dil_w * g.in_c;
    win.w_col_step = g.out_c;
    win.in_off = g.in_off;
    int32_t b, oy, ox;
    for (b = 0; b < g.batches; b++) {
        const int8_t *in_b = input + b * g.in_h * in_row;
        for (oy = 0; oy < g.out_h; oy++) {
            const tinyaot_span y = tinyaot_window_rows(&g, oy);
            for (ox = 0; ox < g.out_w; ox++) {
                const tinyaot_span x = tinyaot_window_cols(&g, ox);
                int8_t *out_px = tinyaot_window_out(&g, output, b, oy, ox);
                win.rows = y.k1 - y.k0;
                win.cols = x.k1 - x.k0;
                win.in_row_skip = g.dil_h * in_row - win.cols * win.in_col_step;
                win.w_row_skip = (g.k_w - win.cols) * g.out_c;
                if (win.rows <= 0 || win.cols <= 0) {
                    win.rows = 0; /* window entirely in the padding: bias only */
                    win.in = in_b;
                    win.w = filter;
                } else {
                    win.in = in_b + (y.base + y.k0 * g.dil_h) * in_row + (x.base + x.k0 * g.dil_w) * g.in_c;
                    win.w = filter + (y.k0 * g.k_w + x.k0) * g.out_c;
                }
                int32_t oc = 0; /* next output channel to produce */
                int32_t acc[4];

                if (ch_mult == 1) {
                    /* four consecutive channels per pass */
                    for (; oc + 4 <= g.out_c; oc += 4) {
                        dw_acc_channels4(&win, oc, oc, bias, acc);
                        store4(out_px + oc, acc, mult + oc, shift + oc, g.out_off, g.act_min, g.act_max);
                    }
                } else if (ch_mult % 4 == 0) {
                    /* four multipliers of one input channel per pass */
                    for (; oc < g.out_c; oc += 4) {
                        dw_acc_mults4(&win, oc / ch_mult, oc, bias, acc);
                        store4(out_px + oc, acc, mult + oc, shift + oc, g.out_off, g.act_min, g.act_max);
                    }
                }
                /* whatever is left: one output channel at a time */
                for (; oc < g.out_c; oc++) {
                    const int32_t a = dw_acc_one(&win, oc / ch_mult, oc, bias);
                    out_px[oc] = tinyaot_requantize_s8(a, mult[oc], shift[oc], g.out_off, g.act_min, g.act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
