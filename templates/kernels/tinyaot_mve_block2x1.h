/*
 * tinyaot int8 kernels: the Helium (MVE) core of the 2x1 block-sparse convolution (tinyaot_convolve_s8_block2x1_mve.c).
 *
 * Weights: per pair of output channels its kept window positions (tinyaot/compress/pattern.py "block2x1"), laid out
 * at compile time as one stream (tinyaot/ops/compressed.py mve_block2x1_stream): per block-row of four channels its
 * two channel pairs in turn, each as its number of groups of 16 positions (one byte, at least 1: filled to whole
 * groups with zero weights at position 0), then per group the 16 positions (one byte each: rows of at most 256
 * positions), the 16 weights of the pair's first channel and the 16 of its second. A last block-row of one or two
 * channels has a second pair of one zero group. Requantization words, entry and row loop: tinyaot_mve_block.h's.
 *
 * A group is one byte gather per column, VLDRB.U8 Qd, [Rn, Qoffsets], and one 16-lane VMLADAVA per channel and
 * pixel: per group and two pixels 1 offset load, 2 gathers, 2 weight loads and 4 VMLADAV(A) for 64 multiply-adds.
 *
 * Overflow: as tinyaot_mve_gemm.h (each sum a subset of the dense products plus the folded bias).
 */
#ifndef TINYAOT_MVE_BLOCK2X1_H
#define TINYAOT_MVE_BLOCK2X1_H

#include "tinyaot_mve_block.h"

#if TINYAOT_MVE_BLOCK_ASM

/* One group of a channel pair against two columns (xa in r3, xb in r1; stream at r5): the pair's first channel sums
   in a0 (pixel a) and b0 (pixel b), its second in a1, b1. */
#define TINYAOT_MVE_B2X1_G2(op, a0, b0, a1, b1)                                                                        \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.u8 q2, [r1, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [r5], #16\n\t" op " " a0 ", q1, q3\n\t" op " " b0 ", q2, q3\n\t"                                      \
    "vldrb.8 q3, [r5], #16\n\t" op " " a1 ", q1, q3\n\t" op " " b1 ", q2, q3\n\t"
/* One group of a channel pair against one column (xa in r3). */
#define TINYAOT_MVE_B2X1_G1(op, a0, b0, a1, b1)                                                                        \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [r5], #16\n\t" op " " a0 ", q1, q3\n\t"                                                               \
    "vldrb.8 q3, [r5], #16\n\t" op " " a1 ", q1, q3\n\t"
/* A channel pair's groups (count byte first; the first group starts the sums); labels l (loop) and e (end). */
#define TINYAOT_MVE_B2X1_PAIR(G, a0, b0, a1, b1, l, e)                                                                 \
    "ldrb r11, [r5], #1\n\t" G("vmladav.s8", a0, b0, a1, b1) "subs r11, r11, #1\n\t"                                   \
    "beq " e "f\n\t"                                                                                                   \
    l ":\n\t" G("vmladava.s8", a0, b0, a1, b1) "subs r11, r11, #1\n\t"                                                 \
    "bne " l "b\n\t" e ":\n\t"
/* A block-row: channels 0, 1 (r0/r8, r2/r10) then 2, 3 (r4/r12, r6/lr), as tinyaot_mve_block.h's registers. */
#define TINYAOT_MVE_B2X1_SUMS(G, vmovs)                                                                                \
    TINYAOT_MVE_B2X1_PAIR(G, "r0", "r8", "r2", "r10", "1", "2")                                                        \
    TINYAOT_MVE_B2X1_PAIR(G, "r4", "r12", "r6", "lr", "4", "5") vmovs "ldm sp, {r0, r2, r4}\n\t"

/* Every block-row against columns xa and xb, pixel a's outputs at out, pixel b's at out + out_c. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED const int8_t *xb,
                                                   TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_BLOCK_LOOP_SUMS(TINYAOT_MVE_B2X1_SUMS(TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_BLOCK_VMOV2),
                                                 TINYAOT_MVE_BLOCK_REQ2, TINYAOT_MVE_BLOCK_STORE2,
                                                 TINYAOT_MVE_BLOCK_STORE2_P));
}

/* Every block-row against column xa, its outputs at out. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_one(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_BLOCK_LOOP_SUMS(
                         TINYAOT_MVE_B2X1_SUMS(TINYAOT_MVE_B2X1_G1, TINYAOT_MVE_BLOCK_VMOV1), TINYAOT_MVE_BLOCK_REQ1,
                         TINYAOT_MVE_BLOCK_STORE1, TINYAOT_MVE_BLOCK_STORE1_P));
}

#else /* no assembly: intrinsics on MVE cores (other compilers), portable C elsewhere; the same integers */

/* Every block-row against column xa (and xb unless it is NULL), pixel a's outputs at out, pixel b's at out + out_c. */
static void tinyaot_mve_block2x1_cols(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j)
{
    const uint8_t *w = (const uint8_t *)(const void *)j->stream;
    const int32_t *pp = j->params;
    const int32_t n_out = j->out_c;
    int32_t o, c, h, i;
    for (o = 0; o < n_out; o += 4, pp += 16) {
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (h = 0; h < 2; h++) {
            int32_t n = *w++;
            for (; n > 0; n--, w += 48) {
                const uint8_t *idx = w;
                const int8_t *wv = (const int8_t *)(const void *)(w + 16);
#if TINYAOT_USE_MVE
                const uint8x16_t off = vldrbq_u8(idx);
                const int8x16_t va = vldrbq_gather_offset_s8(xa, off);
                acc[2 * h] = vmladavaq_s8(acc[2 * h], va, vld1q_s8(wv));
                acc[2 * h + 1] = vmladavaq_s8(acc[2 * h + 1], va, vld1q_s8(wv + 16));
                if (xb != NULL) {
                    const int8x16_t vb = vldrbq_gather_offset_s8(xb, off);
                    acc[4 + 2 * h] = vmladavaq_s8(acc[4 + 2 * h], vb, vld1q_s8(wv));
                    acc[5 + 2 * h] = vmladavaq_s8(acc[5 + 2 * h], vb, vld1q_s8(wv + 16));
                }
                (void)i;
#else
                for (i = 0; i < 16; i++) {
                    /* products of magnitude at most 128 * 128; partial sums within 128 * sum|w| */
                    acc[2 * h] += (int32_t)xa[idx[i]] * wv[i];
                    acc[2 * h + 1] += (int32_t)xa[idx[i]] * wv[16 + i];
                    if (xb != NULL) {
                        acc[4 + 2 * h] += (int32_t)xb[idx[i]] * wv[i];
                        acc[5 + 2 * h] += (int32_t)xb[idx[i]] * wv[16 + i];
                    }
                }
#endif
            }
        }
        for (c = 0; c < 4 && o + c < n_out; c++) {
            const int32_t shift = pp[4 + c] + pp[12 + c]; /* one of the two halves is 0 */
            out[o + c] = tinyaot_requantize_s8(acc[c] + pp[c], pp[8 + c], shift, j->out_off, j->lo[0], j->hi[0]);
            if (xb != NULL) {
                out[n_out + o + c] = tinyaot_requantize_s8(acc[4 + c] + pp[c], pp[8 + c], shift, j->out_off,
                                                           j->lo[0], j->hi[0]);
            }
        }
    }
}

static void tinyaot_mve_block2x1_two(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, xb, out, j);
}

static void tinyaot_mve_block2x1_one(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j);
}

#endif

#endif /* TINYAOT_MVE_BLOCK2X1_H */
