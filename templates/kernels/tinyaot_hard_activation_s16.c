/*
 * tinyaot_hard_sigmoid_s16 / tinyaot_hard_swish_s16: HardSigmoid clip(alpha * x + beta, 0, 1) and HardSwish
 * x * clip(x / 6 + 1 / 2, 0, 1) on int16 (zero points 0); numpy twins in tinyaot/ops/hard_gate_s16.py.
 *
 * p = {A, B, mult, shift, act_min, act_max} (int64). The gate in Q30 is round((q * A + B) / 2^16) clipped to
 * [0, 2^30], with A = alpha * s_in * 2^46 (|A| < 2^46, so |q * A| < 2^61) and B = beta * 2^46 (|B| <= 2^62): the
 * sum and its rounding term stay below 2^63. HardSigmoid rescales the gate (<= 2^30) by mult / 2^shift; HardSwish
 * takes q * gate (|.| <= 2^45), rounds it to 2^-15 of itself (|.| <= 2^30) and rescales that. Both rescales are
 * tinyaot_requantize_exact_s64 of a value of at most 2^31. output may be input (element i is read first).
 */
#include "tinyaot_s16_support.h"

/* the Q30 gate of one input value (bounds above) */
static int64_t tinyaot_hard_gate_s16(int16_t q, int64_t a, int64_t b)
{
    const int64_t g = tinyaot_floor_shift_s64((int64_t)q * a + b + ((int64_t)1 << 15), 16);
    return g < 0 ? 0 : (g > ((int64_t)1 << 30) ? ((int64_t)1 << 30) : g);
}

static int tinyaot_hard_params_ok(const int64_t *p)
{
    const int64_t lim_a = (int64_t)1 << 46, lim_b = (int64_t)1 << 62;
    return p[0] > -lim_a && p[0] < lim_a && p[1] >= -lim_b && p[1] <= lim_b && p[2] >= 0 &&
           p[2] < ((int64_t)1 << 31) && p[3] >= 1 && p[3] <= 62 && p[4] >= -32768 && p[5] <= 32767;
}

tinyaot_status tinyaot_hard_sigmoid_s16(const int16_t *input, int32_t size, const int64_t *p, int16_t *output)
{
    int32_t i;
    if (!tinyaot_hard_params_ok(p)) {
        return TINYAOT_ARG_ERROR;
    }
    for (i = 0; i < size; i++) {
        const int64_t g = tinyaot_hard_gate_s16(input[i], p[0], p[1]);
        output[i] = tinyaot_clamp64_s16(tinyaot_requantize_exact_s64(g, (int32_t)p[2], (int32_t)p[3]), (int32_t)p[4],
                                        (int32_t)p[5]);
    }
    return TINYAOT_OK;
}

tinyaot_status tinyaot_hard_swish_s16(const int16_t *input, int32_t size, const int64_t *p, int16_t *output)
{
    int32_t i;
    if (!tinyaot_hard_params_ok(p)) {
        return TINYAOT_ARG_ERROR;
    }
    for (i = 0; i < size; i++) {
        const int16_t q = input[i];
        const int64_t z = tinyaot_floor_shift_s64((int64_t)q * tinyaot_hard_gate_s16(q, p[0], p[1]) + (1 << 14), 15);
        output[i] = tinyaot_clamp64_s16(tinyaot_requantize_exact_s64(z, (int32_t)p[2], (int32_t)p[3]), (int32_t)p[4],
                                        (int32_t)p[5]);
    }
    return TINYAOT_OK;
}
