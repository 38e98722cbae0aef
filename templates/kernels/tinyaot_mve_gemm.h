/*
 * tinyaot int8 kernels: the matrix core of the Helium (MVE) convolution and fully connected kernels
 * (tinyaot_convolve_s8_mve.c, tinyaot_convolve_1x1_s8_mve.c, tinyaot_fully_connected_s8_mve.c).
 *
 * out[o] = requant(bias[o] + sum_{i < k} col[i] * w[o][i]) for every output channel o of one or two columns
 * (an output pixel's im2col window, an input pixel of a 1x1 convolution, a row of a fully connected layer), the
 * filter in the blocked layout described below.
 *
 * The input offset is folded into the bias at compile time (tinyaot/ops/common.py fold_input_offset:
 * bias[o] = b[o] + input_offset * sum(w[o])), so raw int8 activations multiply raw int8 weights: VMLADAVA.S8 does
 * 16 products and their sum into a scalar accumulator per instruction, no offset add and no widening. Four output
 * channels per pass share each 16-byte activation load, and with two columns each weight load is shared by both
 * (eight accumulators; the weights pre-arranged so that one pointer serves the four rows, which leaves enough
 * registers). The last partial 16 activations are loaded with a tail predicate (VCTP.8, zeroing loads), so no
 * column needs padding; when fewer than four channels remain, the block's zero rows are computed and their lanes
 * are not stored (VCTP.32-predicated narrowing store). Requantization is four lanes at a time
 * (tinyaot_mve_support.h).
 *
 * Overflow: VMLADAVA adds modulo 2^32 and the exact result, bias[o] + sum col * w = b[o] + sum (col + input_offset)
 * * w over the unfolded taps, lies within the bound |b| + sum|w| * (128 + |input_offset|) that compress/bounds.py
 * checks against int32 at compile time, so the wrapped int32 sum is exact. The portable path (other cores and the
 * host) accumulates from 0 and adds the bias last: each partial sum is at most 128 * sum|w| in magnitude and the
 * final value is the exact one above, so no signed int32 operation overflows.
 */
#ifndef TINYAOT_MVE_GEMM_H
#define TINYAOT_MVE_GEMM_H

#include "tinyaot_mve_support.h"

typedef struct {
    const int32_t *bias;  /* folded bias, one per output channel; NULL: none */
    const int32_t *mult;  /* one per output channel */
    const int32_t *shift;
    int32_t out_off, act_min, act_max;
} tinyaot_mve_requant;

/* Sets q to a layer's requantization: its folded bias, per-channel multipliers and shifts, and the output offset
   and clamp of its conv/fc params (a macro: the same stores in the same order as written out, the same code). */
#define TINYAOT_MVE_REQUANT_SET(q, bias_, quant_params_, params)                                                  \
    do {                                                                                                          \
        (q).bias = (bias_);                                                                                       \
        (q).mult = (quant_params_)->multiplier;                                                                   \
        (q).shift = (quant_params_)->shift;                                                                       \
        (q).out_off = (params)->output_offset;                                                                    \
        (q).act_min = (params)->activation.min;                                                                   \
        (q).act_max = (params)->activation.max;                                                                   \
    } while (0)

/* Whether a convolution is not one of the Helium 1x1 kernels': a 1x1 filter of in_c channels and out_c rows, no
   padding, and every output pixel (out_h x out_w of them) reading inside the input whatever the strides. A macro
   over the kernel's own locals: the same comparisons in the same order as written out, the same code. */
#define TINYAOT_CONV_1X1_ARGS_BAD(conv_params, input_dims, filter_dims, output_dims, in_c, out_c, out_h, out_w)  \
    ((filter_dims)->h != 1 || (filter_dims)->w != 1 || (filter_dims)->c != (in_c) || (filter_dims)->n != (out_c) || \
     (conv_params)->padding.h != 0 || (conv_params)->padding.w != 0 || (output_dims)->n != (input_dims)->n ||     \
     (out_h) < 1 || (out_w) < 1 || ((out_h)-1) * (conv_params)->stride.h >= (input_dims)->h ||                    \
     ((out_w)-1) * (conv_params)->stride.w >= (input_dims)->w)

/* The two matrix cores, defined once in tinyaot_mve_gemm_s8.c (shared by the conv, 1x1 and fully connected kernels
   of a model, so their code is in flash once):
   tinyaot_mve_gemm1_s8: one column of k values against all n_out filter rows, outputs at out;
   tinyaot_mve_gemm2_s8: n_pairs pairs of columns (column i at col0 + i * col_step, its outputs at
   out0 + i * n_out), two columns per pass so that each weight load serves both. */
#ifdef __cplusplus
extern "C" {
#endif
void tinyaot_mve_gemm1_s8(const int8_t *col, int32_t k, const int8_t *filter, int32_t n_out,
                          const tinyaot_mve_requant *q, int8_t *out);
/* tinyaot_mve_gemm2_s8 with each pixel's outputs out_step bytes after the previous pixel's (a slice of a layer's
   channels: the decoded kernels' tiles). */
void tinyaot_mve_gemm2_strided_s8(const int8_t *col0, int32_t col_step, int32_t n_pairs, int32_t k,
                                  const int8_t *filter, int32_t n_out, int32_t out_step, const tinyaot_mve_requant *q,
                                  int8_t *out0);
/* Inline, not a function of its own: the Helium conv calls it once per pixel pair, where a wrapper's extra call
   would cost ~10 instructions a pair. */
static inline void tinyaot_mve_gemm2_s8(const int8_t *col0, int32_t col_step, int32_t n_pairs, int32_t k,
                                        const int8_t *filter, int32_t n_out, const tinyaot_mve_requant *q,
                                        int8_t *out0)
{
    tinyaot_mve_gemm2_strided_s8(col0, col_step, n_pairs, k, filter, n_out, n_out, q, out0);
}
#ifdef __cplusplus
}
#endif

#if TINYAOT_USE_MVE

/* Requantization constants held in registers across a kernel's channel loop (per-channel multipliers and shifts
   only): the struct's fields are copied into locals because every int8 output store may alias them as far as the
   compiler knows. */
typedef struct {
    const int32_t *bias, *mult, *shift;
    int32_t out_off;
    int32x4_t lo, hi;
} tinyaot_mve_epilogue;

static TINYAOT_ALWAYS_INLINE tinyaot_mve_epilogue tinyaot_mve_epilogue_of(const tinyaot_mve_requant *q)
{
    tinyaot_mve_epilogue e;
    e.bias = q->bias;
    e.mult = q->mult;
    e.shift = q->shift;
    e.out_off = q->out_off;
    e.lo = vdupq_n_s32(q->act_min);
    e.hi = vdupq_n_s32(q->act_max);
    return e;
}

/* Channels o .. o+3 of this block: bias, multipliers and split shifts (lanes past the predicate load as 0). */
typedef struct {
    int32x4_t bias, m, left, right;
} tinyaot_mve_block;

static TINYAOT_ALWAYS_INLINE tinyaot_mve_block tinyaot_mve_block_of(const tinyaot_mve_epilogue *e,
                                                                                     int32_t o, mve_pred16_t p)
{
    tinyaot_mve_block b;
    const int32x4_t s = vldrwq_z_s32(e->shift + o, p);
    b.bias = e->bias ? vldrwq_z_s32(e->bias + o, p) : vdupq_n_s32(0);
    b.m = vldrwq_z_s32(e->mult + o, p);
    b.left = tinyaot_mve_shift_left(s);
    b.right = tinyaot_mve_shift_right(s);
    return b;
}

/* Four sums as one vector (lane i = ai). */
static TINYAOT_ALWAYS_INLINE int32x4_t tinyaot_mve_lanes(int32_t a0, int32_t a1, int32_t a2,
                                                                         int32_t a3)
{
    int32x4_t v = vdupq_n_s32(a0);
    v = vsetq_lane_s32(a1, v, 1);
    v = vsetq_lane_s32(a2, v, 2);
    return vsetq_lane_s32(a3, v, 3);
}

/* Four sums -> four int8 outputs at out (lanes past the predicate not stored). */
static TINYAOT_ALWAYS_INLINE void tinyaot_mve_store4(int32x4_t v, const tinyaot_mve_epilogue *e,
                                                                     const tinyaot_mve_block *b, mve_pred16_t p,
                                                                     int8_t *out)
{
    v = tinyaot_mve_requantize_split(vaddq_s32(v, b->bias), b->m, b->left, b->right);
    v = vqaddq_n_s32(v, e->out_off);
    v = vminq_s32(vmaxq_s32(v, e->lo), e->hi);
    vstrbq_p_s32(out, v, p);
}

/*
 * Requantization of two pixels' sums of channels o .. o+3 (va, vb), clamped, ready for the narrowing stores. The
 * bias, multiplier and shift arrays are read four entries at a time without a predicate: their length is a multiple
 * of four (tinyaot/ops/mve.py pads them with zeros; the padded lanes are never stored). Written out in assembly
 * under GCC because around the eight-accumulator block the compiler has no register left for the three array
 * pointers and spills them (the same instructions as tinyaot_mve_requantize, tinyaot_mve_offset_clamp).
 */
static TINYAOT_ALWAYS_INLINE void tinyaot_mve_requant2(int32x4_t *va, int32x4_t *vb,
                                                                       const tinyaot_mve_epilogue *e, int32_t o)
{
    const int32_t *pb = e->bias + o;
    const int32_t *pm = e->mult + o;
    const int32_t *ps = e->shift + o;
#if defined(__OPTIMIZE__) && TINYAOT_GCC
    int32x4_t a = *va;
    int32x4_t b = *vb;
    __asm__("vldrw.u32 q0, [%[pb]]\n\t"
            "vadd.i32 %q[a], %q[a], q0\n\t"
            "vadd.i32 %q[b], %q[b], q0\n\t"
            "vldrw.u32 q0, [%[ps]]\n\t"
            "vmov.i32 q1, #0\n\t"
            "vmax.s32 q2, q0, q1\n\t"
            "vmin.s32 q1, q0, q1\n\t"
            "vqshl.s32 %q[a], %q[a], q2\n\t"
            "vqshl.s32 %q[b], %q[b], q2\n\t"
            "vldrw.u32 q0, [%[pm]]\n\t"
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
            : [pb] "r"(pb), [pm] "r"(pm), [ps] "r"(ps), [off] "r"(e->out_off), [lo] "w"(e->lo), [hi] "w"(e->hi)
            : "q0", "q1", "q2", "memory");
    *va = a;
    *vb = b;
#else
    const int32x4_t bias = vld1q_s32(pb);
    const int32x4_t m = vld1q_s32(pm);
    const int32x4_t s = vld1q_s32(ps);
    const int32x4_t left = tinyaot_mve_shift_left(s);
    const int32x4_t right = tinyaot_mve_shift_right(s);
    int32x4_t a = tinyaot_mve_requantize_split(vaddq_s32(*va, bias), m, left, right);
    int32x4_t b = tinyaot_mve_requantize_split(vaddq_s32(*vb, bias), m, left, right);
    a = vqaddq_n_s32(a, e->out_off);
    b = vqaddq_n_s32(b, e->out_off);
    *va = vminq_s32(vmaxq_s32(a, e->lo), e->hi);
    *vb = vminq_s32(vmaxq_s32(b, e->lo), e->hi);
#endif
}

/*
 * The filter is pre-arranged at compile time for the four-channel blocks (tinyaot/ops/mve.py block_filter): each row
 * of k values padded with zeros to k16 = k rounded up to a multiple of 16, output channels in blocks of four (the
 * last block padded with zero rows); per block, chunk by chunk, the four rows' 16 values of that chunk in turn. A
 * block is 4 * k16 bytes at filter + o * k16, one pointer serves its four rows (offsets 0, 16, 32, 48), and the last
 * partial chunk is a whole 64-byte chunk too: only its activations need a tail predicate (zeroing load), the zero
 * weights past k make the rest exact. The padding costs (k16 - k) bytes of flash per output channel.
 */

/*
 * n >= 1 whole 16-value chunks of columns xa and xb against the four rows of block w, into the eight accumulators
 * a0..a3 (column xa) and b0..b3 (column xb); xa, xb and w are advanced past them, n ends at 0.
 * Written out in assembly because GCC 12 spills here: VMLADAVA accumulates only into even registers, and the eight
 * accumulators need all of them (r0..r12 and lr), which its doloop (DLS/LE on lr) and register allocation do not
 * manage. "Te" is GCC's even-register constraint for MVE. Per chunk: 2 activation loads, 4 weight loads,
 * 8 VMLADAVA and 2 loop instructions for 128 MACs. Twelve operands: with r7 kept as the frame pointer (a debug build,
 * -fno-omit-frame-pointer) they are every register left, which GCC's allocator finds only with its expensive
 * optimizations (the caller is TINYAOT_TIGHT_ASM). Not at -O0, where the frame pointer leaves too few registers:
 * the same loop in C is used there (and with compilers other than GCC: "Te" is GCC-internal).
 */
#if defined(__OPTIMIZE__) && TINYAOT_GCC
#define TINYAOT_MVE_MAC4X2(xa, xb, w, n, a0, a1, a2, a3, b0, b1, b2, b3)                                          \
    __asm__("1:\n\t"                                                                                             \
            "vldrb.8 q0, [%[pa]], #16\n\t"                                                                       \
            "vldrb.8 q1, [%[pb]], #16\n\t"                                                                       \
            "vldrb.8 q2, [%[pw]], #16\n\t"                                                                       \
            "vmladava.s8 %[r0], q0, q2\n\t"                                                                      \
            "vmladava.s8 %[s0], q1, q2\n\t"                                                                      \
            "vldrb.8 q2, [%[pw]], #16\n\t"                                                                       \
            "vmladava.s8 %[r1], q0, q2\n\t"                                                                      \
            "vmladava.s8 %[s1], q1, q2\n\t"                                                                      \
            "vldrb.8 q2, [%[pw]], #16\n\t"                                                                       \
            "vmladava.s8 %[r2], q0, q2\n\t"                                                                      \
            "vmladava.s8 %[s2], q1, q2\n\t"                                                                      \
            "vldrb.8 q2, [%[pw]], #16\n\t"                                                                       \
            "vmladava.s8 %[r3], q0, q2\n\t"                                                                      \
            "vmladava.s8 %[s3], q1, q2\n\t"                                                                      \
            "subs %[cnt], %[cnt], #1\n\t"                                                                        \
            "bne 1b"                                                                                             \
            : [r0] "+Te"(a0), [r1] "+Te"(a1), [r2] "+Te"(a2), [r3] "+Te"(a3), [s0] "+Te"(b0), [s1] "+Te"(b1),    \
              [s2] "+Te"(b2), [s3] "+Te"(b3), [pa] "+r"(xa), [pb] "+r"(xb), [pw] "+r"(w), [cnt] "+r"(n)          \
            :                                                                                                    \
            : "q0", "q1", "q2", "memory", "cc")
#else
#define TINYAOT_MVE_MAC4X2(xa, xb, w, n, a0, a1, a2, a3, b0, b1, b2, b3)                                          \
    for (; (n) > 0; (n)--) {                                                                                     \
        const int8x16_t va_ = vldrbq_s8(xa);                                                                     \
        const int8x16_t vb_ = vldrbq_s8(xb);                                                                     \
        int8x16_t wv_;                                                                                           \
        (xa) += 16;                                                                                              \
        (xb) += 16;                                                                                              \
        wv_ = vldrbq_s8(w);                                                                                      \
        (a0) = vmladavaq_s8((a0), va_, wv_);                                                                     \
        (b0) = vmladavaq_s8((b0), vb_, wv_);                                                                     \
        wv_ = vldrbq_s8((w) + 16);                                                                               \
        (a1) = vmladavaq_s8((a1), va_, wv_);                                                                     \
        (b1) = vmladavaq_s8((b1), vb_, wv_);                                                                     \
        wv_ = vldrbq_s8((w) + 32);                                                                               \
        (a2) = vmladavaq_s8((a2), va_, wv_);                                                                     \
        (b2) = vmladavaq_s8((b2), vb_, wv_);                                                                     \
        wv_ = vldrbq_s8((w) + 48);                                                                               \
        (a3) = vmladavaq_s8((a3), va_, wv_);                                                                     \
        (b3) = vmladavaq_s8((b3), vb_, wv_);                                                                     \
        (w) += 64;                                                                                               \
    }
#endif

#else /* portable C: the same integers, for the host and cores without MVE */

/* Value i of filter row o in the blocked layout described above. */
static inline int8_t tinyaot_mve_filter_at(const int8_t *filter, int32_t k, int32_t o, int32_t i)
{
    const int32_t k16 = (k + 15) & ~15;
    return filter[(o & ~3) * k16 + (i >> 4) * 64 + (o & 3) * 16 + (i & 15)];
}

#endif

#endif /* TINYAOT_MVE_GEMM_H */
