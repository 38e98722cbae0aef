/*
 * tinyaot_gru_s8: ONNX GRU (gate order z, r, h; forward, reverse or both directions; linear_before_reset 0 or 1),
 * integer only, the formats of tinyaot/ops/gru.py (the bit-exact reference) and of the LSTM kernel:
 *   z, r = sigmoid(sat16(requant(W x) + requant(R h) + Wb + Rb))                        Q3.12 -> Q0.15
 *   lbr=1: n = tanh(sat16(a + rdbpot(r * sat16(requant(Rh h) + Rbh), 15)))              a = requant(Wh x) + Wbh
 *   lbr=0: n = tanh(sat16(a + Rbh + requant(Rh (r . h)))),  r . h = sat8(rdbpot(r h, 15))
 *   h = clamp(rdbpot((32768 - z) n + z (h_prev << 8), 23))                              int8, scale 1/128
 * Overflow: Q3.12 values shifted to Q5.26 (<< 14, and twice that for tanh) stay below 2^31; (32768 - z) and z sum to
 * 2^15, so the combination is at most 2^15 * 2^15 = 2^30 in magnitude; r * b is below 2^30.
 * The sequence is run step by step over its static length; w and rw stay in flash and are read at every step. The
 * previous h is read back from y (or h0 at the first step); with last_only (ONNX Y_h) y is [dirs, batch, hidden] and
 * holds h itself: every gate of a row is computed into scratch before element k of h is written, and writing h[k]
 * reads only h_prev[k].
 * scratch: the row's gate sums int32 [3 * hidden], then r . h int8 [hidden].
 */
#include "tinyaot_nn.h"

/* the LSTM kernel's sigmoid/tanh (templates/kernels/tinyaot_lstm_s8.c), kept file-local so each kernel stands alone */
static int32_t gru_sigmoid_q31(int32_t v)
{
    const int32_t neg = v > 0 ? -v : v;
    const int32_t s = tinyaot_one_over_one_plus_x(tinyaot_exp_on_negative_values(neg));
    return v >= 0 ? s : (int32_t)(0x80000000u - (uint32_t)s);
}

static int32_t gru_sigmoid_q15(int32_t z_q12)
{
    return tinyaot_min_i32(tinyaot_rdbpot(gru_sigmoid_q31(z_q12 * (1 << 14)), 16), 32767);
}

static int32_t gru_tanh_q15(int32_t v26)
{
    return tinyaot_clamp_i32(tinyaot_rdbpot(gru_sigmoid_q31(v26 * 2) - (1 << 30), 15), -32768, 32767);
}

static int32_t gru_dot(const int8_t *w, const int8_t *v, int32_t n, int32_t v_offset)
{
    int32_t acc = 0, k;
    for (k = 0; k < n; k++) {
        acc += (int32_t)w[k] * ((int32_t)v[k] + v_offset);
    }
    return acc;
}

tinyaot_status tinyaot_gru_s8(const int8_t *x, int8_t *y, int8_t *scratch, int32_t steps, int32_t batch, int32_t in_size,
                              int32_t hidden, int32_t dirs, int32_t reverse, int32_t last_only, int32_t lbr, int32_t x_offset,
                              const int8_t *w, const int8_t *rw, const int32_t *bias, const int32_t *mult_x,
                              const int32_t *shift_x, const int32_t *mult_h, const int32_t *shift_h, const int8_t *h0)
{
    int32_t *g = (int32_t *)(void *)scratch;
    int8_t *rh = scratch + 4 * 3 * hidden;
    const int32_t rows = 3 * hidden;
    int32_t d, s, b, row, k;
    for (d = 0; d < dirs; d++) {
        const int8_t *wd = w + d * rows * in_size;
        const int8_t *rd = rw + d * rows * hidden;
        const int32_t *wb = bias + d * 2 * rows;
        const int32_t *rb = wb + rows;
        const int32_t *mx = mult_x + d * rows, *sx = shift_x + d * rows;
        const int32_t *mh = mult_h + d * rows, *sh = shift_h + d * rows;
        for (s = 0; s < steps; s++) {
            const int32_t backwards = d == 1 || reverse;
            const int32_t t = backwards ? steps - 1 - s : s;
            const int32_t t_prev = backwards ? t + 1 : t - 1;
            for (b = 0; b < batch; b++) {
                const int8_t *xt = x + (t * batch + b) * in_size;
                int8_t *yt = last_only ? y + (d * batch + b) * hidden : y + ((t * dirs + d) * batch + b) * hidden;
                const int8_t *hp = s == 0 ? h0 + (d * batch + b) * hidden
                                   : last_only ? yt : y + ((t_prev * dirs + d) * batch + b) * hidden;
                for (row = 0; row < rows; row++) {
                    const int32_t ax = tinyaot_requantize(gru_dot(wd + row * in_size, xt, in_size, x_offset),
                                                          mx[row], sx[row]);
                    if (row < 2 * hidden) {
                        const int32_t ah = tinyaot_requantize(gru_dot(rd + row * hidden, hp, hidden, 0), mh[row],
                                                              sh[row]);
                        g[row] = tinyaot_clamp_i32(ax + ah + wb[row] + rb[row], -32768, 32767);
                    } else {
                        g[row] = ax + wb[row] + (lbr ? 0 : rb[row]);
                    }
                }
                if (!lbr) {
                    for (k = 0; k < hidden; k++) {
                        const int32_t r = gru_sigmoid_q15(g[hidden + k]);
                        rh[k] = (int8_t)tinyaot_clamp_i32(tinyaot_rdbpot(r * (int32_t)hp[k], 15), -128, 127);
                    }
                }
                for (k = 0; k < hidden; k++) {
                    const int32_t row_n = 2 * hidden + k;
                    int32_t pre;
                    if (lbr) {
                        const int32_t r = gru_sigmoid_q15(g[hidden + k]);
                        const int32_t bh = tinyaot_clamp_i32(
                            tinyaot_requantize(gru_dot(rd + row_n * hidden, hp, hidden, 0), mh[row_n], sh[row_n])
                                + rb[row_n], -32768, 32767);
                        pre = g[row_n] + tinyaot_rdbpot(r * bh, 15);
                    } else {
                        pre = g[row_n] + tinyaot_requantize(gru_dot(rd + row_n * hidden, rh, hidden, 0), mh[row_n],
                                                            sh[row_n]);
                    }
                    g[row_n] = gru_tanh_q15(tinyaot_clamp_i32(pre, -32768, 32767) * (1 << 14));
                }
                for (k = 0; k < hidden; k++) {
                    const int32_t z = gru_sigmoid_q15(g[k]);
                    const int32_t v = (32768 - z) * g[2 * hidden + k] + z * ((int32_t)hp[k] * 256);
                    yt[k] = (int8_t)tinyaot_clamp_i32(tinyaot_rdbpot(v, 23), -128, 127);
                }
            }
        }
    }
    return TINYAOT_OK;
}
