/*
 * tinyaot_fully_connected_s8_fold: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * w[o, d]), with
 * the input offset folded into the bias at compile time and the weights pre-arranged for a four-channel block.
 *
 * Same arguments and result as tinyaot_fully_connected_s8 with filter_offset 0 (the variant is offered only then),
 * except for two compile-time transformations of the constants (tinyaot/ops/fully_connected.py):
 *
 *   - bias[o] is the folded bias bias[o] + input_offset * sum_d w[o, d], so the inner loop multiplies raw int8
 *     inputs by raw int8 weights: both unpack the same way (SXTB16 for bytes 0 and 2, SXTB16 ROR 8 for bytes 1 and
 *     3) and one SMLAD does two multiply-adds, with no per-value offset addition and no scratch.
 *   - filter: per block of four output channels (4c .. 4c+3), per group of four input positions the four bytes of
 *     each of the four channels in turn, then the depth % 4 last values of each channel in turn. The channels after
 *     the last whole block keep their rows in order. Same bytes as [out, depth], only reordered.
 *
 * One pass over a group of four inputs loads one input word and four filter words and does 16 multiply-adds.
 * Overflow: the accumulator after any subset of inputs is folded[o] + sum_{subset} x * w, at most
 * |bias| + sum|w| * (128 + |input_offset|) in magnitude: the bound compress/bounds.py checks against int32.
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

int32_t tinyaot_fully_connected_s8_fold_get_buffer_size(const tinyaot_dims *filter_dims)
{
    (void)filter_dims;
    return 0;
}

/* acc[c] += x . filter row c, for the block of four channels at w (layout above). */
static inline void fc_fold_mac_4(const int8_t *x, const int8_t *w, int32_t depth, int32_t acc[4])
{
    int32_t a0 = acc[0];
    int32_t a1 = acc[1];
    int32_t a2 = acc[2];
    int32_t a3 = acc[3];
    int32_t i;
#if TINYAOT_USE_DSP
    for (i = depth >> 2; i > 0; i--) {
        const int32_t xv = tinyaot_read_s8x4(x);
        const int32_t x02 = __sxtb16(xv);
        const int32_t x13 = tinyaot_sxtb16_ror8(xv);
        int32_t wv = tinyaot_read_s8x4(w);
        a0 = __smlad(x02, __sxtb16(wv), a0);
        a0 = __smlad(x13, tinyaot_sxtb16_ror8(wv), a0);
        wv = tinyaot_read_s8x4(w + 4);
        a1 = __smlad(x02, __sxtb16(wv), a1);
        a1 = __smlad(x13, tinyaot_sxtb16_ror8(wv), a1);
        wv = tinyaot_read_s8x4(w + 8);
        a2 = __smlad(x02, __sxtb16(wv), a2);
        a2 = __smlad(x13, tinyaot_sxtb16_ror8(wv), a2);
        wv = tinyaot_read_s8x4(w + 12);
        a3 = __smlad(x02, __sxtb16(wv), a3);
        a3 = __smlad(x13, tinyaot_sxtb16_ror8(wv), a3);
        x += 4;
        w += 16;
    }
#else
    for (i = depth >> 2; i > 0; i--) {
        const int32_t x0 = x[0];
        const int32_t x1 = x[1];
        const int32_t x2 = x[2];
        const int32_t x3 = x[3];
        /* each sum of four products is below 2^16 in magnitude */
        a0 += x0 * w[0] + x1 * w[1] + x2 * w[2] + x3 * w[3];
        a1 += x0 * w[4] + x1 * w[5] + x2 * w[6] + x3 * w[7];
        a2 += x0 * w[8] + x1 * w[9] + x2 * w[10] + x3 * w[11];
        a3 += x0 * w[12] + x1 * w[13] + x2 * w[14] + x3 * w[15];
        x += 4;
        w += 16;
    }
#endif
    {
        const int32_t t = depth & 3;
        for (i = 0; i < t; i++) {
            const int32_t xi = x[i];
            a0 += xi * w[i];
            a1 += xi * w[t + i];
            a2 += xi * w[2 * t + i];
            a3 += xi * w[3 * t + i];
        }
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* acc + x . w over n values in order. */
static int32_t fc_fold_dot(const int8_t *x, const int8_t *w, int32_t n, int32_t acc)
{
    int32_t i = 0;
#if TINYAOT_USE_DSP
    for (; i + 4 <= n; i += 4) {
        const int32_t xv = tinyaot_read_s8x4(x + i);
        const int32_t wv = tinyaot_read_s8x4(w + i);
        acc = __smlad(__sxtb16(xv), __sxtb16(wv), acc);
        acc = __smlad(tinyaot_sxtb16_ror8(xv), tinyaot_sxtb16_ror8(wv), acc);
    }
#endif
    for (; i < n; i++) {
        acc += (int32_t)x[i] * w[i];
    }
    return acc;
}

int tinyaot_fully_connected_s8_fold(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                    const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                    const tinyaot_dims *input_dims, const int8_t *input,
                                    const tinyaot_dims *filter_dims, const int8_t *filter,
                                    const tinyaot_dims *bias_dims, const int32_t *bias,
                                    const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t batches = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    const int32_t out_off = fc_params->output_offset;
    const int32_t act_min = fc_params->activation.min;
    const int32_t act_max = fc_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    const int32_t q_step = per_channel ? 1 : 0; /* per tensor: always index 0 */
    (void)ctx;
    (void)bias_dims;

    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c ||
        fc_params->filter_offset != 0) {
        return -1;
    }
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        const int8_t *w = filter;
        int32_t o = 0;
        for (; o + 3 < out_c; o += 4, w += 4 * depth) {
            int32_t acc[4];
            int32_t c;
            for (c = 0; c < 4; c++) {
                acc[c] = bias ? bias[o + c] : 0;
            }
            fc_fold_mac_4(x, w, depth, acc);
            for (c = 0; c < 4; c++) {
                const int32_t qi = (o + c) * q_step;
                out[o + c] = tinyaot_fold_requantize_s8(acc[c], mult[qi], shift[qi], out_off, act_min, act_max);
            }
        }
        for (; o < out_c; o++, w += depth) {
            const int32_t qi = o * q_step;
            const int32_t acc = fc_fold_dot(x, w, depth, bias ? bias[o] : 0);
            out[o] = tinyaot_fold_requantize_s8(acc, mult[qi], shift[qi], out_off, act_min, act_max);
        }
    }
    return 0;
}
