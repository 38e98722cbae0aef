/*
 * tinyaot_fully_connected_s4_fold: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * w[o, d]) over
 * int4 weights w in [-7, 7], unpacked in registers by masks instead of decoded value by value, with the input offset
 * folded into the bias (tinyaot/ops/common.py fold_input_offset) as in tinyaot_fully_connected_s8_fold.c.
 *
 * Weights (tinyaot/ops/decoded.py s4_fold_layout): each weight stored biased, u = w + 8 in [1, 15], as a nibble; per
 * block of four output channels (the out_ch % 4 last rows padded with w = 0), per group of eight inputs, one word
 * per channel holding its eight nibbles. A word shifted right by 4j and masked with 0x000F000F holds nibbles j and
 * j + 4 as two 16-bit lanes: one AND per pair of weights, the count of instructions SXTB16 spends on int8 weights,
 * and one SMLAD against the pair of inputs SXTB16 unpacks from the group's two input words: (x0, x2), (x1, x3),
 * (x4, x6), (x5, x7) for j = 0..3, so nibbles 0..7 hold the weights of inputs 0, 1, 4, 5, 2, 3, 6, 7. The bias of 8 is taken back once per row: sum u * x = sum w * x + 8 * sum x,
 * so each channel starts from folded[o] - 8 * sum_d x[b, d]. Depth past a multiple of 8 is padded with u = 8 and
 * x = 0.
 *
 * Same arguments as tinyaot_fully_connected_s8_fold (filter_offset 0; quant_params the fold requantization table,
 * or for tinyaot_fully_connected_s4_fold_rq one multiplier and shift per channel; bias the folded bias), the filter
 * as above. No scratch. Per block of four channels and group of eight inputs: the
 * inputs' four lane pairs (2 loads, 4 SXTB16), then per channel 1 load, 4 AND, 4 SMLAD: 45 instructions with the
 * loop for 32 multiply-adds (the int8 fold kernel: 43 per 32).
 *
 * Overflow: the accumulator after any subset of groups is folded[o] - 8 * S + sum_{subset} u * x, of magnitude at most
 * |bias| + sum|w| * (128 + |input_offset|) + 8 * 128 * depth8 + 15 * 128 * depth8, which the compiler checks against
 * 2^31 before it offers this kernel (depth8: the depth rounded up to a multiple of 8).
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

/* The groups in inline assembly under the fold kernels' conditions and switch (TINYAOT_FOLD_ASM,
   tinyaot_fold_support.h). */
#define S4_ASM TINYAOT_FOLD_ASM

/* The four lane pairs of eight int8 inputs as SXTB16 unpacks them: (x0, x2), (x1, x3), (x4, x6), (x5, x7). */
static inline void s4_pairs(const int8_t *x, int32_t p[4])
{
#if TINYAOT_USE_DSP
    const int32_t lo = tinyaot_read_s8x4(x);
    const int32_t hi = tinyaot_read_s8x4(x + 4);
    p[0] = __sxtb16(lo);
    p[1] = tinyaot_sxtb16_ror8(lo);
    p[2] = __sxtb16(hi);
    p[3] = tinyaot_sxtb16_ror8(hi);
#else
    p[0] = (int32_t)(((uint32_t)(int32_t)x[0] & 0xFFFFu) | ((uint32_t)(int32_t)x[2] << 16));
    p[1] = (int32_t)(((uint32_t)(int32_t)x[1] & 0xFFFFu) | ((uint32_t)(int32_t)x[3] << 16));
    p[2] = (int32_t)(((uint32_t)(int32_t)x[4] & 0xFFFFu) | ((uint32_t)(int32_t)x[6] << 16));
    p[3] = (int32_t)(((uint32_t)(int32_t)x[5] & 0xFFFFu) | ((uint32_t)(int32_t)x[7] << 16));
#endif
}

/* acc + the eight products of a channel's word against the four lane pairs: the word's nibbles j and j + 4 (masked
   after a shift of 4j) are the weights of lane pair j. */
static inline int32_t s4_mac8(uint32_t word, const int32_t p[4], int32_t acc)
{
#if TINYAOT_USE_DSP
    acc = __smlad((int32_t)(word & 0x000F000Fu), p[0], acc);
    acc = __smlad((int32_t)((word >> 4) & 0x000F000Fu), p[1], acc);
    acc = __smlad((int32_t)((word >> 8) & 0x000F000Fu), p[2], acc);
    return __smlad((int32_t)((word >> 12) & 0x000F000Fu), p[3], acc);
#else
    int32_t j;
    for (j = 0; j < 4; j++) {
        const int32_t lo = (int16_t)(p[j] & 0xFFFF);
        const int32_t hi = (int16_t)((uint32_t)p[j] >> 16);
        acc += (int32_t)((word >> (4 * j)) & 15u) * lo + (int32_t)((word >> (4 * j + 16)) & 15u) * hi;
    }
    return acc;
#endif
}

/* One group of eight inputs at x against the four channels' words at w. */
static TINYAOT_ALWAYS_INLINE void s4_group(const int8_t *x, const uint32_t *w, int32_t acc[4])
{
    int32_t p[4];
    s4_pairs(x, p);
    acc[0] = s4_mac8(w[0], p, acc[0]);
    acc[1] = s4_mac8(w[1], p, acc[1]);
    acc[2] = s4_mac8(w[2], p, acc[2]);
    acc[3] = s4_mac8(w[3], p, acc[3]);
}

#if S4_ASM
/* One channel of a group: its word at w + off, four AND and four SMLAD against the lane pairs. */
#define S4_CH(ch, off)                                                                                                 \
    "ldr %[t], [%[w], #" off "]\n\t"                                                                                   \
    "and %[u], %[t], %[m]\n\t"                                                                                         \
    "smlad %[a" #ch "], %[u], %[p0], %[a" #ch "]\n\t"                                                                  \
    "and %[u], %[m], %[t], lsr #4\n\t"                                                                                 \
    "smlad %[a" #ch "], %[u], %[p1], %[a" #ch "]\n\t"                                                                  \
    "and %[u], %[m], %[t], lsr #8\n\t"                                                                                 \
    "smlad %[a" #ch "], %[u], %[p2], %[a" #ch "]\n\t"                                                                  \
    "and %[u], %[m], %[t], lsr #12\n\t"                                                                                \
    "smlad %[a" #ch "], %[u], %[p3], %[a" #ch "]\n\t"
/* One group of eight inputs: x advances by 8, w by 16. */
#define S4_GROUP                                                                                                       \
    "ldr %[t], [%[x]], #4\n\t"                                                                                        \
    "sxtb16 %[p0], %[t]\n\t"                                                                                          \
    "sxtb16 %[p1], %[t], ror #8\n\t"                                                                                  \
    "ldr %[t], [%[x]], #4\n\t"                                                                                        \
    "sxtb16 %[p2], %[t]\n\t"                                                                                          \
    "sxtb16 %[p3], %[t], ror #8\n\t"                                                                                  \
    S4_CH(0, "0") S4_CH(1, "4") S4_CH(2, "8") S4_CH(3, "12")                                                           \
    "add %[w], %[w], #16\n\t"
#endif

/* The group loop (s4_groups) and the store (s4_store): tinyaot_fc_fold_groups.h, written once for this kernel and the
   int5 one. */
#define TINYAOT_FCF_GROUPS s4_groups
#define TINYAOT_FCF_STORE s4_store
#define TINYAOT_FCF_INPUTS 8
#define TINYAOT_FCF_WORDS 4
#define TINYAOT_FCF_GROUP s4_group
#define TINYAOT_FCF_MASK 0x000F000Fu
#define TINYAOT_FCF_GROUP_ASM S4_GROUP
#include "tinyaot_fc_fold_groups.h"

static tinyaot_status s4_layer(const tinyaot_fc_params *fc_params, const tinyaot_per_channel_quant_params *quant_params,
                               int fold_table, const tinyaot_dims *input_dims, const int8_t *input,
                               const tinyaot_dims *filter_dims, const uint32_t *filter, const int32_t *bias,
                               const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t rows = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = output_dims->c;
    const int32_t groups = (depth + 7) >> 3;
    const int32_t full = depth >> 3;
    int32_t b;
    if (fc_params->filter_offset != 0 || bias == NULL || filter == NULL || depth <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    for (b = 0; b < rows; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        int8_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* the last partial group of inputs, zero-padded */
        const uint32_t *w = filter;
        int32_t sum = 0;
        int32_t o, i;
        for (i = 0; i < depth; i++) {
            sum += x[i];
        }
        for (i = 0; i < depth - 8 * full; i++) {
            tail[i] = x[8 * full + i];
        }
        for (o = 0; o < out_c; o += 4) {
            const int32_t nc = out_c - o < 4 ? out_c - o : 4;
            int32_t acc[4];
            int32_t c;
            for (c = 0; c < 4; c++) {
                acc[c] = (c < nc ? bias[o + c] : 0) - 8 * sum;
            }
            if (full > 0) {
                s4_groups(x, &w, full, acc);
            }
            if (groups > full) { /* the last partial group, from the zero-padded copy */
                s4_group(tail, w, acc);
                w += 4;
            }
            s4_store(acc, quant_params->multiplier, quant_params->shift, fold_table, o, nc,
                     fc_params->output_offset, fc_params->activation.min, fc_params->activation.max, out);
        }
    }
    return TINYAOT_OK;
}

/* quant_params: the fold requantization table (tinyaot_fold_support.h). */
tinyaot_status tinyaot_fully_connected_s4_fold(TINYAOT_FC_ARGS(uint32_t))
{
    (void)ctx, (void)per_channel, (void)bias_dims;
    return s4_layer(fc_params, quant_params, 1, input_dims, input, filter_dims, filter, bias, output_dims, output);
}

/* quant_params: one multiplier and shift per channel (where the fold table is not exact). */
tinyaot_status tinyaot_fully_connected_s4_fold_rq(TINYAOT_FC_ARGS(uint32_t))
{
    (void)ctx, (void)per_channel, (void)bias_dims;
    return s4_layer(fc_params, quant_params, 0, input_dims, input, filter_dims, filter, bias, output_dims, output);
}
