/*
 * tinyaot int8 kernels: the Helium (MVE) core of the block-sparse convolution and fully connected kernels
 * (tinyaot_convolve_s8_block_mve.c, tinyaot_fully_connected_s8_block_mve.c).
 *
 * Weights: the blocks of 4 output channels x 4 consecutive positions that hold a nonzero weight (tinyaot/compress/
 * storage.py "sparse_block"), laid out at compile time for Helium as one stream (tinyaot/ops/compressed.py
 * mve_block_stream): per block-row (channels 4r .. 4r+3) its number of groups of four blocks (one byte, at least 1:
 * each row is filled to whole groups with zero blocks at column 0, an empty row gets one such group), then per group
 * the four blocks' absolute block columns j (one byte each: rows of at most 1024 positions), then for each channel
 * c in turn the group's blocks' four values of channel c (16 bytes). The struct's `deltas` and `counts` are not
 * used. The bias (folded), the multipliers and the shifts split into their left (>= 0) and right (<= 0) parts come
 * per block-row as 16 words in `bias` (four of each: bias, left, mult, right); quant_params is not read.
 *
 * A group of four blocks is one 16-lane VMLADAVA per channel and pixel: the four input words the blocks multiply
 * (positions 4j .. 4j+3 of the column, for each of the group's j) are fetched by one word gather, VLDRW.U32
 * Qd, [Rn, Qoffsets, UXTW #2], the offsets widened from the group's index bytes by VLDRB.U32. Per group and two
 * pixels: 1 offset load, 2 gathers, 4 weight loads, 8 VMLADAV(A) and 2 loop instructions for 128 multiply-adds, the
 * dense Helium kernels' cost per 16-value chunk; the first group of a row starts the sums (VMLADAV), so no
 * accumulator is cleared. The columns are 4-byte aligned (gathered words).
 *
 * Under GCC and clang the row loop is one naked assembly function per column count (tinyaot_mve_block_two / _one):
 * the eight accumulators take every even register, r0 .. lr (VMLADAVA's accumulator must be even), the pointers the
 * odd ones, and the few loop values live in a 16-byte stack frame read with one LDM, so no compiler register
 * allocation or frame pointer is involved (every optimisation level builds the same code). Per block-row and pixel
 * pair besides the groups: the count load, 4 VMOVs into two sum vectors, 24 instructions of requantization with the
 * precomputed shift halves and 7 of stores and loop.
 *
 * The input offset is folded into the bias (tinyaot_nn_mve.h); overflow as in tinyaot_mve_gemm.h.
 */
#ifndef TINYAOT_MVE_BLOCK_H
#define TINYAOT_MVE_BLOCK_H

#include "tinyaot_mve_gemm.h"

/* What the row loop reads: the layer's stream and requantization words, its outputs per pixel (whole block-rows and
   the channels of a last partial one), the output offset and the activation bounds (four lanes each). The field
   order is the naked functions' (one LDM reads the first six). */
typedef struct {
    int32_t rows;            /* out_c / 4 */
    const int8_t *stream;    /* ops/compressed.py mve_block_stream */
    int32_t out_c;           /* bytes from a pixel's outputs to the next pixel's */
    int32_t out_off;
    const int32_t *params;   /* 16 words per block-row */
    int32_t rem;             /* out_c % 4 */
    int32_t lo[4], hi[4];
    const int8_t *values;    /* the 2x1 kernel's weights (tinyaot_mve_block2x1.h; its stream: the positions) */
} tinyaot_mve_block_job;

static TINYAOT_ALWAYS_INLINE void tinyaot_mve_block_job_of(tinyaot_mve_block_job *j, const int8_t *stream, const int32_t *params,
                                     int32_t out_c, int32_t out_off, int32_t act_min, int32_t act_max)
{
    int i;
    j->rows = out_c / 4;
    j->stream = stream;
    j->out_c = out_c;
    j->out_off = out_off;
    j->params = params;
    j->rem = out_c % 4;
    j->values = NULL;
    for (i = 0; i < 4; i++) {
        j->lo[i] = act_min;
        j->hi[i] = act_max;
    }
}

#if TINYAOT_USE_MVE && TINYAOT_GNU
#define TINYAOT_MVE_BLOCK_ASM 1

/* One group against two columns (xa in r3, xb in r1; stream at r5): op is VMLADAV for a row's first group, which
   starts the sums, VMLADAVA for the others. Channel c of pixel a sums in r(2c), of pixel b in r(8 + 2c) (lr = r14). */
#define TINYAOT_MVE_BLOCK_G2(op)                                                                                       \
    "vldrb.u32 q0, [r5], #4\n\t"                                                                                       \
    "vldrw.u32 q1, [r3, q0, uxtw #2]\n\t"                                                                              \
    "vldrw.u32 q2, [r1, q0, uxtw #2]\n\t"                                                                              \
    "vldrb.8 q3, [r5], #16\n\t" op " r0, q1, q3\n\t" op " r8, q2, q3\n\t"                                              \
    "vldrb.8 q3, [r5], #16\n\t" op " r2, q1, q3\n\t" op " r10, q2, q3\n\t"                                             \
    "vldrb.8 q3, [r5], #16\n\t" op " r4, q1, q3\n\t" op " r12, q2, q3\n\t"                                             \
    "vldrb.8 q3, [r5], #16\n\t" op " r6, q1, q3\n\t" op " lr, q2, q3\n\t"
/* One group against one column (xa in r3). */
#define TINYAOT_MVE_BLOCK_G1(op)                                                                                       \
    "vldrb.u32 q0, [r5], #4\n\t"                                                                                       \
    "vldrw.u32 q1, [r3, q0, uxtw #2]\n\t"                                                                              \
    "vldrb.8 q3, [r5], #16\n\t" op " r0, q1, q3\n\t"                                                                   \
    "vldrb.8 q3, [r5], #16\n\t" op " r2, q1, q3\n\t"                                                                   \
    "vldrb.8 q3, [r5], #16\n\t" op " r4, q1, q3\n\t"                                                                   \
    "vldrb.8 q3, [r5], #16\n\t" op " r6, q1, q3\n\t"
/* A block-row's groups (count byte first), their sums then in q4 (pixel a) and q5 (pixel b), and the frame's row
   count, out_c and out_off in r0, r2, r4. */
#define TINYAOT_MVE_BLOCK_SUMS(G, vmovs)                                                                               \
    "ldrb r11, [r5], #1\n\t" G("vmladav.s8") "subs r11, r11, #1\n\t"                                                   \
    "beq 2f\n\t"                                                                                                       \
    "1:\n\t" G("vmladava.s8") "subs r11, r11, #1\n\t"                                                                  \
    "bne 1b\n\t"                                                                                                       \
    "2:\n\t" vmovs "ldm sp, {r0, r2, r4}\n\t"
#define TINYAOT_MVE_BLOCK_VMOV2                                                                                        \
    "vmov q4[2], q4[0], r0, r4\n\t"                                                                                    \
    "vmov q4[3], q4[1], r2, r6\n\t"                                                                                    \
    "vmov q5[2], q5[0], r8, r12\n\t"                                                                                   \
    "vmov q5[3], q5[1], r10, lr\n\t"
#define TINYAOT_MVE_BLOCK_VMOV1                                                                                        \
    "vmov q4[2], q4[0], r0, r4\n\t"                                                                                    \
    "vmov q4[3], q4[1], r2, r6\n\t"
/* bias, left shift, multiplier, right shift (p, r9 here, advances over the row's 16 words); then the output
   offset (r4), the bounds (q6, q7). The same operations as tinyaot_mve_requantize_split + tinyaot_mve_rdbpot. */
#define TINYAOT_MVE_BLOCK_REQ2_AT(p)                                                                                   \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vadd.i32 q4, q4, q0\n\t"                                                                                          \
    "vadd.i32 q5, q5, q0\n\t"                                                                                          \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vqshl.s32 q4, q4, q0\n\t"                                                                                         \
    "vqshl.s32 q5, q5, q0\n\t"                                                                                         \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vqrdmulh.s32 q4, q4, q0\n\t"                                                                                      \
    "vqrdmulh.s32 q5, q5, q0\n\t"                                                                                      \
    "vldrw.u32 q1, [" p "], #16\n\t"                                                                                   \
    "vand q0, q4, q1\n\t"                                                                                              \
    "vshr.s32 q0, q0, #31\n\t"                                                                                         \
    "vqadd.s32 q4, q4, q0\n\t"                                                                                         \
    "vrshl.s32 q4, q4, q1\n\t"                                                                                         \
    "vand q0, q5, q1\n\t"                                                                                              \
    "vshr.s32 q0, q0, #31\n\t"                                                                                         \
    "vqadd.s32 q5, q5, q0\n\t"                                                                                         \
    "vrshl.s32 q5, q5, q1\n\t"                                                                                         \
    "vqadd.s32 q4, q4, r4\n\t"                                                                                         \
    "vqadd.s32 q5, q5, r4\n\t"                                                                                         \
    "vmax.s32 q4, q4, q6\n\t"                                                                                          \
    "vmax.s32 q5, q5, q6\n\t"                                                                                          \
    "vmin.s32 q4, q4, q7\n\t"                                                                                          \
    "vmin.s32 q5, q5, q7\n\t"
#define TINYAOT_MVE_BLOCK_REQ1_AT(p)                                                                                   \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vadd.i32 q4, q4, q0\n\t"                                                                                          \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vqshl.s32 q4, q4, q0\n\t"                                                                                         \
    "vldrw.u32 q0, [" p "], #16\n\t"                                                                                   \
    "vqrdmulh.s32 q4, q4, q0\n\t"                                                                                      \
    "vldrw.u32 q1, [" p "], #16\n\t"                                                                                   \
    "vand q0, q4, q1\n\t"                                                                                              \
    "vshr.s32 q0, q0, #31\n\t"                                                                                         \
    "vqadd.s32 q4, q4, q0\n\t"                                                                                         \
    "vrshl.s32 q4, q4, q1\n\t"                                                                                         \
    "vqadd.s32 q4, q4, r4\n\t"                                                                                         \
    "vmax.s32 q4, q4, q6\n\t"                                                                                          \
    "vmin.s32 q4, q4, q7\n\t"
#define TINYAOT_MVE_BLOCK_REQ2 TINYAOT_MVE_BLOCK_REQ2_AT("r9")
#define TINYAOT_MVE_BLOCK_REQ1 TINYAOT_MVE_BLOCK_REQ1_AT("r9")

/* Entry: (xa r0, xb r1, out r2, job r3) -> xa r3, xb r1, stream r5, params r9, out r7 (VSTRB.32 needs a low base),
   bounds q6/q7, and the frame [sp] = rows left, out_c, out_off, rem (r4, r6, r8, r10 from the job's first six
   words). No rows: straight to the partial one (label 8). */
#define TINYAOT_MVE_BLOCK_ENTER                                                                                        \
    "push {r4-r11, lr}\n\t"                                                                                            \
    "vpush {d8-d15}\n\t"                                                                                               \
    "ldm r3, {r4, r5, r6, r8, r9, r10}\n\t"                                                                            \
    "vldrw.u32 q6, [r3, #24]\n\t"                                                                                      \
    "vldrw.u32 q7, [r3, #40]\n\t"                                                                                      \
    "mov r3, r0\n\t"                                                                                                   \
    "mov r7, r2\n\t"                                                                                                   \
    "push {r4, r6, r8, r10}\n\t"                                                                                       \
    "cmp r4, #0\n\t"                                                                                                   \
    "beq 8f\n\t"
#define TINYAOT_MVE_BLOCK_LEAVE                                                                                        \
    "9:\n\t"                                                                                                           \
    "add sp, sp, #16\n\t"                                                                                              \
    "vpop {d8-d15}\n\t"                                                                                                \
    "pop {r4-r11, pc}\n\t"

/* The whole row loop: the whole block-rows (label 3), then a partial one (label 8: rem lanes stored, VCTP.32 on r0;
   VPR is not preserved across calls). store / store_p: the outputs of r7's pixel(s), r7 advanced / predicated. */
#define TINYAOT_MVE_BLOCK_LOOP(G, vmovs, req, store, store_p)                                                          \
    TINYAOT_MVE_BLOCK_LOOP_SUMS(TINYAOT_MVE_BLOCK_SUMS(G, vmovs), req, store, store_p)
/* The same with a block-row's sums given whole (tinyaot_mve_block2x1.h: two channel pairs per block-row). */
#define TINYAOT_MVE_BLOCK_LOOP_SUMS(sums, req, store, store_p)                                                         \
    TINYAOT_MVE_BLOCK_LOOP_FRAME(TINYAOT_MVE_BLOCK_ENTER, TINYAOT_MVE_BLOCK_LEAVE, sums, req, store, store_p)
/* The same with its own entry and exit (a larger frame: tinyaot_mve_block2x1.h). */
#define TINYAOT_MVE_BLOCK_LOOP_FRAME(enter, leave, sums, req, store, store_p)                                          \
    enter                                                                                                              \
    "3:\n\t" sums req store                                                                                            \
    "subs r0, r0, #1\n\t"                                                                                              \
    "str r0, [sp]\n\t"                                                                                                 \
    "bne 3b\n\t"                                                                                                       \
    "8:\n\t"                                                                                                           \
    "ldr r0, [sp, #12]\n\t"                                                                                            \
    "cmp r0, #0\n\t"                                                                                                   \
    "beq 9f\n\t" sums req                                                                                              \
    "ldr r0, [sp, #12]\n\t"                                                                                            \
    "vctp.32 r0\n\t" store_p leave

/* The stores of a block-row's outputs: both pixels (r7 advanced) / predicated for a partial row; one pixel likewise. */
#define TINYAOT_MVE_BLOCK_STORE2 "add r2, r7, r2\n\tvstrb.32 q5, [r2]\n\tvstrb.32 q4, [r7], #4\n\t"
#define TINYAOT_MVE_BLOCK_STORE2_P "add r2, r7, r2\n\tvpstt\n\tvstrbt.32 q5, [r2]\n\tvstrbt.32 q4, [r7]\n\t"
#define TINYAOT_MVE_BLOCK_STORE1 "vstrb.32 q4, [r7], #4\n\t"
#define TINYAOT_MVE_BLOCK_STORE1_P "vpst\n\tvstrbt.32 q4, [r7]\n\t"

/* Every block-row against columns xa and xb (4-byte aligned), pixel a's outputs at out, pixel b's at out + out_c. */
static TINYAOT_NAKED TINYAOT_UNUSED void tinyaot_mve_block_two(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED const int8_t *xb,
                                                TINYAOT_UNUSED int8_t *out,
                                                TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_BLOCK_LOOP(TINYAOT_MVE_BLOCK_G2, TINYAOT_MVE_BLOCK_VMOV2, TINYAOT_MVE_BLOCK_REQ2,
                                            TINYAOT_MVE_BLOCK_STORE2, TINYAOT_MVE_BLOCK_STORE2_P));
}

/* Every block-row against column xa, its outputs at out. */
static TINYAOT_NAKED TINYAOT_UNUSED void tinyaot_mve_block_one(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_BLOCK_LOOP(TINYAOT_MVE_BLOCK_G1, TINYAOT_MVE_BLOCK_VMOV1,
                                                             TINYAOT_MVE_BLOCK_REQ1, TINYAOT_MVE_BLOCK_STORE1,
                                                             TINYAOT_MVE_BLOCK_STORE1_P));
}

#else /* no assembly: intrinsics on MVE cores (other compilers), portable C elsewhere; the same integers */
#define TINYAOT_MVE_BLOCK_ASM 0

/* The stored blocks of every block-row against column xa (and xb unless it is NULL), pixel a's outputs at out,
   pixel b's at out + out_c. */
static void tinyaot_mve_block_cols(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j)
{
    const uint8_t *w = (const uint8_t *)(const void *)j->stream;
    const int32_t *pp = j->params;
    const int32_t n_out = j->out_c;
    int32_t o, c, i, t;
    for (o = 0; o < n_out; o += 4, pp += 16) {
        int32_t n = *w++;
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (; n > 0; n--) {
            const uint8_t *idx = w;
            const int8_t *wv = (const int8_t *)(const void *)(w + 4);
#if TINYAOT_USE_MVE
            const uint32x4_t off = vldrbq_u32(idx);
            const int8x16_t va = vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_s32((const int32_t *)(const void *)xa, off));
            for (c = 0; c < 4; c++) {
                acc[c] = vmladavaq_s8(acc[c], va, vld1q_s8(wv + 16 * c));
            }
            if (xb != NULL) {
                const int8x16_t vb = vreinterpretq_s8_s32(
                    vldrwq_gather_shifted_offset_s32((const int32_t *)(const void *)xb, off));
                for (c = 0; c < 4; c++) {
                    acc[4 + c] = vmladavaq_s8(acc[4 + c], vb, vld1q_s8(wv + 16 * c));
                }
            }
            (void)i;
            (void)t;
#else
            for (c = 0; c < 4; c++) {
                for (i = 0; i < 4; i++) {
                    for (t = 0; t < 4; t++) {
                        /* products of magnitude at most 128 * 128; partial sums within 128 * sum|w| */
                        acc[c] += (int32_t)xa[4 * idx[i] + t] * wv[16 * c + 4 * i + t];
                        if (xb != NULL) {
                            acc[4 + c] += (int32_t)xb[4 * idx[i] + t] * wv[16 * c + 4 * i + t];
                        }
                    }
                }
            }
#endif
            w += 68;
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

static TINYAOT_UNUSED void tinyaot_mve_block_two(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block_cols(xa, xb, out, j);
}

static TINYAOT_UNUSED void tinyaot_mve_block_one(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block_cols(xa, NULL, out, j);
}

#endif

#endif /* TINYAOT_MVE_BLOCK_H */
