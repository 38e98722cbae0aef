/*
 * tinyaot_fully_connected_s8_fold: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * w[o, d]), with
 * the input offset folded into the bias at compile time and the weights pre-arranged for an eight-channel block.
 *
 * Same arguments and result as tinyaot_fully_connected_s8 with filter_offset 0 (the variant is offered only then),
 * except for two compile-time transformations of the constants (tinyaot/ops/fully_connected.py):
 *
 *   - bias[o] is the folded bias bias[o] + input_offset * sum_d w[o, d], so the inner loop multiplies raw int8
 *     inputs by raw int8 weights: both unpack the same way (SXTB16 for bytes 0 and 2, SXTB16 ROR 8 for bytes 1 and
 *     3) and one SMLAD does two multiply-adds, with no per-value offset addition and no scratch.
 *   - filter (tinyaot/ops/fully_connected.py interleave_fc): per block of eight output channels, per group of four
 *     input positions the four bytes of each of the eight channels in turn (32 bytes), then the depth % 4 last
 *     values of each channel in turn; then, if four or more channels are left, one block of four laid out the same
 *     way (16 bytes per group); the last out % 4 channels keep their rows in order. Same bytes as [out, depth],
 *     only reordered.
 *   - quant_params->multiplier holds {mult, radd} per channel (per tensor: one pair) and quant_params->shift the
 *     right shifts e, four per word: see tinyaot_fold_support.h (output_offset is inside radd).
 *
 * One pass of the eight-channel block over a group of four inputs loads one input word and eight filter words and
 * does 32 multiply-adds (on GCC with DSP an inline-assembly loop, as GCC 12 spills in the C version; the C loop
 * computes the same sums and is used elsewhere: other compilers, -O0, TINYAOT_FOLD_NO_ASM).
 * Overflow: the accumulator after any subset of inputs is folded[o] + sum_{subset} x * w, at most
 * B[o] = |bias| + sum|w| * (128 + |input_offset|) < 2^30 in magnitude (checked by the compiler before it offers
 * this variant, see tinyaot_fold_support.h).
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

int32_t tinyaot_fully_connected_s8_fold_get_buffer_size(const tinyaot_dims *filter_dims)
{
    (void)filter_dims;
    return 0;
}

#if TINYAOT_FOLD_ASM /* the eight-channel block in inline assembly (tinyaot_fold_support.h says when) */
/* One channel c (1..7) of a group: filter word at w + 4c, lanes (0, 2) then (1, 3). */
#define FC_FOLD_CH(c, off)                                                                                             \
    "ldr %[t], [%[w], #" off "]\n\t"                                                                                   \
    "sxtb16 %[u], %[t]\n\t"                                                                                            \
    "smlad %[a" #c "], %[x02], %[u], %[a" #c "]\n\t"                                                                   \
    "sxtb16 %[t], %[t], ror #8\n\t"                                                                                    \
    "smlad %[a" #c "], %[x13], %[t], %[a" #c "]\n\t"
/* One group of four inputs of the eight-channel block: x advances by 4, w by 32. */
#define FC_FOLD_STEP                                                                                                   \
    "ldr %[x13], [%[x]], #4\n\t"                                                                                       \
    "sxtb16 %[x02], %[x13]\n\t"                                                                                        \
    "sxtb16 %[x13], %[x13], ror #8\n\t"                                                                                \
    FC_FOLD_CH(1, "4") FC_FOLD_CH(2, "8") FC_FOLD_CH(3, "12") FC_FOLD_CH(4, "16") FC_FOLD_CH(5, "20")              \
    FC_FOLD_CH(6, "24") FC_FOLD_CH(7, "28")                                                                          \
    "ldr %[t], [%[w]], #32\n\t"                                                                                        \
    "sxtb16 %[u], %[t]\n\t"                                                                                            \
    "smlad %[a0], %[x02], %[u], %[a0]\n\t"                                                                             \
    "sxtb16 %[t], %[t], ror #8\n\t"                                                                                    \
    "smlad %[a0], %[x13], %[t], %[a0]\n\t"
#define FC_FOLD_OPERANDS                                                                                               \
    [a0] "+r"(a[0]), [a1] "+r"(a[1]), [a2] "+r"(a[2]), [a3] "+r"(a[3]), [a4] "+r"(a[4]), [a5] "+r"(a[5]),            \
        [a6] "+r"(a[6]), [a7] "+r"(a[7]), [x] "+r"(x), [w] "+r"(w), [x02] "=&r"(x02), [x13] "=&r"(x13),              \
        [t] "=&r"(t), [u] "=&r"(u)
#endif

/* The block of eight channels at w (layout above): acc[c] += x . filter row c over depth values; returns the end
   of the block. Never inlined: the assembly needs 14 registers (r7 too: no frame pointer), which GCC finds only
   in a small function. */
#if TINYAOT_FOLD_ASM
TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER
#endif
static const int8_t *fc_fold_mac_8(const int8_t *x, const int8_t *w, int32_t depth, int32_t acc[8])
{
    const int32_t n4 = depth >> 2;
    int32_t i;
#if TINYAOT_FOLD_ASM
    /* 14 registers: 8 accumulators, 2 pointers, 4 temporaries; per group 43 instructions for 32 multiply-adds,
       two groups per loop pass whose end is compared from memory (3 more per pass). */
    {
        int32_t a[8];
        int32_t x02, x13, t, u;
        for (i = 0; i < 8; i++) {
            a[i] = acc[i];
        }
        if (n4 & 1) {
            __asm__(FC_FOLD_STEP : FC_FOLD_OPERANDS : : "memory");
        }
        if (n4 >= 2) {
            const int8_t *const end = x + 4 * (n4 & ~1);
            __asm__("1:\n\t" FC_FOLD_STEP FC_FOLD_STEP
                    "ldr %[t], %[end]\n\t"
                    "cmp %[x], %[t]\n\t"
                    "bne 1b\n\t"
                    : FC_FOLD_OPERANDS
                    : [end] "m"(end)
                    : "cc", "memory");
        }
        for (i = 0; i < 8; i++) {
            acc[i] = a[i];
        }
    }
#else
    {
        int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
        int32_t a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
        for (i = n4; i > 0; i--) {
            int32_t j;
            for (j = 0; j < 4; j++) {
                /* one input against the eight channels: products of magnitude at most 128 * 128 */
                const int32_t v = x[j];
                a0 += v * w[j];
                a1 += v * w[4 + j];
                a2 += v * w[8 + j];
                a3 += v * w[12 + j];
                a4 += v * w[16 + j];
                a5 += v * w[20 + j];
                a6 += v * w[24 + j];
                a7 += v * w[28 + j];
            }
            x += 4;
            w += 32;
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
        acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
    }
#endif
    {
        const int32_t t4 = depth & 3;
        int32_t c;
        for (i = 0; i < t4; i++) {
            const int32_t v = x[i];
            for (c = 0; c < 8; c++) {
                acc[c] += v * w[c * t4 + i];
            }
        }
        return w + 8 * t4;
    }
}

/* The block of four channels at w (layout above): acc[c] += x . filter row c over depth values; returns the end
   of the block. Inlined into the caller so the accumulators stay in registers. */
static TINYAOT_ALWAYS_INLINE const int8_t *fc_fold_mac_4(const int8_t *x, const int8_t *w, int32_t depth, int32_t *acc0,
                                          int32_t *acc1, int32_t *acc2, int32_t *acc3)
{
    int32_t a0 = *acc0;
    int32_t a1 = *acc1;
    int32_t a2 = *acc2;
    int32_t a3 = *acc3;
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
        w += 4 * t;
    }
    *acc0 = a0;
    *acc1 = a1;
    *acc2 = a2;
    *acc3 = a3;
    return w;
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

tinyaot_status tinyaot_fully_connected_s8_fold(TINYAOT_FC_ARGS(int8_t))
{
    const int32_t batches = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    const int32_t act_min = fc_params->activation.min;
    const int32_t act_max = fc_params->activation.max;
    const int32_t *mr = quant_params->multiplier; /* {mult, radd} pairs */
    const int32_t *e = quant_params->shift; /* four per word (tinyaot_fold_e) */
    const int32_t q_step = per_channel ? 1 : 0; /* per tensor: always index 0 */
    (void)ctx;
    (void)bias_dims;

    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c ||
        fc_params->filter_offset != 0 || bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    const int full = (act_min == -128 && act_max == 127);
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        const int8_t *w = filter;
        int32_t o = 0;
        for (; o + 7 < out_c; o += 8) {
            int32_t acc[8];
            int32_t c;
            for (c = 0; c < 8; c++) {
                acc[c] = bias[o + c];
            }
            w = fc_fold_mac_8(x, w, depth, acc);
            /* the table into locals before the stores (an int8 store may alias it) */
            for (c = 0; c < 8; c++) {
                const int32_t qi = (o + c) * q_step;
                const int32_t r = tinyaot_fold_scale(acc[c], mr[2 * qi], mr[2 * qi + 1], tinyaot_fold_e(e, qi));
                out[o + c] = (int8_t)(full ? tinyaot_fold_sat8(r)
                                           : (r < act_min ? act_min : (r > act_max ? act_max : r)));
            }
        }
        if (o + 3 < out_c) { /* at most one block of four */
            int32_t acc[4];
            int32_t c;
            acc[0] = bias[o];
            acc[1] = bias[o + 1];
            acc[2] = bias[o + 2];
            acc[3] = bias[o + 3];
            w = fc_fold_mac_4(x, w, depth, &acc[0], &acc[1], &acc[2], &acc[3]);
            /* the table into locals before the stores (an int8 store may alias it) */
            for (c = 0; c < 4; c++) {
                const int32_t qi = (o + c) * q_step;
                const int32_t r = tinyaot_fold_scale(acc[c], mr[2 * qi], mr[2 * qi + 1], tinyaot_fold_e(e, qi));
                out[o + c] = (int8_t)(full ? tinyaot_fold_sat8(r)
                                           : (r < act_min ? act_min : (r > act_max ? act_max : r)));
            }
            o += 4;
        }
        for (; o < out_c; o++, w += depth) {
            const int32_t qi = o * q_step;
            const int32_t acc = fc_fold_dot(x, w, depth, bias[o]);
            out[o] = tinyaot_fold_rq(acc, mr + 2 * qi, tinyaot_fold_e(e, qi), act_min, act_max);
        }
    }
    return TINYAOT_OK;
}
