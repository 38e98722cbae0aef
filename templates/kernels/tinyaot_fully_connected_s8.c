/*
 * tinyaot_fully_connected_s8: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * (w[o, d] + filter_offset))
 *
 * The filter offset is factored out: sum (x + io) * (w + fo) = sum (x + io) * w + fo * sum (x + io), so the inner
 * loops are the same offset dot products as conv and the second term costs one pass over the input row (only when
 * fo != 0; TFLite int8 weights are symmetric so it is normally 0). Two output channels per pass, and two batch rows
 * at a time when there are several (2x2 reuse of every load). Requantization is per channel or per tensor.
 * int32 accumulation is exact while depth * 255 * 255 + |bias| < 2^31 (depth up to ~33 000).
 */
#include "tinyaot_nn.h"

int32_t tinyaot_fully_connected_s8_get_buffer_size(const tinyaot_dims *filter_dims)
{
    (void)filter_dims;
    return 0;
}

static int32_t row_sum_with_offset(const int8_t *x, int32_t n, int32_t off)
{
    int32_t s = 0;
    int32_t i;
    for (i = 0; i < n; i++) {
        s += x[i];
    }
    return s + n * off;
}

tinyaot_status tinyaot_fully_connected_s8(TINYAOT_FC_ARGS(int8_t))
{
    const int32_t batches = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    const int32_t in_off = fc_params->input_offset;
    const int32_t w_off = fc_params->filter_offset;
    const int32_t out_off = fc_params->output_offset;
    const int32_t act_min = fc_params->activation.min;
    const int32_t act_max = fc_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    const int32_t q_step = per_channel ? 1 : 0; /* per tensor: always index 0 */
    (void)ctx;
    (void)bias_dims;

    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c) {
        return TINYAOT_ARG_ERROR;
    }

    int32_t b = 0;
    for (; b + 1 < batches; b += 2) {
        const int8_t *xa = input + b * depth;
        const int8_t *xb = xa + depth;
        int8_t *out_a = output + b * out_c;
        int8_t *out_b = out_a + out_c;
        const int32_t corr_a = w_off ? w_off * row_sum_with_offset(xa, depth, in_off) : 0;
        const int32_t corr_b = w_off ? w_off * row_sum_with_offset(xb, depth, in_off) : 0;
        int32_t o = 0;
        for (; o + 1 < out_c; o += 2) {
            const int32_t b0 = bias ? bias[o] : 0;
            const int32_t b1 = bias ? bias[o + 1] : 0;
            int32_t acc[4];
            acc[0] = b0 + corr_a;
            acc[1] = b1 + corr_a;
            acc[2] = b0 + corr_b;
            acc[3] = b1 + corr_b;
            const int8_t *w0 = filter + o * depth;
            tinyaot_dot2x2_s8(xa, xb, w0, w0 + depth, depth, in_off, acc);
            const int32_t q0 = o * q_step;
            const int32_t q1 = (o + 1) * q_step;
            out_a[o] = tinyaot_requantize_s8(acc[0], mult[q0], shift[q0], out_off, act_min, act_max);
            out_a[o + 1] = tinyaot_requantize_s8(acc[1], mult[q1], shift[q1], out_off, act_min, act_max);
            out_b[o] = tinyaot_requantize_s8(acc[2], mult[q0], shift[q0], out_off, act_min, act_max);
            out_b[o + 1] = tinyaot_requantize_s8(acc[3], mult[q1], shift[q1], out_off, act_min, act_max);
        }
        if (o < out_c) {
            const int32_t b0 = bias ? bias[o] : 0;
            const int8_t *w0 = filter + o * depth;
            const int32_t q0 = o * q_step;
            const int32_t acc_a = tinyaot_dot_s8(xa, w0, depth, in_off, b0 + corr_a);
            const int32_t acc_b = tinyaot_dot_s8(xb, w0, depth, in_off, b0 + corr_b);
            out_a[o] = tinyaot_requantize_s8(acc_a, mult[q0], shift[q0], out_off, act_min, act_max);
            out_b[o] = tinyaot_requantize_s8(acc_b, mult[q0], shift[q0], out_off, act_min, act_max);
        }
    }
    for (; b < batches; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        const int32_t corr = w_off ? w_off * row_sum_with_offset(x, depth, in_off) : 0;
        int32_t o = 0;
        for (; o + 1 < out_c; o += 2) {
            int32_t acc0 = (bias ? bias[o] : 0) + corr;
            int32_t acc1 = (bias ? bias[o + 1] : 0) + corr;
            const int8_t *w0 = filter + o * depth;
            tinyaot_dot2_s8(x, w0, w0 + depth, depth, in_off, &acc0, &acc1);
            const int32_t q0 = o * q_step;
            const int32_t q1 = (o + 1) * q_step;
            out[o] = tinyaot_requantize_s8(acc0, mult[q0], shift[q0], out_off, act_min, act_max);
            out[o + 1] = tinyaot_requantize_s8(acc1, mult[q1], shift[q1], out_off, act_min, act_max);
        }
        if (o < out_c) {
            const int32_t q0 = o * q_step;
            const int32_t acc = tinyaot_dot_s8(x, filter + o * depth, depth, in_off, (bias ? bias[o] : 0) + corr);
            out[o] = tinyaot_requantize_s8(acc, mult[q0], shift[q0], out_off, act_min, act_max);
        }
    }
    return TINYAOT_OK;
}
