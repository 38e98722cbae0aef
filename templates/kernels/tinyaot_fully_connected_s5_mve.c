/*
 * tinyaot_fully_connected_s5_mve: Helium fully connected on 5-bit grid weights w in [-15, 15] (storage "int5"), read
 * straight from flash as three rows in two bytes (tinyaot/ops/mve.py s5_filter): a batch-1 layer uses each weight
 * once, so nothing amortises a decode into RAM, and a decode to whole bytes per row (shifts, inserts and a mask per
 * 16 weights) costs more than the dense kernel's second load. Instead every 16-byte load feeds two VMLADAVA, as in
 * the int4 kernel (tinyaot_fully_connected_s8_nibble_mve.c), and the rows are separated after the loop.
 *
 * Layout: rows padded with w = 0 to a multiple of three, columns to k16 (k rounded up to a multiple of 16); per
 * block of three rows (A, B, C), per chunk of 16 columns, two vectors of 16 bytes, byte j of each for column j:
 *     p = uA + 32 * hB    (uA = wA + 16 in [1, 31] in bits 0..4; hB = wB >> 2 in [-4, 3], two's complement, bits 5..7)
 *     r = uC + 32 * lB    (uC = wC + 16; lB = wB & 3 in [0, 3] in bits 5..6; bit 7 clear)
 * so p and r read as int8 are those sums exactly, and wB = 4 * hB + lB. Per triple and chunk, against the 16
 * activations a: VMLADAVA of (p & 31) and of p give UA and UA + 32 * HB, of (r & 31) and of r give UC and
 * UC + 32 * LB (U. = sum a * u., H. and L. likewise). With S = sum a (once per input row): sum a * wA = UA - 16 S,
 * sum a * wC = UC - 16 S, sum a * wB = 4 * HB + LB = 4 * ((X1 - UA) >> 5) + ((X3 - UC) >> 5), exact (the
 * differences are 32 HB and 32 LB). Per block and chunk: one activation load, two weight loads, two VAND and four
 * VMLADAVA, 9 instructions and the loop's for 48 weights (dense int8: 9 for 64). Blocks of three, not six sharing
 * the activation load: VMLADAVA accumulates into even registers only, and GCC, short of eight of them, moved and
 * spilled accumulators (measured on ad_fc_autoencoder --clusters 32, mps3-an547: 116,618 instructions with blocks
 * of six). 5.33 bits per weight.
 *
 * Bias: the input offset folded in (bias[o] = b[o] + input_offset * sum w[o]), bias, multipliers and shifts padded to
 * a multiple of four (tinyaot_nn_mve.h; the predicated loads never read past n_out). The activations' last partial
 * chunk is a zeroing predicated load, so the padded columns never count.
 *
 * Overflow: VMLADAVA adds modulo 2^32. The exact values of UA, UC (|u| <= 31), X1, X3 (|p|, |r| <= 128), 16 S,
 * 32 HB and 32 LB (|32 h|, |32 l| <= 128) are each at most 128 * 128 * k16 <= 2^30 in magnitude (k16 <= 65536,
 * tinyaot/ops/mve.py NIBBLE_MAX_DEPTH), so the wrapped differences are exact; 4 * HB + LB is the row's sum, bounded
 * by compress/bounds.py like the others. The portable path (other cores, the host) decodes each weight and
 * accumulates sum a * w (at most 128 * 128 * k in magnitude) before adding the bias once.
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_gemm.h"

#if TINYAOT_USE_MVE

/* p = the 16 bytes at w, r = the 16 after them, w advanced by 32. In assembly under GCC: written as two loads and
   an addition, GCC 12 kept a second copy of w and spent two more instructions per chunk (a move and an add: 12
   instead of 10 per chunk, measured on ad_fc_autoencoder --clusters 32, mps3-an547: 108,635 instructions). */
#if TINYAOT_GCC
#define S5_LOAD2(p, r, w) __asm__("vldrb.8 %q1, [%2, #16]\n\tvldrb.8 %q0, [%2], #32" : "=w"(p), "=&w"(r), "+r"(w) : : "memory")
#else
#define S5_LOAD2(p, r, w) ((p) = vldrbq_s8((const int8_t *)(w)), (r) = vldrbq_s8((const int8_t *)(w) + 16), (w) += 32)
#endif

/* One chunk of a block (32 bytes at w) against activations xv, into the four sums a0..a3; w advances. */
#define S5_CHUNK(xv)                                                                                              \
    do {                                                                                                          \
        int8x16_t p_, r_;                                                                                         \
        S5_LOAD2(p_, r_, w);                                                                                      \
        a1 = vmladavaq_s8(a1, (xv), p_);                                                                          \
        a0 = vmladavaq_s8(a0, (xv), vandq_s8(p_, m));                                                             \
        a3 = vmladavaq_s8(a3, (xv), r_);                                                                          \
        a2 = vmladavaq_s8(a2, (xv), vandq_s8(r_, m));                                                             \
    } while (0)

/* Row B of a triple from its four sums (see the header): 4 HB + LB, the differences taken unsigned (wrapped values
   are the exact ones). */
static TINYAOT_ALWAYS_INLINE int32_t s5_middle(int32_t ua, int32_t x1, int32_t uc, int32_t x3)
{
    return 4 * ((int32_t)((uint32_t)x1 - (uint32_t)ua) >> 5) + ((int32_t)((uint32_t)x3 - (uint32_t)uc) >> 5);
}

/* The sums of rows o .. o+n-1 (n <= 3 stored) -> their outputs. */
static TINYAOT_ALWAYS_INLINE void s5_store(int32x4_t v, const tinyaot_mve_epilogue *e, int32_t o, int32_t n,
                                           int8_t *out)
{
    const mve_pred16_t p = vctp32q((uint32_t)n);
    const tinyaot_mve_block b = tinyaot_mve_block_of(e, o, p);
    tinyaot_mve_store4(v, e, &b, p, out + o);
}

/* One row of input x (k values) against every block of weights (the blocks follow each other in flash). */
static void s5_row(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const tinyaot_mve_requant *q,
                   int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int8x16_t x_tail = vldrbq_z_s8(x + (k & ~15), vctp8q((uint32_t)t));
    const int8x16_t m = vdupq_n_s8(31);
    int32_t s16 = 0; /* 16 * sum of the row's activations */
    int32_t o, n;
    const int8_t *xs = x;
    for (n = k >> 4; n > 0; n--, xs += 16) {
        s16 = vaddvaq_s8(s16, vldrbq_s8(xs));
    }
    s16 = 16 * vaddvaq_s8(s16, x_tail);
    for (o = 0; o < n_out; o += 3) {
        /* a0, a2: U - 16 S of rows A and C; a1, a3: X - 16 S (the differences X - U) */
        int32_t a0 = -s16, a1 = -s16, a2 = -s16, a3 = -s16;
        const int32_t left = n_out - o;
        xs = x;
        for (n = k >> 4; n > 0; n--) {
            const int8x16_t xv = vldrbq_s8(xs);
            xs += 16;
            S5_CHUNK(xv);
        }
        if (t > 0) {
            S5_CHUNK(x_tail);
        }
        s5_store(tinyaot_mve_lanes(a0, s5_middle(a0, a1, a2, a3), a2, 0), &e, o, left < 3 ? left : 3, out);
    }
}

#else /* portable C: the same integers */

/* The weight of row o (0 <= o < rows padded to three) at column i of the layout above (k16 columns). */
static inline int32_t s5_weight(const uint8_t *filter, int32_t k16, int32_t o, int32_t i)
{
    const uint8_t *chunk = filter + (o / 3) * 2 * k16 + (i >> 4) * 32 + (i & 15);
    const int32_t p = (int8_t)chunk[0];
    const int32_t r = (int8_t)chunk[16];
    switch (o % 3) {
    case 0:
        return (p & 31) - 16;
    case 1:
        return 4 * ((p - (p & 31)) / 32) + (r - (r & 31)) / 32; /* exact divisions: 4 hB + lB */
    default:
        return (r & 31) - 16;
    }
}

static void s5_row(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const tinyaot_mve_requant *q,
                   int8_t *out)
{
    const int32_t k16 = (k + 15) & ~15;
    int32_t o;
    for (o = 0; o < n_out; o++) {
        int32_t acc = 0;
        int32_t i;
        for (i = 0; i < k; i++) {
            acc += (int32_t)x[i] * s5_weight(w, k16, o, i);
        }
        out[o] = tinyaot_requantize_s8(acc + q->bias[o], q->mult[o], q->shift[o], q->out_off, q->act_min, q->act_max);
    }
}

#endif

tinyaot_status tinyaot_fully_connected_s5_mve(TINYAOT_FC_ARGS(uint8_t))
{
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    tinyaot_mve_requant q;
    int32_t b;
    (void)ctx;
    (void)bias_dims;
    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c ||
        fc_params->filter_offset != 0 || !per_channel || bias == NULL || filter == NULL || depth <= 0 ||
        depth > 65536) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, fc_params);
    for (b = 0; b < input_dims->n; b++) {
        s5_row(input + b * depth, depth, filter, out_c, &q, output + b * out_c);
    }
    return TINYAOT_OK;
}
