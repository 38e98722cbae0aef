/*
 * tinyaot_fully_connected_s5_fold: out[b, o] = requant(bias[o] + sum_d (in[b, d] + input_offset) * w[o, d]) over
 * 5-bit weights w in [-15, 15] (storage "int5"), unpacked in registers by masks, with the input offset folded into
 * the bias (tinyaot/ops/common.py fold_input_offset) as in tinyaot_fully_connected_s4_fold.c, whose structure this
 * kernel keeps.
 *
 * Weights (tinyaot/ops/decoded.py s5_fold_layout): each weight stored biased, u = w + 16 in [1, 31], as a 5-bit
 * field; per block of four output channels (the out_ch % 4 last rows padded with w = 0), per group of twelve
 * inputs, two words per channel (first word A of the four channels, then their words B), each holding three pairs
 * of fields: pair p (p = 0, 1, 2) at bits 5p .. 5p+4 and 16+5p .. 20+5p. The word shifted right by 5p and masked
 * with 0x001F001F holds pair p as two 16-bit lanes: one AND per pair of weights, as in the int4 kernel, but a word
 * load per three pairs instead of four (5.33 bits per weight). The pairs meet the inputs as SXTB16 unpacks them:
 * word A against (x0, x2), (x1, x3), (x4, x6); word B against (x5, x7), (x8, x10), (x9, x11). The bias of 16 is
 * taken back once per row: sum u * x = sum w * x + 16 * sum x, so each channel starts from folded[o] - 16 * S.
 * Depth past a multiple of 12 is padded with u = 16 and x = 0.
 *
 * Same arguments as tinyaot_fully_connected_s4_fold (filter_offset 0; quant_params the fold requantization table,
 * or for tinyaot_fully_connected_s5_fold_rq one multiplier and shift per channel; bias the folded bias). No scratch.
 * Per block of four channels and group of twelve inputs: the inputs' six lane pairs (3 loads, 6 SXTB16), per
 * channel 2 loads, 6 AND, 6 SMLAD: 65 instructions and the loop for 48 multiply-adds (the int4 kernel: 45 per 32).
 * Registers as in the int4 kernel (13): the pairs of word A are unpacked first, then the third input word replaces
 * the two pairs word A alone used.
 *
 * Overflow: the accumulator after any subset of groups is folded[o] - 16 * S + sum_{subset} u * x, of magnitude at
 * most |bias| + sum|w| * (128 + |input_offset|) + 16 * 128 * depth12 + 31 * 128 * depth12, which the compiler checks
 * against 2^31 before it offers this kernel (decoded.s5_fold_bound; depth12: the depth rounded up to a multiple of
 * 12). Each SMLAD product is at most 31 * 128 in magnitude.
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

#define S5_ASM TINYAOT_FOLD_ASM

/* The six lane pairs of twelve int8 inputs as SXTB16 unpacks them: (x0, x2), (x1, x3), (x4, x6), (x5, x7),
   (x8, x10), (x9, x11). */
static inline void s5_pairs(const int8_t *x, int32_t p[6])
{
    int32_t i;
    for (i = 0; i < 3; i++) {
#if TINYAOT_USE_DSP
        const int32_t v = tinyaot_read_s8x4(x + 4 * i);
        p[2 * i] = __sxtb16(v);
        p[2 * i + 1] = tinyaot_sxtb16_ror8(v);
#else
        const int8_t *q = x + 4 * i;
        p[2 * i] = (int32_t)(((uint32_t)(int32_t)q[0] & 0xFFFFu) | ((uint32_t)(int32_t)q[2] << 16));
        p[2 * i + 1] = (int32_t)(((uint32_t)(int32_t)q[1] & 0xFFFFu) | ((uint32_t)(int32_t)q[3] << 16));
#endif
    }
}

/* acc + the six products of a word against three lane pairs: the word's pair j (masked after a shift of 5j) holds
   the weights of lane pair pa[j]. */
static inline int32_t s5_mac6(uint32_t word, int32_t p0, int32_t p1, int32_t p2, int32_t acc)
{
#if TINYAOT_USE_DSP
    acc = __smlad((int32_t)(word & 0x001F001Fu), p0, acc);
    acc = __smlad((int32_t)((word >> 5) & 0x001F001Fu), p1, acc);
    return __smlad((int32_t)((word >> 10) & 0x001F001Fu), p2, acc);
#else
    const int32_t p[3] = {p0, p1, p2};
    int32_t j;
    for (j = 0; j < 3; j++) {
        const int32_t lo = (int16_t)(p[j] & 0xFFFF);
        const int32_t hi = (int16_t)((uint32_t)p[j] >> 16);
        acc += (int32_t)((word >> (5 * j)) & 31u) * lo + (int32_t)((word >> (5 * j + 16)) & 31u) * hi;
    }
    return acc;
#endif
}

/* One group of twelve inputs at x against the four channels' eight words at w. */
static TINYAOT_ALWAYS_INLINE void s5_group(const int8_t *x, const uint32_t *w, int32_t acc[4])
{
    int32_t p[6];
    int32_t c;
    s5_pairs(x, p);
    for (c = 0; c < 4; c++) {
        acc[c] = s5_mac6(w[c], p[0], p[1], p[2], acc[c]);
        acc[c] = s5_mac6(w[4 + c], p[3], p[4], p[5], acc[c]);
    }
}

#if S5_ASM
/* One channel's word at w + off against the lane pairs in registers pa, pb, pc: three AND and three SMLAD. */
#define S5_CH(ch, off, pa, pb, pc)                                                                                     \
    "ldr %[t], [%[w], #" off "]\n\t"                                                                                   \
    "and %[u], %[t], %[m]\n\t"                                                                                         \
    "smlad %[a" #ch "], %[u], %[" pa "], %[a" #ch "]\n\t"                                                              \
    "and %[u], %[m], %[t], lsr #5\n\t"                                                                                 \
    "smlad %[a" #ch "], %[u], %[" pb "], %[a" #ch "]\n\t"                                                              \
    "and %[u], %[m], %[t], lsr #10\n\t"                                                                                \
    "smlad %[a" #ch "], %[u], %[" pc "], %[a" #ch "]\n\t"
/* One group of twelve inputs: x advances by 12, w by 32. Words A against (x0, x2), (x1, x3), (x4, x6) in p0, p1,
   p2; then x8..x11 replace p0, p1, and words B run against (x5, x7), (x8, x10), (x9, x11) in p3, p0, p1. */
#define S5_GROUP                                                                                                       \
    "ldr %[t], [%[x]], #4\n\t"                                                                                        \
    "sxtb16 %[p0], %[t]\n\t"                                                                                          \
    "sxtb16 %[p1], %[t], ror #8\n\t"                                                                                  \
    "ldr %[t], [%[x]], #4\n\t"                                                                                        \
    "sxtb16 %[p2], %[t]\n\t"                                                                                          \
    "sxtb16 %[p3], %[t], ror #8\n\t"                                                                                  \
    S5_CH(0, "0", "p0", "p1", "p2") S5_CH(1, "4", "p0", "p1", "p2") S5_CH(2, "8", "p0", "p1", "p2")                  \
    S5_CH(3, "12", "p0", "p1", "p2")                                                                                   \
    "ldr %[t], [%[x]], #4\n\t"                                                                                        \
    "sxtb16 %[p0], %[t]\n\t"                                                                                          \
    "sxtb16 %[p1], %[t], ror #8\n\t"                                                                                  \
    S5_CH(0, "16", "p3", "p0", "p1") S5_CH(1, "20", "p3", "p0", "p1") S5_CH(2, "24", "p3", "p0", "p1")               \
    S5_CH(3, "28", "p3", "p0", "p1")                                                                                   \
    "add %[w], %[w], #32\n\t"
#endif

/* The group loop (s5_groups) and the store (s5_store): tinyaot_fc_fold_groups.h, written once for this kernel and the
   int4 one. */
#define TINYAOT_FCF_GROUPS s5_groups
#define TINYAOT_FCF_STORE s5_store
#define TINYAOT_FCF_INPUTS 12
#define TINYAOT_FCF_WORDS 8
#define TINYAOT_FCF_GROUP s5_group
#define TINYAOT_FCF_MASK 0x001F001Fu
#define TINYAOT_FCF_GROUP_ASM S5_GROUP
#include "tinyaot_fc_fold_groups.h"

static tinyaot_status s5_layer(const tinyaot_fc_params *fc_params, const tinyaot_per_channel_quant_params *quant_params,
                               int fold_table, const tinyaot_dims *input_dims, const int8_t *input,
                               const tinyaot_dims *filter_dims, const uint32_t *filter, const int32_t *bias,
                               const tinyaot_dims *output_dims, int8_t *output)
{
    const int32_t rows = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = output_dims->c;
    const int32_t full = depth / 12;
    const int32_t rest = depth - 12 * full;
    int32_t b;
    if (fc_params->filter_offset != 0 || bias == NULL || filter == NULL || depth <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    for (b = 0; b < rows; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        int8_t tail[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* the last partial group of inputs, zero-padded */
        const uint32_t *w = filter;
        int32_t sum = 0;
        int32_t o, i;
        for (i = 0; i < depth; i++) {
            sum += x[i];
        }
        for (i = 0; i < rest; i++) {
            tail[i] = x[12 * full + i];
        }
        for (o = 0; o < out_c; o += 4) {
            const int32_t nc = out_c - o < 4 ? out_c - o : 4;
            int32_t acc[4];
            int32_t c;
            for (c = 0; c < 4; c++) {
                acc[c] = (c < nc ? bias[o + c] : 0) - 16 * sum;
            }
            if (full > 0) {
                s5_groups(x, &w, full, acc);
            }
            if (rest > 0) { /* the last partial group, from the zero-padded copy (the same loop: ad_fc_autoencoder's
                               depths 640, 128 and 8 all end in one) */
                s5_groups(tail, &w, 1, acc);
            }
            s5_store(acc, quant_params->multiplier, quant_params->shift, fold_table, o, nc,
                     fc_params->output_offset, fc_params->activation.min, fc_params->activation.max, out);
        }
    }
    return TINYAOT_OK;
}

/* quant_params: the fold requantization table (tinyaot_fold_support.h). */
tinyaot_status tinyaot_fully_connected_s5_fold(TINYAOT_FC_ARGS(uint32_t))
{
    (void)ctx, (void)per_channel, (void)bias_dims;
    return s5_layer(fc_params, quant_params, 1, input_dims, input, filter_dims, filter, bias, output_dims, output);
}

/* quant_params: one multiplier and shift per channel (where the fold table is not exact). */
tinyaot_status tinyaot_fully_connected_s5_fold_rq(TINYAOT_FC_ARGS(uint32_t))
{
    (void)ctx, (void)per_channel, (void)bias_dims;
    return s5_layer(fc_params, quant_params, 0, input_dims, input, filter_dims, filter, bias, output_dims, output);
}
