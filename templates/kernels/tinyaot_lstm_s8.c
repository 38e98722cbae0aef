/*
 * tinyaot_lstm_s8: ONNX LSTM (gate order i, o, f, c; forward, reverse or both directions), integer only, the
 * formats of tinyaot/ops/lstm.py (which is the bit-exact reference):
 *   z = sat16(requant(sum_k w[r][k] (x[k] + x_offset)) + requant(sum_j rw[r][j] h[j]) + bias[r])   Q3.12
 *   i, o, f = sigmoid(z) Q0.15, g = tanh(z) Q0.15 (exp and reciprocal of the softmax, Q5.26 -> Q0.31)
 *   c = sat(rdbpot(f c, 15) + rdbpot(i g, 19)) in [-32767, 32767], Q4.11
 *   h = clamp(rdbpot(o tanh(c), 23)) int8, scale 1/128
 * Overflow: a Q3.12 or Q4.11 value shifted to Q5.26 (<< 14, << 15) stays below 2^31, and so does twice it for tanh
 * (|c| <= 32767: 32767 << 16 < 2^31); every product of two int16 values is below 2^30. The accumulators hold at most
 * (I or H) * 255 * 127 in magnitude.
 * The sequence is run step by step over its static length; w and rw stay in flash and are read at every step. The
 * previous h is read back from y (step t - 1 or t + 1 of the same direction) or, at the first step, from h0.
 * scratch: the cell state int16 [batch * hidden], then one batch row's gates int16 [4 * hidden] (4-byte aligned).
 */
#include "tinyaot_nn.h"

/* sigmoid of a Q5.26 value, Q0.31 (1/(1 + exp(-|v|)), or 1 minus it for v < 0) */
static int32_t lstm_sigmoid_q31(int32_t v)
{
    const int32_t neg = v > 0 ? -v : v;
    const int32_t s = tinyaot_one_over_one_plus_x(tinyaot_exp_on_negative_values(neg));
    return v >= 0 ? s : (int32_t)(0x80000000u - (uint32_t)s);
}

static int16_t lstm_sigmoid_q15(int32_t z_q12)
{
    return (int16_t)tinyaot_min_i32(tinyaot_rdbpot(lstm_sigmoid_q31(z_q12 * (1 << 14)), 16), 32767);
}

/* tanh(v) = 2 sigmoid(2 v) - 1 for a Q5.26 value v with |2 v| < 2^31; Q0.15 */
static int16_t lstm_tanh_q15(int32_t v26)
{
    const int32_t s = lstm_sigmoid_q31(v26 * 2);
    return (int16_t)tinyaot_clamp_i32(tinyaot_rdbpot(s - (1 << 30), 15), -32768, 32767);
}

tinyaot_status tinyaot_lstm_s8(const int8_t *x, int8_t *y, int8_t *scratch, int32_t steps, int32_t batch, int32_t in_size,
                               int32_t hidden, int32_t dirs, int32_t reverse, int32_t last_only, int32_t x_offset, const int8_t *w, const int8_t *rw,
                               const int32_t *bias, const int32_t *mult_x, const int32_t *shift_x, const int32_t *mult_h,
                               const int32_t *shift_h, const int8_t *h0, const int16_t *c0)
{
    int16_t *cell = (int16_t *)(void *)scratch;
    int16_t *gates = cell + batch * hidden + ((batch * hidden) & 1); /* keep 4-byte alignment */
    const int32_t rows = 4 * hidden;
    int32_t d, s, b, row, k;
    for (d = 0; d < dirs; d++) {
        const int8_t *wd = w + d * rows * in_size;
        const int8_t *rd = rw + d * rows * hidden;
        for (k = 0; k < batch * hidden; k++) {
            cell[k] = c0[d * batch * hidden + k];
        }
        for (s = 0; s < steps; s++) {
            const int32_t backwards = d == 1 || reverse; /* direction 1, or ONNX direction="reverse" */
            const int32_t t = backwards ? steps - 1 - s : s;
            const int32_t t_prev = backwards ? t + 1 : t - 1;
            for (b = 0; b < batch; b++) {
                const int8_t *xt = x + (t * batch + b) * in_size;
                /* last_only (ONNX Y_h): y is [dirs, batch, hidden] and holds h itself, rewritten each step; safe
                   because all gates of the row are computed (into scratch) before any of h is written */
                int8_t *yt = last_only ? y + (d * batch + b) * hidden : y + ((t * dirs + d) * batch + b) * hidden;
                const int8_t *hp = s == 0 ? h0 + (d * batch + b) * hidden
                                   : last_only ? yt : y + ((t_prev * dirs + d) * batch + b) * hidden;
                int16_t *c = cell + b * hidden;
                for (row = 0; row < rows; row++) {
                    const int8_t *wr = wd + row * in_size;
                    const int8_t *rr = rd + row * hidden;
                    int32_t acc_x = 0, acc_h = 0;
                    for (k = 0; k < in_size; k++) {
                        acc_x += (int32_t)wr[k] * ((int32_t)xt[k] + x_offset);
                    }
                    for (k = 0; k < hidden; k++) {
                        acc_h += (int32_t)rr[k] * (int32_t)hp[k];
                    }
                    const int32_t q = d * rows + row;
                    /* each rescaled term is a Q3.12 value of a few units; the sum with the bias cannot overflow
                       int32 for any bias the compiler stores (it clamps the bias to int32) except in absurd cases,
                       which the saturation to int16 then bounds */
                    const int32_t z = tinyaot_requantize(acc_x, mult_x[q], shift_x[q])
                                      + tinyaot_requantize(acc_h, mult_h[q], shift_h[q]) + bias[q];
                    gates[row] = (int16_t)tinyaot_clamp_i32(z, -32768, 32767);
                }
                for (k = 0; k < hidden; k++) {
                    const int32_t gi = lstm_sigmoid_q15(gates[k]);
                    const int32_t go = lstm_sigmoid_q15(gates[hidden + k]);
                    const int32_t gf = lstm_sigmoid_q15(gates[2 * hidden + k]);
                    const int32_t gc = lstm_tanh_q15((int32_t)gates[3 * hidden + k] * (1 << 14));
                    const int32_t cn = tinyaot_rdbpot(gf * (int32_t)c[k], 15) + tinyaot_rdbpot(gi * gc, 19);
                    c[k] = (int16_t)tinyaot_clamp_i32(cn, -32767, 32767);
                    const int32_t th = lstm_tanh_q15((int32_t)c[k] * (1 << 15));
                    yt[k] = (int8_t)tinyaot_clamp_i32(tinyaot_rdbpot(go * th, 23), -128, 127);
                }
            }
        }
    }
    return TINYAOT_OK;
}
