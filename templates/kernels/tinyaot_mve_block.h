/*
 * tinyaot int8 kernels: the Helium (MVE) core of the block-sparse convolution and fully connected kernels
 * (tinyaot_convolve_s8_block_mve.c, tinyaot_fully_connected_s8_block_mve.c).
 *
 * Weights: the blocks of 4 output channels x 4 consecutive positions that hold a nonzero weight (tinyaot/compress/
 * storage.py "sparse_block"), laid out at compile time for Helium as one stream (tinyaot/ops/compressed.py
 * mve_block_stream): per block-row (channels 4r .. 4r+3) its count of stored blocks (two bytes, little-endian), then
 * its blocks in groups of four (the last group may hold fewer, m); per group the m blocks' absolute block columns j
 * (one byte each: rows of at most 1024 positions), then for each channel c in turn the group's blocks' four values
 * of channel c (4m bytes). The struct's `deltas` and `counts` are not used. The bias (folded), multipliers and
 * shifts come interleaved per block-row, 12 words (four of each) in `bias`; quant_params is not read.
 *
 * A group of four blocks is one 16-lane VMLADAVA per channel and pixel: the four input words the blocks multiply
 * (positions 4j .. 4j+3 of the column, for each of the group's j) are fetched by one word gather, VLDRW.U32
 * Qd, [Rn, Qoffsets, UXTW #2], the offsets widened from the group's index bytes by VLDRB.U32. Per group and two
 * pixels: 1 offset load, 2 gathers, 4 weight loads, 8 VMLADAVA and 2 loop instructions for 128 multiply-adds, the
 * dense Helium kernels' cost per 16-value chunk. The last group of fewer blocks runs under a tail predicate
 * (VCTP.32 on the blocks: 4m byte lanes), its inactive lanes loaded as zero. The columns are 4-byte aligned
 * (gathered words).
 *
 * The input offset is folded into the bias (tinyaot_nn_mve.h); overflow as in tinyaot_mve_gemm.h.
 */
#ifndef TINYAOT_MVE_BLOCK_H
#define TINYAOT_MVE_BLOCK_H

#include "tinyaot_mve_gemm.h"

#if TINYAOT_USE_MVE

#if defined(__OPTIMIZE__) && TINYAOT_GCC
/* One channel of the tail group for both columns: its 4m weights (the predicate's lanes) at pw, pw += 4m. */
#define TINYAOT_MVE_BLOCK_TAIL2(r, s)                                                                                \
    "vpst\n\t"                                                                                                       \
    "vldrbt.8 q3, [%[pw]]\n\t"                                                                                       \
    "add %[pw], %[pw], %[g]\n\t"                                                                                     \
    "vmladava.s8 %[" r "], q1, q3\n\t"                                                                               \
    "vmladava.s8 %[" s "], q2, q3\n\t"
/* One block-row of the stream at pw (its count, then its groups; pw is left at the next row) against columns pa and
   pb into the eight accumulators (each starting at 0), then the four sums of each column as one vector (va, vb:
   two lanes per VMOV). "Te": GCC's even-register constraint, which VMLADAVA's accumulator needs (see
   tinyaot_mve_gemm.h); the count is kept in memory (no register is left at -O1); "l": VLDRB.U32 needs a low base
   register. The tail's VCTP changes the predicate register, which GCC cannot be told about (there is no "vpr"
   clobber) and may hold a store's predicate in across the statement: it is saved in sv and given back. */
#define TINYAOT_MVE_BLOCK_ROW2(a0, a1, a2, a3, b0, b1, b2, b3, va, vb)                                               \
    __asm__("ldrh %[g], [%[pw]], #2\n\t"                                                                           \
            "str %[g], %[cnt]\n\t"                                                                                   \
            "asrs %[g], %[g], #2\n\t"                                                                                \
            "beq 2f\n\t"                                                                                             \
            "1:\n\t"                                                                                                 \
            "vldrb.u32 q0, [%[pw]], #4\n\t"                                                                          \
            "vldrw.u32 q1, [%[pa], q0, uxtw #2]\n\t"                                                                 \
            "vldrw.u32 q2, [%[pb], q0, uxtw #2]\n\t"                                                                 \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r0], q1, q3\n\t"                                                                          \
            "vmladava.s8 %[s0], q2, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r1], q1, q3\n\t"                                                                          \
            "vmladava.s8 %[s1], q2, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r2], q1, q3\n\t"                                                                          \
            "vmladava.s8 %[s2], q2, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r3], q1, q3\n\t"                                                                          \
            "vmladava.s8 %[s3], q2, q3\n\t"                                                                          \
            "subs %[g], %[g], #1\n\t"                                                                                \
            "bne 1b\n\t"                                                                                             \
            "2:\n\t"                                                                                                 \
            "ldr %[g], %[cnt]\n\t"                                                                                  \
            "tst %[g], #3\n\t"                                                                                       \
            "beq 3f\n\t"                                                                                             \
            "vmrs %[g], p0\n\t"                                                                                      \
            "str %[g], %[sv]\n\t"                                                                                    \
            "ldr %[g], %[cnt]\n\t"                                                                                  \
            "and %[g], %[g], #3\n\t"                                                                                 \
            "vctp.32 %[g]\n\t"                                                                                       \
            "vpst\n\t"                                                                                               \
            "vldrbt.u32 q0, [%[pw]]\n\t"                                                                             \
            "add %[pw], %[pw], %[g]\n\t"                                                                             \
            "lsls %[g], %[g], #2\n\t"                                                                                \
            "vpstt\n\t"                                                                                              \
            "vldrwt.u32 q1, [%[pa], q0, uxtw #2]\n\t"                                                                \
            "vldrwt.u32 q2, [%[pb], q0, uxtw #2]\n\t"                                                                \
            TINYAOT_MVE_BLOCK_TAIL2("r0", "s0") TINYAOT_MVE_BLOCK_TAIL2("r1", "s1")                                  \
            TINYAOT_MVE_BLOCK_TAIL2("r2", "s2") TINYAOT_MVE_BLOCK_TAIL2("r3", "s3")                                  \
            "ldr %[g], %[sv]\n\t"                                                                                    \
            "vmsr p0, %[g]\n\t"                                                                                      \
            "3:\n\t"                                                                                                 \
            "vmov %q[va][2], %q[va][0], %[r0], %[r2]\n\t"                                                            \
            "vmov %q[va][3], %q[va][1], %[r1], %[r3]\n\t"                                                            \
            "vmov %q[vb][2], %q[vb][0], %[s0], %[s2]\n\t"                                                            \
            "vmov %q[vb][3], %q[vb][1], %[s1], %[s3]"                                                                \
            : [r0] "+Te"(a0), [r1] "+Te"(a1), [r2] "+Te"(a2), [r3] "+Te"(a3), [s0] "+Te"(b0), [s1] "+Te"(b1),        \
              [s2] "+Te"(b2), [s3] "+Te"(b3), [pw] "+l"(pw), [g] "=&r"(g), [va] "=w"(va), [vb] "=w"(vb),             \
              [sv] "=m"(sv), [cnt] "=m"(cnt)                                                                         \
            : [pa] "r"(xa), [pb] "r"(xb)                                                                             \
            : "q0", "q1", "q2", "q3", "memory", "cc")
/* One channel of the tail group for one column: its 4m weights at pw, pw += 4m. */
#define TINYAOT_MVE_BLOCK_TAIL1(r)                                                                                   \
    "vpst\n\t"                                                                                                       \
    "vldrbt.8 q3, [%[pw]]\n\t"                                                                                       \
    "add %[pw], %[pw], %[g]\n\t"                                                                                     \
    "vmladava.s8 %[" r "], q1, q3\n\t"
/* The one-column form of TINYAOT_MVE_BLOCK_ROW2: per group 1 offset load, 1 gather, 4 weight loads, 4 VMLADAVA. */
#define TINYAOT_MVE_BLOCK_ROW1(a0, a1, a2, a3, va)                                                                   \
    __asm__("ldrh %[g], [%[pw]], #2\n\t"                                                                           \
            "str %[g], %[cnt]\n\t"                                                                                   \
            "asrs %[g], %[g], #2\n\t"                                                                                \
            "beq 2f\n\t"                                                                                             \
            "1:\n\t"                                                                                                 \
            "vldrb.u32 q0, [%[pw]], #4\n\t"                                                                          \
            "vldrw.u32 q1, [%[pa], q0, uxtw #2]\n\t"                                                                 \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r0], q1, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r1], q1, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r2], q1, q3\n\t"                                                                          \
            "vldrb.8 q3, [%[pw]], #16\n\t"                                                                           \
            "vmladava.s8 %[r3], q1, q3\n\t"                                                                          \
            "subs %[g], %[g], #1\n\t"                                                                                \
            "bne 1b\n\t"                                                                                             \
            "2:\n\t"                                                                                                 \
            "ldr %[g], %[cnt]\n\t"                                                                                  \
            "tst %[g], #3\n\t"                                                                                       \
            "beq 3f\n\t"                                                                                             \
            "vmrs %[g], p0\n\t"                                                                                      \
            "str %[g], %[sv]\n\t"                                                                                    \
            "ldr %[g], %[cnt]\n\t"                                                                                  \
            "and %[g], %[g], #3\n\t"                                                                                 \
            "vctp.32 %[g]\n\t"                                                                                       \
            "vpst\n\t"                                                                                               \
            "vldrbt.u32 q0, [%[pw]]\n\t"                                                                             \
            "add %[pw], %[pw], %[g]\n\t"                                                                             \
            "lsls %[g], %[g], #2\n\t"                                                                                \
            "vpst\n\t"                                                                                               \
            "vldrwt.u32 q1, [%[pa], q0, uxtw #2]\n\t"                                                                \
            TINYAOT_MVE_BLOCK_TAIL1("r0") TINYAOT_MVE_BLOCK_TAIL1("r1") TINYAOT_MVE_BLOCK_TAIL1("r2")                \
            TINYAOT_MVE_BLOCK_TAIL1("r3")                                                                            \
            "ldr %[g], %[sv]\n\t"                                                                                    \
            "vmsr p0, %[g]\n\t"                                                                                      \
            "3:\n\t"                                                                                                 \
            "vmov %q[va][2], %q[va][0], %[r0], %[r2]\n\t"                                                            \
            "vmov %q[va][3], %q[va][1], %[r1], %[r3]"                                                                \
            : [r0] "+Te"(a0), [r1] "+Te"(a1), [r2] "+Te"(a2), [r3] "+Te"(a3), [pw] "+l"(pw), [g] "=&r"(g),          \
              [va] "=w"(va), [sv] "=m"(sv), [cnt] "=m"(cnt)                                                          \
            : [pa] "r"(xa)                                                                                           \
            : "q0", "q1", "q3", "memory", "cc")
#define TINYAOT_MVE_BLOCK_ASM 1
#else
#define TINYAOT_MVE_BLOCK_ASM 0
#endif

/* The stored blocks of one block-row (the stream at *pw: its count, then its groups; advanced past them) against
   column xa (and xb unless it is NULL), added to acc (8 entries). The intrinsics form of the assembly above. */
TINYAOT_MVE_INLINE void tinyaot_mve_block_row(const int8_t *xa, const int8_t *xb, const int8_t **pw, int32_t acc[8])
{
    const int8_t *w = *pw;
    int32_t n = (int32_t)((const uint8_t *)(const void *)w)[0] | ((int32_t)((const uint8_t *)(const void *)w)[1] << 8);
    int32_t c;
    w += 2;
    while (n > 0) {
        const int32_t m = n < 4 ? n : 4;
        const mve_pred16_t p = vctp32q((uint32_t)m);
        const uint32x4_t off = vldrbq_z_u32((const uint8_t *)(const void *)w, p);
        const int8x16_t va = vreinterpretq_s8_s32(
            vldrwq_gather_shifted_offset_z_s32((const int32_t *)(const void *)xa, off, p));
        w += m;
        if (xb != NULL) {
            const int8x16_t vb = vreinterpretq_s8_s32(
                vldrwq_gather_shifted_offset_z_s32((const int32_t *)(const void *)xb, off, p));
            for (c = 0; c < 4; c++, w += 4 * m) {
                const int8x16_t wv = vldrbq_z_s8(w, p);
                acc[c] = vmladavaq_s8(acc[c], va, wv);
                acc[4 + c] = vmladavaq_s8(acc[4 + c], vb, wv);
            }
        } else {
            for (c = 0; c < 4; c++, w += 4 * m) {
                acc[c] = vmladavaq_s8(acc[c], va, vldrbq_z_s8(w, p));
            }
        }
        n -= m;
    }
    *pw = w;
}

/* Requantization of one block-row's two sum vectors with its params (bias, multipliers, shifts of its four
   channels, 12 words at pp): tinyaot_mve_requant2 with the three arrays interleaved, so one pointer walks them. */
TINYAOT_MVE_INLINE void tinyaot_mve_block_requant(int32x4_t *va, int32x4_t *vb, const int32_t *pp,
                                                  const tinyaot_mve_epilogue *e)
{
#if defined(__OPTIMIZE__) && TINYAOT_GCC
    int32x4_t a = *va;
    int32x4_t b = *vb;
    __asm__("vldrw.u32 q0, [%[pp]]\n\t"
            "vadd.i32 %q[a], %q[a], q0\n\t"
            "vadd.i32 %q[b], %q[b], q0\n\t"
            "vldrw.u32 q0, [%[pp], #32]\n\t"
            "vmov.i32 q1, #0\n\t"
            "vmax.s32 q2, q0, q1\n\t"
            "vmin.s32 q1, q0, q1\n\t"
            "vqshl.s32 %q[a], %q[a], q2\n\t"
            "vqshl.s32 %q[b], %q[b], q2\n\t"
            "vldrw.u32 q0, [%[pp], #16]\n\t"
            "vqrdmulh.s32 %q[a], %q[a], q0\n\t"
            "vqrdmulh.s32 %q[b], %q[b], q0\n\t"
            "vand q0, %q[a], q1\n\t"
            "vshr.s32 q0, q0, #31\n\t"
            "vqadd.s32 %q[a], %q[a], q0\n\t"
            "vrshl.s32 %q[a], %q[a], q1\n\t"
            "vand q0, %q[b], q1\n\t"
            "vshr.s32 q0, q0, #31\n\t"
            "vqadd.s32 %q[b], %q[b], q0\n\t"
            "vrshl.s32 %q[b], %q[b], q1\n\t"
            "vqadd.s32 %q[a], %q[a], %[off]\n\t"
            "vqadd.s32 %q[b], %q[b], %[off]\n\t"
            "vmax.s32 %q[a], %q[a], %q[lo]\n\t"
            "vmax.s32 %q[b], %q[b], %q[lo]\n\t"
            "vmin.s32 %q[a], %q[a], %q[hi]\n\t"
            "vmin.s32 %q[b], %q[b], %q[hi]"
            : [a] "+w"(a), [b] "+w"(b)
            : [pp] "r"(pp), [off] "r"(e->out_off), [lo] "w"(e->lo), [hi] "w"(e->hi)
            : "q0", "q1", "q2", "memory");
    *va = a;
    *vb = b;
#else
    const int32x4_t left = tinyaot_mve_shift_left(vld1q_s32(pp + 8));
    const int32x4_t right = tinyaot_mve_shift_right(vld1q_s32(pp + 8));
    const int32x4_t bias = vld1q_s32(pp);
    const int32x4_t m = vld1q_s32(pp + 4);
    int32x4_t a = tinyaot_mve_requantize_split(vaddq_s32(*va, bias), m, left, right);
    int32x4_t b = tinyaot_mve_requantize_split(vaddq_s32(*vb, bias), m, left, right);
    a = vqaddq_n_s32(a, e->out_off);
    b = vqaddq_n_s32(b, e->out_off);
    *va = vminq_s32(vmaxq_s32(a, e->lo), e->hi);
    *vb = vminq_s32(vmaxq_s32(b, e->lo), e->hi);
#endif
}

/*
 * Every block-row of the layer against column xa (outputs at out_a) and, unless xb is NULL, column xb (outputs at
 * out_b): the stream as described above, params the per-row requantization words (tinyaot_mve_block_requant),
 * n_out channels. The inline assembly uses every odd low register, r7 included, so GCC must keep no frame pointer
 * here, and at -O1 needs its allocator's expensive optimizations to find them (TINYAOT_TIGHT_ASM).
 */
#if TINYAOT_MVE_BLOCK_ASM
TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER TINYAOT_TIGHT_ASM
#endif
static void tinyaot_mve_block_rows(const int8_t *xa, const int8_t *xb, const int8_t *stream, const int32_t *params,
                                   int32_t n_out, const tinyaot_mve_requant *q, int8_t *out_a, int8_t *out_b)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int8_t *pw = stream;
    const int32_t *pp = params;
    int32_t o;
    for (o = 0; o < n_out; o += 4, pp += 12) {
        int32x4_t va, vb;
#if TINYAOT_MVE_BLOCK_ASM
        int32_t sv, cnt;
        if (xb != NULL) {
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
            int32_t g;
            TINYAOT_MVE_BLOCK_ROW2(a0, a1, a2, a3, b0, b1, b2, b3, va, vb);
        } else {
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            int32_t g;
            TINYAOT_MVE_BLOCK_ROW1(a0, a1, a2, a3, va);
            vb = va;
        }
#else
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        tinyaot_mve_block_row(xa, xb, &pw, acc);
        va = tinyaot_mve_lanes(acc[0], acc[1], acc[2], acc[3]);
        vb = tinyaot_mve_lanes(acc[4], acc[5], acc[6], acc[7]);
#endif
        tinyaot_mve_block_requant(&va, &vb, pp, &e);
        if (o + 4 <= n_out) {
            vstrbq_s32(out_a + o, va);
            if (xb != NULL) {
                vstrbq_s32(out_b + o, vb);
            }
        } else {
            const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
            vstrbq_p_s32(out_a + o, va, p4);
            if (xb != NULL) {
                vstrbq_p_s32(out_b + o, vb, p4);
            }
        }
    }
}

#else /* portable C: the same integers, for the host and cores without MVE */

static void tinyaot_mve_block_rows(const int8_t *xa, const int8_t *xb, const int8_t *stream, const int32_t *params,
                                   int32_t n_out, const tinyaot_mve_requant *q, int8_t *out_a, int8_t *out_b)
{
    const int8_t *w = stream;
    const int32_t *pp = params;
    int32_t o;
    for (o = 0; o < n_out; o += 4, pp += 12) {
        int32_t n = (int32_t)((const uint8_t *)(const void *)w)[0] | ((int32_t)((const uint8_t *)(const void *)w)[1] << 8);
        int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int32_t c, i, t;
        w += 2;
        while (n > 0) {
            const int32_t m = n < 4 ? n : 4;
            const uint8_t *idx = (const uint8_t *)(const void *)w;
            w += m;
            for (c = 0; c < 4; c++, w += 4 * m) {
                for (i = 0; i < m; i++) {
                    for (t = 0; t < 4; t++) {
                        /* products of magnitude at most 128 * 128; partial sums within 128 * sum|w| */
                        acc[c] += (int32_t)xa[4 * idx[i] + t] * w[4 * i + t];
                        if (xb != NULL) {
                            acc[4 + c] += (int32_t)xb[4 * idx[i] + t] * w[4 * i + t];
                        }
                    }
                }
            }
            n -= m;
        }
        for (c = 0; c < 4 && o + c < n_out; c++) {
            out_a[o + c] = tinyaot_requantize_s8(acc[c] + pp[c], pp[4 + c], pp[8 + c], q->out_off, q->act_min,
                                                 q->act_max);
            if (xb != NULL) {
                out_b[o + c] = tinyaot_requantize_s8(acc[4 + c] + pp[c], pp[4 + c], pp[8 + c], q->out_off,
                                                     q->act_min, q->act_max);
            }
        }
    }
}

#endif

#endif /* TINYAOT_MVE_BLOCK_H */
