/*
 * Helpers shared by the block-sparse kernels (tinyaot_convolve_s8_block.c, tinyaot_fully_connected_s8_block.c):
 * weights in blocks of 4 output channels x 4 consecutive positions of the K-position rows, only the blocks holding
 * a nonzero weight stored (tinyaot_block_weights, tinyaot/compress/storage.py "sparse_block"). A block is the
 * fold kernels' unit of work: four channels against one word of four inputs, two SMLAD per channel and pixel, so a
 * kernel that skips the other blocks does a dense kernel's work per stored block and nothing for the rest.
 *
 * The input offset is folded into the bias at compile time (tinyaot/ops/common.py fold_input_offset), so the
 * blocks multiply raw int8 inputs: bias[o] + sum (x + input_offset) * w = folded[o] + sum x * w, a padded position
 * holding the input zero point. The inputs of two output pixels (conv: their windows; fully connected: two input
 * rows) are first copied into an int16 column in scratch, laid out for SMLAD:
 * per group of positions 4g .. 4g+3, 16 bytes (a0, a2), (b0, b2), (a1, a3), (b1, b3) of two pixels a, b (the 4x2
 * core), so that one LDRD gives both pixels' lanes (0, 2) and another their lanes (1, 3), which SXTB16 and SXTB16
 * ROR 8 unpack from a weight word. Positions past K in the last group hold 0 (their weights are 0 too). A lone
 * fully connected row whose length is a multiple of 4 needs no column: the 4x1 core reads it in place and unpacks
 * each stored block's input word itself. A stored block's deltas[b] advances the column (or input) pointer by whole
 * groups, so the inner loops have no bounds, no decoding and no branch per block.
 *
 * Overflow: the accumulator after any subset of positions is folded[o] + sum_{subset} x * w, of magnitude at most
 * B[o] = |bias| + sum|w| * (128 + |input_offset|) < 2^31 (compress/bounds.py checks it for every layer); each SMLAD
 * adds two products of magnitude at most 128 * 128.
 */
#ifndef TINYAOT_BLOCK_SUPPORT_H
#define TINYAOT_BLOCK_SUPPORT_H

#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

/* The 4x2 block-row in inline assembly under the fold kernels' conditions and switch (TINYAOT_FOLD_ASM,
   tinyaot_fold_support.h: r7 must be free of a frame pointer; -DTINYAOT_FOLD_NO_ASM turns it off). */
#define TINYAOT_BLOCK_ASM TINYAOT_FOLD_ASM

/* int16 positions of the two-pixel column per group. */
#define TINYAOT_BLOCK_COL2 8

/* Column index of position j of the pixel in slot s (0: a, 1: b) in the two-pixel layout. */
static inline int32_t tinyaot_block_pos2(int32_t j, int32_t s)
{
    return ((j >> 2) << 3) + ((j & 1) << 2) + (s << 1) + ((j >> 1) & 1);
}

/* Positions j .. j+n-1 of the pixel in slot s: src[0 .. n-1], or `fill` for each when src is NULL. Whole aligned
   groups go a word at a time on DSP cores. */
static inline void tinyaot_block_put(int16_t *col, int32_t s, int32_t j, const int8_t *src, int32_t n, int32_t fill)
{
    for (; n > 0 && (j & 3) != 0; n--, j++) {
        col[tinyaot_block_pos2(j, s)] = (int16_t)(src ? *src++ : fill);
    }
#if TINYAOT_USE_DSP
    {
        /* lanes (0, 2) and (1, 3) of a group are 4 int16 apart */
        const int32_t step = TINYAOT_BLOCK_COL2;
        const int32_t half = 4;
        int16_t *d = col + (j >> 2) * step + 2 * s;
        const int32_t ff = tinyaot_dup16(fill);
        if (src != NULL) {
            for (; n >= 4; n -= 4, j += 4, d += step, src += 4) {
                const int32_t v = tinyaot_read_s8x4(src);
                tinyaot_write_s16x2(d, __sxtb16(v));
                tinyaot_write_s16x2(d + half, tinyaot_sxtb16_ror8(v));
            }
        } else {
            for (; n >= 4; n -= 4, j += 4, d += step) {
                tinyaot_write_s16x2(d, ff);
                tinyaot_write_s16x2(d + half, ff);
            }
        }
    }
#endif
    for (; n > 0; n--, j++) {
        col[tinyaot_block_pos2(j, s)] = (int16_t)(src ? *src++ : fill);
    }
}

#if TINYAOT_BLOCK_ASM
/* One channel of a block against both pixels: the weight word at w (r1) + off unpacked by `ext` (SXTB16, with or
   without ROR 8) into lr, against the pixel-a and pixel-b lane pairs in r3, r12; accumulators a0..a3 in r4..r7,
   b0..b3 in r8..r11. */
#define TINYAOT_BLOCK_CH2(a, b, off, ext)                                                                              \
    "ldr lr, [r1" off "\n\t"                                                                                           \
    "sxtb16 lr, lr" ext "\n\t"                                                                                         \
    "smlad " a ", r3, lr, " a "\n\t"                                                                                   \
    "smlad " b ", r12, lr, " b "\n\t"
/* One stored block of the 4x2 core: the column pointer (r0) advances by the block's delta (read from r2, 16 bytes
   per group), then lanes (0, 2) of both pixels against SXTB16 of the four weight words and lanes (1, 3) against
   SXTB16 ROR 8: 37 instructions for 32 multiply-adds. */
#define TINYAOT_BLOCK_STEP2                                                                                            \
    "ldrb r3, [r2], #1\n\t"                                                                                            \
    "add r0, r0, r3, lsl #4\n\t"                                                                                       \
    "ldrd r3, r12, [r0]\n\t"                                                                                           \
    TINYAOT_BLOCK_CH2("r5", "r9", ", #4]", "") TINYAOT_BLOCK_CH2("r6", "r10", ", #8]", "")                             \
    TINYAOT_BLOCK_CH2("r7", "r11", ", #12]", "") TINYAOT_BLOCK_CH2("r4", "r8", "]", "")                                \
    "ldrd r3, r12, [r0, #8]\n\t"                                                                                       \
    TINYAOT_BLOCK_CH2("r5", "r9", ", #4]", ", ror #8") TINYAOT_BLOCK_CH2("r6", "r10", ", #8]", ", ror #8")             \
    TINYAOT_BLOCK_CH2("r7", "r11", ", #12]", ", ror #8") TINYAOT_BLOCK_CH2("r4", "r8", "], #16", ", ror #8")
#endif

/*
 * acc[c] (pixel a) and acc[4 + c] (pixel b) += the n stored blocks of one block-row (weights w, deltas d) against
 * the two-pixel column col.
 */
#if TINYAOT_BLOCK_ASM
/* The whole function in assembly (naked: no prologue of GCC's, like fold_mac_4x2_s8 in tinyaot_fold_conv.h), so
   that its 14 registers (8 accumulators, column, weight and delta pointers, 3 temporaries: r7 too) never depend on
   GCC's register allocation: it builds at every optimisation level and with -fno-omit-frame-pointer (r7 is saved
   and restored here like the other callee-saved registers). An odd block first, then two blocks per loop pass,
   whose end (col's delta pointer after the last block) is compared from the stack. */
static TINYAOT_NAKED TINYAOT_UNUSED void tinyaot_block_mac_4x2(TINYAOT_UNUSED const int16_t *col, TINYAOT_UNUSED const int8_t *w,
                                                TINYAOT_UNUSED const uint8_t *d, TINYAOT_UNUSED int32_t n,
                                                TINYAOT_UNUSED int32_t acc[8])
{
    __asm__ volatile(
        TINYAOT_NAKED_4X2_ASM("add r12, r2, r3\n\t" /* the end of the deltas */, TINYAOT_BLOCK_STEP2, "r2"));
}
#else
static TINYAOT_UNUSED void tinyaot_block_mac_4x2(const int16_t *col, const int8_t *w, const uint8_t *d, int32_t n, int32_t acc[8])
{
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int32_t b0 = acc[4], b1 = acc[5], b2 = acc[6], b3 = acc[7];
    const int16_t *c = col;
    for (; n > 0; n--, d++, w += 16) {
        c += (int32_t)*d * TINYAOT_BLOCK_COL2;
#if TINYAOT_USE_DSP
        {
            const int32_t xa02 = tinyaot_read_s16x2(c), xb02 = tinyaot_read_s16x2(c + 2);
            const int32_t xa13 = tinyaot_read_s16x2(c + 4), xb13 = tinyaot_read_s16x2(c + 6);
            int32_t t = tinyaot_read_s8x4(w);
            a0 = __smlad(xa13, tinyaot_sxtb16_ror8(t), __smlad(xa02, __sxtb16(t), a0));
            b0 = __smlad(xb13, tinyaot_sxtb16_ror8(t), __smlad(xb02, __sxtb16(t), b0));
            t = tinyaot_read_s8x4(w + 4);
            a1 = __smlad(xa13, tinyaot_sxtb16_ror8(t), __smlad(xa02, __sxtb16(t), a1));
            b1 = __smlad(xb13, tinyaot_sxtb16_ror8(t), __smlad(xb02, __sxtb16(t), b1));
            t = tinyaot_read_s8x4(w + 8);
            a2 = __smlad(xa13, tinyaot_sxtb16_ror8(t), __smlad(xa02, __sxtb16(t), a2));
            b2 = __smlad(xb13, tinyaot_sxtb16_ror8(t), __smlad(xb02, __sxtb16(t), b2));
            t = tinyaot_read_s8x4(w + 12);
            a3 = __smlad(xa13, tinyaot_sxtb16_ror8(t), __smlad(xa02, __sxtb16(t), a3));
            b3 = __smlad(xb13, tinyaot_sxtb16_ror8(t), __smlad(xb02, __sxtb16(t), b3));
        }
#else
        {
            /* column lanes (a0, a2, b0, b2, a1, a3, b1, b3); each product at most 128 * 128 in magnitude */
            const int32_t x0 = c[0], x2 = c[1], y0 = c[2], y2 = c[3], x1 = c[4], x3 = c[5], y1 = c[6], y3 = c[7];
            a0 += x0 * w[0] + x1 * w[1] + x2 * w[2] + x3 * w[3];
            a1 += x0 * w[4] + x1 * w[5] + x2 * w[6] + x3 * w[7];
            a2 += x0 * w[8] + x1 * w[9] + x2 * w[10] + x3 * w[11];
            a3 += x0 * w[12] + x1 * w[13] + x2 * w[14] + x3 * w[15];
            b0 += y0 * w[0] + y1 * w[1] + y2 * w[2] + y3 * w[3];
            b1 += y0 * w[4] + y1 * w[5] + y2 * w[6] + y3 * w[7];
            b2 += y0 * w[8] + y1 * w[9] + y2 * w[10] + y3 * w[11];
            b3 += y0 * w[12] + y1 * w[13] + y2 * w[14] + y3 * w[15];
        }
#endif
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    acc[4] = b0, acc[5] = b1, acc[6] = b2, acc[7] = b3;
}
#endif

#if TINYAOT_BLOCK_ASM
/* One channel of a block against one pixel: the weight word's lanes (0, 2) and (1, 3) against x02, x13. */
#define TINYAOT_BLOCK_CH1(ch, off)                                                                                     \
    "ldr %[t], [%[w]" off "\n\t"                                                                                       \
    "sxtb16 %[u], %[t]\n\t"                                                                                            \
    "smlad %[a" #ch "], %[x02], %[u], %[a" #ch "]\n\t"                                                                 \
    "sxtb16 %[t], %[t], ror #8\n\t"                                                                                    \
    "smlad %[a" #ch "], %[x13], %[t], %[a" #ch "]\n\t"
/* One stored block of the 4x1 core, read in place: the input pointer advances by the block's delta (4 bytes per
   group), its word is unpacked once: 25 instructions for 16 multiply-adds. */
#define TINYAOT_BLOCK_STEP1                                                                                            \
    "ldrb %[t], [%[d]], #1\n\t"                                                                                        \
    "add %[x], %[x], %[t], lsl #2\n\t"                                                                                 \
    "ldr %[t], [%[x]]\n\t"                                                                                             \
    "sxtb16 %[x02], %[t]\n\t"                                                                                          \
    "sxtb16 %[x13], %[t], ror #8\n\t"                                                                                  \
    TINYAOT_BLOCK_CH1(1, ", #4]") TINYAOT_BLOCK_CH1(2, ", #8]") TINYAOT_BLOCK_CH1(3, ", #12]")                         \
    TINYAOT_BLOCK_CH1(0, "], #16")
#endif

/* acc[c] += the n stored blocks of one block-row against the int8 row x, read in place (no column: the row's length
   is a multiple of 4, so a block never reads past it). */
static inline void tinyaot_block_mac_4x1(const int8_t *x, const int8_t *w, const uint8_t *d, int32_t n,
                                         int32_t acc[4])
{
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#if TINYAOT_BLOCK_ASM
    if (n > 0) {
        const uint8_t *const end = d + n;
        int32_t t, u, x02, x13;
        __asm__("1:\n\t" TINYAOT_BLOCK_STEP1
                "cmp %[d], %[end]\n\t"
                "bne 1b\n\t"
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [x] "+r"(x), [w] "+r"(w),
                  [d] "+r"(d), [t] "=&r"(t), [u] "=&r"(u), [x02] "=&r"(x02), [x13] "=&r"(x13)
                : [end] "r"(end)
                : "cc", "memory");
    }
#else
    for (; n > 0; n--, d++, w += 16) {
        x += 4 * (int32_t)*d;
#if TINYAOT_USE_DSP
        {
            const int32_t v = tinyaot_read_s8x4(x);
            const int32_t x02 = __sxtb16(v), x13 = tinyaot_sxtb16_ror8(v);
            int32_t t = tinyaot_read_s8x4(w);
            a0 = __smlad(x13, tinyaot_sxtb16_ror8(t), __smlad(x02, __sxtb16(t), a0));
            t = tinyaot_read_s8x4(w + 4);
            a1 = __smlad(x13, tinyaot_sxtb16_ror8(t), __smlad(x02, __sxtb16(t), a1));
            t = tinyaot_read_s8x4(w + 8);
            a2 = __smlad(x13, tinyaot_sxtb16_ror8(t), __smlad(x02, __sxtb16(t), a2));
            t = tinyaot_read_s8x4(w + 12);
            a3 = __smlad(x13, tinyaot_sxtb16_ror8(t), __smlad(x02, __sxtb16(t), a3));
        }
#else
        {
            const int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
            a0 += x0 * w[0] + x1 * w[1] + x2 * w[2] + x3 * w[3];
            a1 += x0 * w[4] + x1 * w[5] + x2 * w[6] + x3 * w[7];
            a2 += x0 * w[8] + x1 * w[9] + x2 * w[10] + x3 * w[11];
            a3 += x0 * w[12] + x1 * w[13] + x2 * w[14] + x3 * w[15];
        }
#endif
    }
#endif
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* Requantization of a block-row's results: the fold table or multiplier/shift per channel (fold_table). */
typedef struct {
    const int32_t *bias; /* folded, per channel */
    const int32_t *mult; /* fold table: {mult, radd} pairs; else multipliers */
    const int32_t *shift; /* fold table: right shifts four per word; else shifts */
    int32_t fold_table, out_c, output_offset, act_min, act_max;
} tinyaot_block_out;

/* Sets q to the requantization of a block-sparse layer (its out_c channels, its weights' fold_table flag, the
   output offset and clamp of its conv/fc params). A macro: the same stores in the same order as written out. */
#define TINYAOT_BLOCK_OUT_SET(q, bias_, quant_params_, filter_, out_c_, params)                                   \
    do {                                                                                                          \
        (q).bias = (bias_);                                                                                       \
        (q).mult = (quant_params_)->multiplier;                                                                   \
        (q).shift = (quant_params_)->shift;                                                                       \
        (q).fold_table = (filter_)->fold_table;                                                                   \
        (q).out_c = (out_c_);                                                                                     \
        (q).output_offset = (params)->output_offset;                                                              \
        (q).act_min = (params)->activation.min;                                                                   \
        (q).act_max = (params)->activation.max;                                                                   \
    } while (0)

static inline int8_t tinyaot_block_rq(const tinyaot_block_out *q, int32_t o, int32_t acc)
{
    if (q->fold_table) {
        return tinyaot_fold_rq(acc, q->mult + 2 * o, tinyaot_fold_e(q->shift, o), q->act_min, q->act_max);
    }
    return tinyaot_requantize_s8(acc, q->mult[o], q->shift[o], q->output_offset, q->act_min, q->act_max);
}

/* The results of one block-row, channels o .. o+nc-1: acc[0..3] into out_a, and acc[4..7] into out_b unless it is
   NULL. The fold table's four shifts of a full block-row are one word (o is a multiple of 4); the table is read
   into locals before the stores (an int8 store may alias it), and the full int8 range clamps with one SSAT. */
static void tinyaot_block_store(const tinyaot_block_out *q, int32_t o, int32_t nc, const int32_t acc[8],
                                int8_t *out_a, int8_t *out_b)
{
    int32_t c;
    if (q->fold_table && nc == 4) {
        const int32_t *mr = q->mult + 2 * o;
        const uint32_t ew = (uint32_t)q->shift[o >> 2];
        const int full = (q->act_min == -128 && q->act_max == 127);
        for (c = 0; c < 4; c++) {
            const int32_t m = mr[2 * c], radd = mr[2 * c + 1], e = (int32_t)((ew >> (8 * c)) & 0xFFu);
            int32_t ra = tinyaot_fold_scale(acc[c], m, radd, e);
            int32_t rb = out_b != NULL ? tinyaot_fold_scale(acc[4 + c], m, radd, e) : 0;
            if (full) {
                ra = tinyaot_fold_sat8(ra);
                rb = tinyaot_fold_sat8(rb);
            } else {
                ra = ra < q->act_min ? q->act_min : (ra > q->act_max ? q->act_max : ra);
                rb = rb < q->act_min ? q->act_min : (rb > q->act_max ? q->act_max : rb);
            }
            out_a[o + c] = (int8_t)ra;
            if (out_b != NULL) {
                out_b[o + c] = (int8_t)rb;
            }
        }
        return;
    }
    for (c = 0; c < nc; c++) {
        out_a[o + c] = tinyaot_block_rq(q, o + c, acc[c]);
        if (out_b != NULL) {
            out_b[o + c] = tinyaot_block_rq(q, o + c, acc[4 + c]);
        }
    }
}

/* acc[0 .. 3] and acc[4 .. 7] set to the biases of channels o .. o+nc-1 (0 past nc). */
static inline void tinyaot_block_init(const tinyaot_block_out *q, int32_t o, int32_t nc, int32_t acc[8])
{
    if (nc == 4) {
        acc[0] = acc[4] = q->bias[o];
        acc[1] = acc[5] = q->bias[o + 1];
        acc[2] = acc[6] = q->bias[o + 2];
        acc[3] = acc[7] = q->bias[o + 3];
        return;
    }
    {
        int32_t c;
        for (c = 0; c < 4; c++) { /* (a fixed count: GCC turns a variable one into memcpy calls) */
            acc[c] = acc[4 + c] = c < nc ? q->bias[o + c] : 0;
        }
    }
}

#endif /* TINYAOT_BLOCK_SUPPORT_H */
