/*
 * tinyaot_elementwise_binary_s8: int8 ADD, SUB or MUL with numpy broadcasting (TFLite int8 arithmetic).
 *
 * ADD and SUB follow TFLite's ADD: each input is offset, shifted left by left_shift (20 from the preparation) and
 * rescaled to a common scale, twice the larger input scale, so each input multiplier is <= 1/2; SUB subtracts the
 * second term instead of adding it. Overflow: |x + offset| <= 255 and 255 * 2^23 < 2^31, so left_shift <= 23 keeps
 * the shifted inputs in int32; each rescaled term is at most half of that, so their sum or difference fits too.
 * MUL follows TFLite's MUL: (x1 + offset1) * (x2 + offset2) is at most 255 * 255 = 65025 in magnitude, and is
 * rescaled by one multiplier for s1 * s2 / s_out.
 *
 * Broadcasting: the compiler merges axes and pads the shapes to rank 4 (tinyaot/ops/broadcast.py); the innermost
 * axis is walked as a row, where each input either advances (stride 1) or repeats one value (stride 0).
 * Output element k is written after its inputs are read, and an input with the output's shape is read at k, so
 * output may be that input (in place).
 */
#include "tinyaot_nn.h"

/* One ADD/SUB operand on the common scale: ((x + offset) << left_shift) * mult * 2^(shift - 31). */
static inline int32_t tinyaot_binary_term(int32_t x, int32_t offset, int32_t scale_up, int32_t mult, int32_t shift)
{
    return tinyaot_requantize((x + offset) * scale_up, mult, shift);
}

static void tinyaot_binary_row(const tinyaot_binary_params *p, const int8_t *a, int32_t step_a, const int8_t *b,
                               int32_t step_b, int8_t *out, int32_t n)
{
    const int32_t lo = p->activation.min;
    const int32_t hi = p->activation.max;
    int32_t i;
    if (p->op == TINYAOT_BINARY_MUL) {
        for (i = 0; i < n; i++) {
            const int32_t prod = ((int32_t)a[i * step_a] + p->input_1_offset) * ((int32_t)b[i * step_b] + p->input_2_offset);
            out[i] = tinyaot_requantize_s8(prod, p->output_mult, p->output_shift, p->output_offset, lo, hi);
        }
        return;
    }
    const int32_t scale_up = (int32_t)1 << p->left_shift;
    const int32_t sign = p->op == TINYAOT_BINARY_SUB ? -1 : 1;
    for (i = 0; i < n; i++) {
        const int32_t ta = tinyaot_binary_term(a[i * step_a], p->input_1_offset, scale_up, p->input_1_mult,
                                               p->input_1_shift);
        const int32_t tb = tinyaot_binary_term(b[i * step_b], p->input_2_offset, scale_up, p->input_2_mult,
                                               p->input_2_shift);
        out[i] = tinyaot_requantize_s8(ta + sign * tb, p->output_mult, p->output_shift, p->output_offset, lo, hi);
    }
}

tinyaot_status tinyaot_elementwise_binary_s8(const tinyaot_binary_params *params, const tinyaot_broadcast_shape *shape,
                                             const int8_t *input_1, const int8_t *input_2, int8_t *output)
{
    if (params->op != TINYAOT_BINARY_ADD && params->op != TINYAOT_BINARY_SUB && params->op != TINYAOT_BINARY_MUL) {
        return TINYAOT_ARG_ERROR;
    }
    if (params->op != TINYAOT_BINARY_MUL && (params->left_shift < 0 || params->left_shift > 23)) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t *d = shape->dims;
    const int32_t *s1 = shape->stride_1;
    const int32_t *s2 = shape->stride_2;
    /* The row walker indexes with i * step: only 0 and 1 are meaningful innermost strides after merging. */
    if ((s1[3] != 0 && s1[3] != 1) || (s2[3] != 0 && s2[3] != 1)) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t i0, i1, i2;
    for (i0 = 0; i0 < d[0]; i0++) {
        for (i1 = 0; i1 < d[1]; i1++) {
            for (i2 = 0; i2 < d[2]; i2++) {
                const int8_t *a = input_1 + i0 * s1[0] + i1 * s1[1] + i2 * s1[2];
                const int8_t *b = input_2 + i0 * s2[0] + i1 * s2[1] + i2 * s2[2];
                tinyaot_binary_row(params, a, s1[3], b, s2[3], output, d[3]);
                output += d[3];
            }
        }
    }
    return TINYAOT_OK;
}
