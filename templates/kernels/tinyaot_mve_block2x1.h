/*
 * tinyaot int8 kernels: the Helium (MVE) core of the 2x1 block-sparse convolution (tinyaot_convolve_s8_block2x1_mve.c).
 *
 * Weights: per pair of output channels its kept window positions (tinyaot/compress/pattern.py "block2x1"). Flash
 * holds per pair a bitmap of them and their weights (tinyaot/ops/compressed.py mve_block2x1_values), cut into a
 * first group of m positions (1 .. 16; 0 for an empty pair) and F whole groups of 16: first the first group's
 * weights (its m weights of the pair's first channel, then its m of the second), then per whole group the 16 weights
 * of the first channel and the 16 of the second. The entry decodes the bitmaps once per call into the stream of
 * positions this loop reads (tinyaot_mve_b2x1_positions, in the scratch): per block-row of four channels its two
 * channel pairs in turn (a missing second pair: an empty one), each as m (one byte), the first group's m positions
 * (one byte each: rows of at most 256 positions), F (one byte) and the whole groups' 16 * F positions: 2 bytes and
 * one per kept position. Requantization words, entry and row loop: tinyaot_mve_block.h's.
 *
 * A group is one byte gather per column, VLDRB.U8 Qd, [Rn, Qoffsets], and one 16-lane VMLADAVA per channel and
 * pixel: per group and two pixels 1 offset load, 2 gathers, 2 weight loads and 4 VMLADAV(A) for 64 multiply-adds.
 * The first group starts the sums, its gathers and weight loads predicated on its m lanes (VCTP.8: the others load
 * 0 and read nothing; its 16 offsets are read whole, those past m from the bytes after it): 7 instructions more per
 * channel pair than a whole group.
 *
 * Longer rows (K > 256: ic_resnet8's 3x3x32 and 3x3x64 layers; the _long loops and entry) are cut into S segments
 * of 256 positions (32 bitmap bytes): per channel pair each segment as above (its positions relative to the
 * segment's first, its m and F counting its own positions, no filler block), a byte 0 before each later segment
 * and a last byte S; flash holds the pair's weights segment by segment in the same order (mve_block2x1_values(st,
 * segmented=True)). Between segments both column pointers advance by 256, at the last byte they go back; a later
 * segment's first group accumulates (VMLADAVA): per later segment and pixel pair ~20 instructions more.
 *
 * Overflow: as tinyaot_mve_gemm.h (each sum a subset of the dense products plus the folded bias).
 */
#ifndef TINYAOT_MVE_BLOCK2X1_H
#define TINYAOT_MVE_BLOCK2X1_H

#include "tinyaot_mve_block.h"
#include "tinyaot_block2x1_decode.h"

/* The stream (above) of out_c channels' bitmaps (ceil(k / 8) bytes per channel pair) into dst; returns its bytes:
   per channel pair (a last block-row's missing one included) 2 + its kept positions (an odd count's filler
   included); the 16 bytes after them are zeroed (the last first group's offsets are read whole), up to 20 written. */
static inline int32_t tinyaot_mve_b2x1_positions(const uint8_t *bm, int32_t out_c, int32_t k, uint8_t *dst)
{
    const int32_t rb = (k + 7) / 8;
    const int32_t pairs = (out_c + 1) / 2;
    const int32_t padded = 2 * ((out_c + 3) / 4);
    uint8_t *const start = dst;
    int32_t p, i;
    for (p = 0; p < padded; p++) {
        /* the positions two bytes on; the first m of them then move back one, before F */
        const int32_t n = p < pairs ? tinyaot_block2x1_positions8(bm + p * rb, rb, dst + 2) : 0;
        const int32_t f = n > 0 ? (n - 1) >> 4 : 0;
        const int32_t m = n - 16 * f;
        dst[0] = (uint8_t)m;
#if TINYAOT_USE_MVE
        vstrbq_p_u8(dst + 1, vld1q_u8(dst + 2), vctp8q((uint32_t)m)); /* (16 read, m written) */
        (void)i;
#else
        for (i = 1; i <= m; i++) {
            dst[i] = dst[i + 1];
        }
#endif
        dst[1 + m] = (uint8_t)f;
        dst += 2 + n;
    }
    memset(dst, 0, 16);
    return (int32_t)(dst - start);
}

/* The segmented stream (rows past 256 positions; above) of out_c channels' bitmaps into dst; returns its bytes: per
   channel pair (a last block-row's missing one included) and segment 3 + its kept positions; the 16 bytes after
   them are zeroed, up to 20 written. */
static inline int32_t tinyaot_mve_b2x1_positions_long(const uint8_t *bm, int32_t out_c, int32_t k, uint8_t *dst)
{
    const int32_t rb = (k + 7) / 8;
    const int32_t segs = (rb + 31) / 32;
    const int32_t pairs = (out_c + 1) / 2;
    const int32_t padded = 2 * ((out_c + 3) / 4);
    uint8_t *const start = dst;
    int32_t p, s, i;
    for (p = 0; p < padded; p++) {
        for (s = 0; s < segs; s++) {
            const int32_t bytes = rb - 32 * s < 32 ? rb - 32 * s : 32;
            const int32_t n = p < pairs ? tinyaot_block2x1_bits8(bm + p * rb + 32 * s, bytes, dst + 2) : 0;
            const int32_t m = n > 0 ? n - 16 * ((n - 1) >> 4) : 0;
            dst[0] = (uint8_t)m;
            for (i = 1; i <= m; i++) {
                dst[i] = dst[i + 1];
            }
            dst[1 + m] = (uint8_t)((n - m) >> 4);
            dst += 2 + n;
            *dst++ = (uint8_t)(s + 1 < segs ? 0 : segs);
        }
    }
    memset(dst, 0, 16);
    return (int32_t)(dst - start);
}

#if TINYAOT_MVE_BLOCK_ASM

/* One group of a channel pair against two columns (xa in r3, xb in r1; positions at r5, weights at w): the pair's
   first channel sums in a0 (pixel a) and b0 (pixel b), its second in a1, b1. */
#define TINYAOT_MVE_B2X1_G2(op, w, a0, b0, a1, b1)                                                                     \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.u8 q2, [r1, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a0 ", q1, q3\n\t" op " " b0 ", q2, q3\n\t"                                   \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a1 ", q1, q3\n\t" op " " b1 ", q2, q3\n\t"
/* One column (xa in r3). */
#define TINYAOT_MVE_B2X1_G1(op, w, a0, b0, a1, b1)                                                                     \
    "vldrb.u8 q0, [r5], #16\n\t"                                                                                       \
    "vldrb.u8 q1, [r3, q0]\n\t"                                                                                        \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a0 ", q1, q3\n\t"                                                            \
    "vldrb.8 q3, [" w "], #16\n\t" op " " a1 ", q1, q3\n\t"
/* A channel pair's first group (m = r11 lanes; its gathers and weight loads predicated; it starts the sums): against
   two columns / one. */
#define TINYAOT_MVE_B2X1_T2(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpsttt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.u8 q2, [r1, q0]\n\tvldrbt.8 q3, [r9]\n\t"                              \
    "add r9, r9, r11\n\tvmladav.s8 " a0 ", q1, q3\n\tvmladav.s8 " b0 ", q2, q3\n\t"                                    \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladav.s8 " a1 ", q1, q3\n\tvmladav.s8 " b1 ", q2, q3\n\t"
#define TINYAOT_MVE_B2X1_T1(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpstt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.8 q3, [r9]\n\t"                                                         \
    "add r9, r9, r11\n\tvmladav.s8 " a0 ", q1, q3\n\t"                                                                 \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladav.s8 " a1 ", q1, q3\n\t"
/* The same accumulating: a later segment's first group. */
#define TINYAOT_MVE_B2X1_TA2(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpsttt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.u8 q2, [r1, q0]\n\tvldrbt.8 q3, [r9]\n\t"                              \
    "add r9, r9, r11\n\tvmladava.s8 " a0 ", q1, q3\n\tvmladava.s8 " b0 ", q2, q3\n\t"                                    \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladava.s8 " a1 ", q1, q3\n\tvmladava.s8 " b1 ", q2, q3\n\t"
#define TINYAOT_MVE_B2X1_TA1(a0, b0, a1, b1)                                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "vctp.8 r11\n\t"                                                                                                   \
    "vldrb.u8 q0, [r5]\n\t"                                                                                            \
    "add r5, r5, r11\n\t"                                                                                              \
    "vpstt\n\tvldrbt.u8 q1, [r3, q0]\n\tvldrbt.8 q3, [r9]\n\t"                                                         \
    "add r9, r9, r11\n\tvmladava.s8 " a0 ", q1, q3\n\t"                                                                 \
    "vpst\n\tvldrbt.8 q3, [r9]\n\tadd r9, r9, r11\n\tvmladava.s8 " a1 ", q1, q3\n\t"
/* A segmented channel pair (labels 10 .. 14): the first segment as TINYAOT_MVE_B2X1_PAIR, then while the next byte
   is 0 the columns advance by 256 and a segment accumulates; the last byte S takes them back by 256 * (S - 1). */
#define TINYAOT_MVE_B2X1_PAIR_LONG(G, T, TA, a0, b0, a1, b1)                                                           \
    TINYAOT_MVE_B2X1_PAIR(G, T, a0, b0, a1, b1, "10", "11")                                                            \
    "ldrb r11, [r5], #1\n\t"                                                                                           \
    "cmp r11, #0\n\t"                                                                                                  \
    "bne 14f\n\t"                                                                                                      \
    "add r3, r3, #256\n\t"                                                                                             \
    "add r1, r1, #256\n\t" TA(a0, b0, a1, b1) "ldrb r11, [r5], #1\n\t"                                                \
    "cmp r11, #0\n\t"                                                                                                  \
    "beq 11b\n\t"                                                                                                      \
    "12:\n\t" G("vmladava.s8", "r9", a0, b0, a1, b1) "subs r11, r11, #1\n\t"                                           \
    "bne 12b\n\t"                                                                                                      \
    "b 11b\n\t"                                                                                                        \
    "14:\n\t"                                                                                                          \
    "sub r11, r11, #1\n\t"                                                                                             \
    "sub r3, r3, r11, lsl #8\n\t"                                                                                      \
    "sub r1, r1, r11, lsl #8\n\t"
#define TINYAOT_MVE_B2X1_DEFINE_LONG(name, G, T, TA)                                                                   \
    ".macro " name " a0, b0, a1, b1\n\t"                                                                               \
    TINYAOT_MVE_B2X1_PAIR_LONG(G, T, TA, "\\a0", "\\b0", "\\a1", "\\b1") ".endm\n\t"
/* A channel pair: its first group, then its F whole groups (labels l: loop, e: end). */
#define TINYAOT_MVE_B2X1_PAIR(G, T, a0, b0, a1, b1, l, e)                                                              \
    T(a0, b0, a1, b1) "ldrb r11, [r5], #1\n\t"                                                                         \
    "cmp r11, #0\n\t"                                                                                                  \
    "beq " e "f\n\t" l ":\n\t" G("vmladava.s8", "r9", a0, b0, a1, b1) "subs r11, r11, #1\n\t"                          \
    "bne " l "b\n\t" e ":\n\t"
/* A channel pair as an assembler macro `name a0, b0, a1, b1` (defined once per function, expanded four times: the
   string stays within the 4095 characters C99 promises). */
#define TINYAOT_MVE_B2X1_DEFINE(name, G, T)                                                                            \
    ".macro " name " a0, b0, a1, b1\n\t"                                                                               \
    TINYAOT_MVE_B2X1_PAIR(G, T, "\\a0", "\\b0", "\\a1", "\\b1", "10", "11") ".endm\n\t"
/* A block-row: channels 0, 1 (r0/r8, r2/r10) then 2, 3 (r4/r12, r6/lr), as tinyaot_mve_block.h's registers; then
   the requantization words' pointer from the frame into r11 (r9 holds the weights' throughout). */
#define TINYAOT_MVE_B2X1_SUMS(name, vmovs)                                                                             \
    name " r0, r8, r2, r10\n\t" name " r4, r12, r6, lr\n\t" vmovs "ldm sp, {r0, r2, r4}\n\tldr r11, [sp, #16]\n\t"
/* tinyaot_mve_block.h's entry, with the weights' pointer (the job's values) in r9 and the requantization words' in
   the frame ([sp, #16]). */
#define TINYAOT_MVE_B2X1_ENTER                                                                                         \
    "push {r4-r11, lr}\n\t"                                                                                            \
    "vpush {d8-d15}\n\t"                                                                                               \
    "ldm r3, {r4, r5, r6, r8, r9, r10}\n\t"                                                                            \
    "vldrw.u32 q6, [r3, #24]\n\t"                                                                                      \
    "vldrw.u32 q7, [r3, #40]\n\t"                                                                                      \
    "ldr r11, [r3, #56]\n\t"                                                                                           \
    "mov r3, r0\n\t"                                                                                                   \
    "mov r7, r2\n\t"                                                                                                   \
    "push {r9, r11}\n\t"                                                                                               \
    "mov r9, r11\n\t"                                                                                                  \
    "push {r4, r6, r8, r10}\n\t"                                                                                       \
    "cmp r4, #0\n\t"                                                                                                   \
    "beq 8f\n\t"
#define TINYAOT_MVE_B2X1_LEAVE                                                                                         \
    "9:\n\t"                                                                                                           \
    "add sp, sp, #24\n\t"                                                                                              \
    "vpop {d8-d15}\n\t"                                                                                                \
    "pop {r4-r11, pc}\n\t"
#define TINYAOT_MVE_B2X1_LOOP(name, G, T, vmovs, req, store, store_p)                                                  \
    TINYAOT_MVE_B2X1_DEFINE(name, G, T)                                                                                \
    TINYAOT_MVE_BLOCK_LOOP_FRAME(TINYAOT_MVE_B2X1_ENTER, TINYAOT_MVE_B2X1_LEAVE, TINYAOT_MVE_B2X1_SUMS(name, vmovs),   \
                                 req, store "str r11, [sp, #16]\n\t", store_p)

/* Every block-row against columns xa and xb, pixel a's outputs at out, pixel b's at out + out_c. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED const int8_t *xb,
                                                   TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_LOOP("tinyaot_b2x1_pair2", TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_B2X1_T2,
                                           TINYAOT_MVE_BLOCK_VMOV2, TINYAOT_MVE_BLOCK_REQ2_AT("r11"),
                                           TINYAOT_MVE_BLOCK_STORE2, TINYAOT_MVE_BLOCK_STORE2_P));
}

/* Every block-row against column xa, its outputs at out. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_one(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                   TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_B2X1_LOOP("tinyaot_b2x1_pair1", TINYAOT_MVE_B2X1_G1,
                                                            TINYAOT_MVE_B2X1_T1, TINYAOT_MVE_BLOCK_VMOV1,
                                                            TINYAOT_MVE_BLOCK_REQ1_AT("r11"),
                                                            TINYAOT_MVE_BLOCK_STORE1, TINYAOT_MVE_BLOCK_STORE1_P));
}

/* The long loop: the pair macro defined in an assembler statement of its own (each string within 4095 chars). */
#define TINYAOT_MVE_B2X1_LOOP_LONG(name, vmovs, req, store, store_p)                                                   \
    TINYAOT_MVE_BLOCK_LOOP_FRAME(TINYAOT_MVE_B2X1_ENTER, TINYAOT_MVE_B2X1_LEAVE, TINYAOT_MVE_B2X1_SUMS(name, vmovs),   \
                                 req, store "str r11, [sp, #16]\n\t", store_p)

/* The same two over the segmented stream (rows past 256 positions). The one-column loop moves r1 (not read) too. */
static TINYAOT_NAKED void tinyaot_mve_block2x1_two_long(TINYAOT_UNUSED const int8_t *xa,
                                                        TINYAOT_UNUSED const int8_t *xb, TINYAOT_UNUSED int8_t *out,
                                                        TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_DEFINE_LONG("tinyaot_b2x1_long2", TINYAOT_MVE_B2X1_G2, TINYAOT_MVE_B2X1_T2,
                                                  TINYAOT_MVE_B2X1_TA2));
    __asm__ volatile(TINYAOT_MVE_B2X1_LOOP_LONG("tinyaot_b2x1_long2", TINYAOT_MVE_BLOCK_VMOV2,
                                                TINYAOT_MVE_BLOCK_REQ2_AT("r11"), TINYAOT_MVE_BLOCK_STORE2,
                                                TINYAOT_MVE_BLOCK_STORE2_P));
}

static TINYAOT_NAKED void tinyaot_mve_block2x1_one_long(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED int8_t *out,
                                                        TINYAOT_UNUSED const tinyaot_mve_block_job *job)
{
    __asm__ volatile(TINYAOT_MVE_B2X1_DEFINE_LONG("tinyaot_b2x1_long1", TINYAOT_MVE_B2X1_G1, TINYAOT_MVE_B2X1_T1,
                                                  TINYAOT_MVE_B2X1_TA1));
    __asm__ volatile("mov r3, r2\n\t"
                     "mov r2, r1\n\t" TINYAOT_MVE_B2X1_LOOP_LONG("tinyaot_b2x1_long1", TINYAOT_MVE_BLOCK_VMOV1,
                                                                 TINYAOT_MVE_BLOCK_REQ1_AT("r11"),
                                                                 TINYAOT_MVE_BLOCK_STORE1,
                                                                 TINYAOT_MVE_BLOCK_STORE1_P));
}

#else /* no assembly: intrinsics on MVE cores (other compilers), portable C elsewhere; the same integers */

/* Every block-row against column xa (and xb unless it is NULL), pixel a's outputs at out, pixel b's at out + out_c;
   seg: the segmented stream. */
static void tinyaot_mve_block2x1_cols(const int8_t *xa, const int8_t *xb, int8_t *out, const tinyaot_mve_block_job *j,
                                      int seg)
{
    const uint8_t *idx = (const uint8_t *)(const void *)j->stream;
    const int8_t *wf = j->values;
    const int32_t *pp = j->params;
    const int32_t n_out = j->out_c;
    int32_t o, c, h, i;
    for (o = 0; o < n_out; o += 4, pp += 16) {
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (h = 0; h < 2; h++) {
            int32_t base = 0; /* the segment's first position */
            for (;;) {
                const int8_t *const sa = xa + base, *const sb = xb != NULL ? xb + base : NULL;
                int32_t f = -1;
                for (; f != 0; f--) {
                    /* the first group (m = its first byte), then the f whole ones */
                    const int32_t m = f < 0 ? *idx++ : 16;
                    const int8_t *const w0 = wf, *const w1 = wf + m;
#if TINYAOT_USE_MVE
                    const mve_pred16_t lanes = vctp8q((uint32_t)m);
                    const uint8x16_t off = vldrbq_z_u8(idx, lanes);
                    const int8x16_t va = vldrbq_gather_offset_z_s8(sa, off, lanes);
                    const int8x16_t v0 = vldrbq_z_s8(w0, lanes), v1 = vldrbq_z_s8(w1, lanes);
                    acc[2 * h] = vmladavaq_s8(acc[2 * h], va, v0);
                    acc[2 * h + 1] = vmladavaq_s8(acc[2 * h + 1], va, v1);
                    if (sb != NULL) {
                        const int8x16_t vb = vldrbq_gather_offset_z_s8(sb, off, lanes);
                        acc[4 + 2 * h] = vmladavaq_s8(acc[4 + 2 * h], vb, v0);
                        acc[5 + 2 * h] = vmladavaq_s8(acc[5 + 2 * h], vb, v1);
                    }
                    (void)i;
#else
                    for (i = 0; i < m; i++) {
                        /* products of magnitude at most 128 * 128; partial sums within 128 * sum|w| */
                        acc[2 * h] += (int32_t)sa[idx[i]] * w0[i];
                        acc[2 * h + 1] += (int32_t)sa[idx[i]] * w1[i];
                        if (sb != NULL) {
                            acc[4 + 2 * h] += (int32_t)sb[idx[i]] * w0[i];
                            acc[5 + 2 * h] += (int32_t)sb[idx[i]] * w1[i];
                        }
                    }
#endif
                    idx += m;
                    wf += 2 * m;
                    if (f < 0) {
                        f = *idx++ + 1; /* (the loop's f-- then leaves F) */
                    }
                }
                if (!seg) {
                    break;
                }
                if (*idx++ != 0) { /* the pair's last byte (S); else a byte 0 before the next segment */
                    break;
                }
                base += 256;
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
    tinyaot_mve_block2x1_cols(xa, xb, out, j, 0);
}

static void tinyaot_mve_block2x1_one(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j, 0);
}

static void tinyaot_mve_block2x1_two_long(const int8_t *xa, const int8_t *xb, int8_t *out,
                                          const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, xb, out, j, 1);
}

static void tinyaot_mve_block2x1_one_long(const int8_t *xa, int8_t *out, const tinyaot_mve_block_job *j)
{
    tinyaot_mve_block2x1_cols(xa, NULL, out, j, 1);
}

#endif

#endif /* TINYAOT_MVE_BLOCK2X1_H */
