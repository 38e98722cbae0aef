/*
 * tinyaot int8 kernels over compressed weights: the machinery shared by the conv, depthwise conv and fully
 * connected kernels of every storage kind (tinyaot/compress/storage.py defines the kinds, tinyaot_nn_types.h the
 * weight structs). Included by the compressed kernels only; each kernel file adds its kind's decoder.
 *
 * Weights are decoded on the fly, from flash, in the order the storage keeps them; nothing is expanded into RAM.
 * Every kernel computes exactly the integers of its dense twin (the same int32 sums of (x + input_offset) * w, in
 * any order: no intermediate can wrap, see tinyaot_nn_support.h), then the same requantization, so it is bit-exact
 * with the dense kernel and the numpy reference on the decoded weights.
 *
 * How each op visits its weights, and why (instruction counts: tests/ops/test_compressed_kernels.py, under QEMU):
 *
 *   Conv (standard, pointwise, grouped): im2col over four output pixels at once. The windows of four consecutive
 *   output pixels (raster order) are copied into a column of K = kh*kw*in_ch/groups positions of int16 values
 *   x + input_offset (0 for padding), and each output channel is then one sequential pass over its compressed row
 *   against the column: every decoded weight serves four pixels, so decoding is shared four ways, sparse rows
 *   touch only their nonzero positions, and no window clipping is left in the inner loop. Two column layouts:
 *   by position for run-length sparsity (one doubleword load gives the four pixels a stored value multiplies, four
 *   SMLABB/SMLATB) and by position pair for int4, clustered and bitmap sparsity (each pixel's two positions in one
 *   word, so a pair of decoded weights takes one SMLAD per pixel; a bitmap pair with one nonzero one SMLABB or
 *   SMLATB). With scratch (8 * ceil_even(K) bytes, tinyaot_cw_buffer_size)
 *   the column is filled once per four pixels for all output channels; without it a 16-position column on the
 *   stack is refilled per channel (same result, slower). Output pixels are produced in raster order four at a time
 *   (aligned at multiples of four from each batch's first pixel); a finished group's windows are never read again
 *   (groups > 1: group by group, as the dense kernel's im2col path).
 *
 *   Depthwise conv, in groups of up to 16 output pixels (raster order, aligned at multiples of 16 from each batch's
 *   first pixel): windows of up to 64 taps decode four output channels' taps once per group into a small stack
 *   tile and run it like the dense kernel (per pixel the valid rectangle, four channels per word); the sparse kinds
 *   skip taps whose four weights are zero. Larger windows go channel by channel over lists of nonzero taps.
 *   Rows are the storage's per-channel tap rows (storage.py: rows()), int4 the 1HWC nibbles.
 *
 *   Fully connected: per output channel one sequential pass over its compressed row against the int8 input; on DSP
 *   cores int4 and clustered weights are paired for SMLAD against SXTAB16-unpacked inputs.
 *
 * Sparse rows skip their zeros: the bitmap conv dispatches on four bitmap bits (two position pairs) at a time
 * through a 16-way switch (a jump table: a few instructions per four positions, none per zero), the bitmap fully connected finds set bits with
 * RBIT + CLZ on DSP cores, the run-length kinds add each run to a pointer. Executed instructions fall with sparsity.
 */
#ifndef TINYAOT_NN_COMPRESSED_H
#define TINYAOT_NN_COMPRESSED_H

#include "tinyaot_nn.h"
#include "tinyaot_dw3_support.h"

/* ---------------------------------------------------------------------------------------------------------------
 * Decoding primitives
 * ------------------------------------------------------------------------------------------------------------- */
/* The low / high nibble of byte b (0..255) as a two's-complement 4-bit value: shift the nibble to the top of the
   word and shift back arithmetically (a single SBFX on Armv7-M). */
static inline int32_t tinyaot_s4_lo(uint32_t b) { return (int32_t)(b << 28) >> 28; }
static inline int32_t tinyaot_s4_hi(uint32_t b) { return (int32_t)(b << 24) >> 28; }

/* Index i (bits wide, 1..8) of a little-endian bit stream: bits [i*bits, (i+1)*bits), bit j of the stream is bit
   j % 8 of byte j / 8. The second byte is read only when the index straddles into it (never past the stream). */
static inline uint32_t tinyaot_index_at(const uint8_t *p, int32_t i, int32_t bits)
{
    const int32_t bit = i * bits;
    const int32_t sh = bit & 7;
    uint32_t v = (uint32_t)p[bit >> 3] >> sh;
    if (sh + bits > 8) {
        v |= (uint32_t)p[(bit >> 3) + 1] << (8 - sh);
    }
    return v & ((1u << bits) - 1u);
}

/* The kinds' decoders are inlined into the drivers below (called once per output channel and pixel group, an
   out-of-line call and its register saves cost as much as a sparse row's work). */

/* The run-length fully connected decoder runs once per output channel over a whole row: inlined on DSP cores;
   kept out of line on the others, whose eight low registers cannot hold the requantization loop and the decoder
   at once (measured on Cortex-M0, 50 % sparse: inlined, it took 9.1 instead of 6.6 instructions per weight). */
#if TINYAOT_USE_DSP
#define TINYAOT_FC_DECODER TINYAOT_ALWAYS_INLINE
#else
#define TINYAOT_FC_DECODER TINYAOT_NOINLINE
#endif

/* Where a decoder stands in a row; each kind uses the fields it needs. */
typedef struct {
    const uint8_t *bytes;      /* packed indices (clustered), bitmap (sparse) or runs (rle) at the current point */
    const int8_t *values;      /* codebook of the row's group (clustered) or next stored value (sparse, rle) */
    const int8_t *values_end;  /* one past the row's last stored value (sparse, rle) */
    int32_t pos;               /* int4: absolute nibble index; rle: row position just after the last value used */
    int32_t base;              /* rle: row position of the column's first position (chunked conv) */
    int32_t t;                 /* depthwise: next tap position to decode; rle conv: the row's length */
} tinyaot_cursor;

/* Runs STEP(k) for each set bit k of the 4-bit mask m (0..15), in increasing k. A switch over all 16 masks
   compiles to a jump table (TBB/TBH on Armv7-M, no range check since every value has its case): a few
   instructions per four positions whatever their sparsity, and nothing per zero, where a bit-scan loop costs
   several instructions per nonzero. */
#define TINYAOT_FOR_BITS4(m, STEP)                                                                                    \
    switch (m) {                                                                                                      \
    case 0: break;                                                                                                    \
    case 1: STEP(0); break;                                                                                           \
    case 2: STEP(1); break;                                                                                           \
    case 3: STEP(0); STEP(1); break;                                                                                  \
    case 4: STEP(2); break;                                                                                           \
    case 5: STEP(0); STEP(2); break;                                                                                  \
    case 6: STEP(1); STEP(2); break;                                                                                  \
    case 7: STEP(0); STEP(1); STEP(2); break;                                                                         \
    case 8: STEP(3); break;                                                                                           \
    case 9: STEP(0); STEP(3); break;                                                                                  \
    case 10: STEP(1); STEP(3); break;                                                                                 \
    case 11: STEP(0); STEP(1); STEP(3); break;                                                                        \
    case 12: STEP(2); STEP(3); break;                                                                                 \
    case 13: STEP(0); STEP(2); STEP(3); break;                                                                        \
    case 14: STEP(1); STEP(2); STEP(3); break;                                                                        \
    default: STEP(0); STEP(1); STEP(2); STEP(3); break;                                                               \
    }

/* ---------------------------------------------------------------------------------------------------------------
 * Conv: four-pixel im2col columns and the driver
 * ------------------------------------------------------------------------------------------------------------- */
/* Positions of the stack column used without scratch: a multiple of 16, so every chunk of a row starts on a byte
   boundary of any packing (16 positions are 2 * bits bytes of indices, 8 bytes of nibbles, 2 bytes of bitmap). */
#define TINYAOT_CW_CHUNK 16

/* Column layouts (int16 values x + input_offset of four pixels p = 0..3, 0 for padding):
   - by position (run-length sparsity, which visits scattered positions one at a time): position j at col[4j + p], so one doubleword
     load gives the four lanes a stored value multiplies (SMLABB / SMLATB);
   - by position pair (int4, clustered, and bitmap sparsity, which visits aligned pairs): positions 2i, 2i+1 of pixel p at
     col[8i + 2p], col[8i + 2p + 1], so one word holds the pair SMLAD multiplies with a pair of weights: two
     multiply-accumulates per instruction. An odd last position is paired with a 0. */
#define TINYAOT_CW_BY_POSITION 0
#define TINYAOT_CW_BY_PAIR 1

/* Two int16 lanes in one word: lo in bits 0..15, hi in bits 16..31 (what SMLABB / SMLATB / SMLAD read). GCC
   compiles the C to UXTH + ORR; PKHBT does it in one (not volatile: scheduled and eliminated like an expression). */
static inline int32_t tinyaot_pack16x2(int32_t lo, int32_t hi)
{
#if TINYAOT_USE_DSP && TINYAOT_GNU
    int32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
#else
    return (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
#endif
}

/* p[0] = lo, p[1] = hi (int16): one word store on DSP cores (p 4-byte aligned there: pair starts are). */
static inline void tinyaot_store16x2(int16_t *p, int32_t lo, int32_t hi)
{
#if TINYAOT_USE_DSP
    const int32_t v = tinyaot_pack16x2(lo, hi);
#if TINYAOT_GNU
    __builtin_memcpy(p, &v, 4);
#else
    memcpy(p, &v, 4);
#endif
#else
    p[0] = (int16_t)lo;
    p[1] = (int16_t)hi;
#endif
}

#if TINYAOT_USE_DSP
/* Two words of int16 pairs (8 bytes at c, 4-byte aligned) and, with the pointer form, c += 4. GCC splits an 8-byte
   memcpy into two loads with their own address arithmetic; the inline LDRD with post-increment is one instruction
   (Armv7-M allows LDRD at any word-aligned address). The "m" operand tells the compiler which bytes it reads. */
typedef struct {
    int32_t w[2];
} tinyaot_2words;
#if TINYAOT_GNU
#define TINYAOT_LOAD2_INC(c, lo, hi)                                                                                  \
    __asm__("ldrd %0, %1, [%2], #8" : "=&r"(lo), "=&r"(hi), "+r"(c) : "m"(*(const tinyaot_2words *)(const void *)(c)))
#else
#define TINYAOT_LOAD2_INC(c, lo, hi)                                                                                  \
    do {                                                                                                              \
        lo = tinyaot_read_s16x2(c);                                                                                   \
        hi = tinyaot_read_s16x2((c) + 2);                                                                             \
        (c) += 4;                                                                                                     \
    } while (0)
#endif
#endif

/* By position: a0..a3 += (the four lanes at c) * w. Plain word loads at constant offsets from c, for code that
   visits positions at offsets known at compile time (the bitmap kernels' unrolled nibbles). */
#if TINYAOT_USE_DSP
#define TINYAOT_MAC4(c, w)                                                                                            \
    do {                                                                                                              \
        const int32_t x01_ = tinyaot_read_s16x2(c);                                                                   \
        const int32_t x23_ = tinyaot_read_s16x2((c) + 2);                                                             \
        a0 = __smlabb(x01_, (w), a0);                                                                                 \
        a1 = __smlatb(x01_, (w), a1);                                                                                 \
        a2 = __smlabb(x23_, (w), a2);                                                                                 \
        a3 = __smlatb(x23_, (w), a3);                                                                                 \
    } while (0)
#else
#define TINYAOT_MAC4(c, w)                                                                                            \
    do {                                                                                                              \
        a0 += (c)[0] * (w);                                                                                           \
        a1 += (c)[1] * (w);                                                                                           \
        a2 += (c)[2] * (w);                                                                                           \
        a3 += (c)[3] * (w);                                                                                           \
    } while (0)
#endif

/* By position: a0..a3 += (the four lanes at c) * w, then c moves to the next position (one LDRD on DSP cores). */
#if TINYAOT_USE_DSP
#define TINYAOT_MAC4_INC(c, w)                                                                                        \
    do {                                                                                                              \
        int32_t x01_, x23_;                                                                                           \
        TINYAOT_LOAD2_INC(c, x01_, x23_);                                                                             \
        a0 = __smlabb(x01_, (w), a0);                                                                                 \
        a1 = __smlatb(x01_, (w), a1);                                                                                 \
        a2 = __smlabb(x23_, (w), a2);                                                                                 \
        a3 = __smlatb(x23_, (w), a3);                                                                                 \
    } while (0)
#else
#define TINYAOT_MAC4_INC(c, w)                                                                                        \
    do {                                                                                                              \
        a0 += (c)[0] * (w);                                                                                           \
        a1 += (c)[1] * (w);                                                                                           \
        a2 += (c)[2] * (w);                                                                                           \
        a3 += (c)[3] * (w);                                                                                           \
        (c) += 4;                                                                                                     \
    } while (0)
#endif

/* By pair: a0..a3 += lanes (2p, 2p+1) at c times (w0, w1), then c moves to the next pair. */
#if TINYAOT_USE_DSP
#define TINYAOT_MAC4P_INC(c, w0, w1)                                                                                  \
    do {                                                                                                              \
        const int32_t wp_ = tinyaot_pack16x2((w0), (w1));                                                             \
        int32_t x0_, x1_, x2_, x3_;                                                                                   \
        TINYAOT_LOAD2_INC(c, x0_, x1_);                                                                               \
        TINYAOT_LOAD2_INC(c, x2_, x3_);                                                                               \
        a0 = __smlad(x0_, wp_, a0);                                                                                   \
        a1 = __smlad(x1_, wp_, a1);                                                                                   \
        a2 = __smlad(x2_, wp_, a2);                                                                                   \
        a3 = __smlad(x3_, wp_, a3);                                                                                   \
    } while (0)
#else
#define TINYAOT_MAC4P_INC(c, w0, w1)                                                                                  \
    do {                                                                                                              \
        const int32_t v0_ = (w0);                                                                                     \
        const int32_t v1_ = (w1);                                                                                     \
        a0 += (c)[0] * v0_ + (c)[1] * v1_;                                                                            \
        a1 += (c)[2] * v0_ + (c)[3] * v1_;                                                                            \
        a2 += (c)[4] * v0_ + (c)[5] * v1_;                                                                            \
        a3 += (c)[6] * v0_ + (c)[7] * v1_;                                                                            \
        (c) += 8;                                                                                                     \
    } while (0)
#endif

/* A kind's conv decoder. begin: put the cursor at the start of output channel `row` (row_len = K positions).
   dot4: acc[p] += sum over the next n positions of the row of w * the column's pixel p, advancing the cursor; col
   holds exactly those n positions in the kind's layout. n is a multiple of TINYAOT_CW_CHUNK except at the end of
   the row. */
typedef void (*tinyaot_cw_begin_fn)(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur);
typedef void (*tinyaot_cw_dot4_fn)(const void *weights, tinyaot_cursor *cur, const int16_t *col, int32_t n,
                                   int32_t acc[4]);

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_w, ker_c;
    int32_t dil_h, dil_w;
    int32_t in_off;
    int32_t layout; /* TINYAOT_CW_BY_POSITION or TINYAOT_CW_BY_PAIR */
} tinyaot_cw_geom;

/* Scratch the compressed conv kernels can use: the four-pixel column, 8 bytes per position (K rounded up to even
   for the pair layout). */
static inline int32_t tinyaot_cw_buffer_size(const tinyaot_dims *filter_dims)
{
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    return 8 * (k + (k & 1));
}

/* Pair layout: positions j .. j+run-1 of one pixel's lane (lane = col + 2p: position j at lane[8 (j >> 1) + (j & 1)])
   = src[0 .. run-1] + off, or zeros when src is NULL. The bulk goes four positions (two pairs) per step: on DSP
   cores one word load, two SXTAB16 (bytes 0, 2 and 1, 3 plus the offset in both lanes), two PKH (the pairs 0, 1 and
   2, 3) and two word stores, about two instructions per value where a byte at a time took six. */
static inline void tinyaot_cw_copy_pairs(int16_t *lane, int32_t j, const int8_t *src, int32_t run, int32_t off)
{
    int16_t *d = lane + 8 * (j >> 1) + (j & 1);
    if (run <= 0) {
        return;
    }
    if (j & 1) { /* finish the pair a previous run started */
        *d = (int16_t)(src ? (int32_t)*src++ + off : 0);
        d += 7; /* the next pair's first lane */
        run--;
    }
    if (src == NULL) {
        for (; run >= 2; run -= 2, d += 8) {
            tinyaot_store16x2(d, 0, 0);
        }
        if (run) {
            *d = 0;
        }
        return;
    }
#if TINYAOT_USE_DSP
    {
        const int32_t off2 = tinyaot_dup16(off);
        for (; run >= 4; run -= 4, src += 4, d += 16) {
            const int32_t xv = tinyaot_read_s8x4(src);
            const int32_t x02 = __sxtab16(off2, xv);               /* (x0, x2) + off: |x + off| <= 255 fits int16 */
            const int32_t x13 = tinyaot_sxtab16_ror8(off2, xv);    /* (x1, x3) + off */
            tinyaot_write_s16x2(d, tinyaot_pack16x2(x02, x13));    /* (x0, x1) */
            tinyaot_write_s16x2(d + 8, (int32_t)(((uint32_t)x02 >> 16) | ((uint32_t)x13 & 0xFFFF0000u))); /* (x2, x3) */
        }
    }
#endif
    for (; run >= 2; run -= 2, src += 2, d += 8) {
        tinyaot_store16x2(d, (int32_t)src[0] + off, (int32_t)src[1] + off);
    }
    if (run) { /* the first of a pair the next run (or the closing zero) finishes */
        *d = (int16_t)((int32_t)src[0] + off);
    }
}

/* Column positions [j0, j0 + n) (stored from col[0]) of the windows of pixels p < npx (window origins base_y[p],
   base_x[p]; pixels npx..3 are zeros), input channels in_g .. in_g + ker_c - 1. Positions run in the filter's
   OHWI order, so a window is a series of runs of up to ker_c contiguous input bytes; without groups and
   horizontal dilation (in_c == ker_c, dil_w == 1) the valid taps that follow each other in a kernel row are one
   run (a 1-channel input's kw taps included). Out of line: it runs once per four pixels (with scratch), and
   inlined it would crowd the per-channel loop's registers. */
static TINYAOT_NOINLINE void tinyaot_cw_fill(int16_t *col, const tinyaot_cw_geom *g, const int8_t *in_b,
                                             const int32_t *base_y, const int32_t *base_x, int32_t npx, int32_t in_g,
                                             int32_t j0, int32_t n)
{
    const int32_t pair = (g->layout == TINYAOT_CW_BY_PAIR);
    const int32_t off = g->in_off;
    const int32_t ker_c = g->ker_c;
    const int32_t rows_merge = (g->in_c == ker_c && g->dil_w == 1); /* taps of a kernel row are contiguous */
    int32_t p;
    for (p = 0; p < 4; p++) {
        /* pixel p's lane: position j at col[lane + (pair ? 8 * (j >> 1) + (j & 1) : 4 * j)] */
        int16_t *dst = col + (pair ? 2 * p : p);
        int32_t tap = j0 / ker_c;
        int32_t ci = j0 - tap * ker_c;
        int32_t ky = tap / g->k_w;
        int32_t kx = tap - ky * g->k_w;
        int32_t j = 0;
        while (j < n) {
            int32_t run = tinyaot_min_i32(ker_c - ci, n - j);
            const int8_t *src = NULL;
            if (p < npx) {
                const int32_t iy = base_y[p] + ky * g->dil_h;
                const int32_t ix = base_x[p] + kx * g->dil_w;
                if (iy >= 0 && iy < g->in_h && ix >= 0 && ix < g->in_w) {
                    src = in_b + (iy * g->in_w + ix) * g->in_c + in_g + ci;
                    if (rows_merge) { /* the next taps of the row, while inside the input and the chunk */
                        int32_t nx = ix + 1;
                        while (kx + 1 < g->k_w && nx < g->in_w && j + run < n) {
                            run += tinyaot_min_i32(ker_c, n - j - run);
                            kx++;
                            nx++;
                        }
                    }
                }
            }
            if (pair) {
                tinyaot_cw_copy_pairs(dst, j, src, run, off);
            } else {
                int32_t r;
                if (src != NULL) {
                    for (r = 0; r < run; r++) {
                        dst[4 * (j + r)] = (int16_t)((int32_t)src[r] + off);
                    }
                } else {
                    for (r = 0; r < run; r++) {
                        dst[4 * (j + r)] = 0;
                    }
                }
            }
            j += run;
            ci = 0; /* a run ends at a tap's end or at the chunk's (after which the loop ends) */
            if (++kx == g->k_w) {
                kx = 0;
                ky++;
            }
        }
        if (pair && (n & 1)) {
            dst[8 * (n >> 1) + 1] = 0; /* the odd last position's partner */
        }
    }
}

/* One group of up to four output pixels of one channel group: everything the per-channel loop needs. */
typedef struct {
    const void *weights;
    int16_t *col;
    int32_t k, cap;         /* positions per row; column capacity (k: filled once, else chunks of cap) */
    const tinyaot_cw_geom *g;
    const int8_t *in_b;
    const int32_t *base_y, *base_x;
    int32_t npx, in_g;
    int32_t o_begin, o_end; /* output channels */
    const int32_t *bias, *mult, *shift;
    int8_t *out_px;         /* output of the group's first pixel, channel 0 */
    int32_t out_c, out_off, act_min, act_max;
} tinyaot_cw_job;

/* The output channels of one pixel group. Out of line with few live values, so the decoder inlined into it keeps
   its pointers and four accumulators in registers; each kernel file calls it from one place with constant
   begin/dot4, which GCC propagates (-O2 IPA constant propagation) and then inlines. */
static TINYAOT_NOINLINE void tinyaot_cw_rows(const tinyaot_cw_job *job, tinyaot_cw_begin_fn begin,
                                             tinyaot_cw_dot4_fn dot4)
{
    const void *weights = job->weights;
    const int32_t k = job->k;
    const int32_t cap = job->cap;
    const int32_t npx = job->npx;
    const int32_t out_c = job->out_c;
    int8_t *const out_px = job->out_px;
    int32_t o;
    for (o = job->o_begin; o < job->o_end; o++) {
        const int32_t b0 = job->bias ? job->bias[o] : 0;
        int32_t acc[4];
        tinyaot_cursor cur;
        acc[0] = b0;
        acc[1] = b0;
        acc[2] = b0;
        acc[3] = b0;
        begin(weights, o, k, &cur);
        int32_t j0;
        for (j0 = 0; j0 < k; j0 += cap) { /* once when the whole column is filled; one call site, one inlined copy */
            const int32_t n = tinyaot_min_i32(cap, k - j0);
            if (cap < k) {
                tinyaot_cw_fill(job->col, job->g, job->in_b, job->base_y, job->base_x, npx, job->in_g, j0, n);
            }
            dot4(weights, &cur, job->col, n, acc);
        }
        const int32_t m = job->mult[o];
        const int32_t sh = job->shift[o];
        int32_t p;
        for (p = 0; p < npx; p++) {
            out_px[p * out_c + o] = tinyaot_requantize_s8(acc[p], m, sh, job->out_off, job->act_min, job->act_max);
        }
    }
}

/* The conv driver: dims checks, pixel groups, columns; `begin`/`dot4` are the kind's decoder. */
static inline tinyaot_status tinyaot_cw_conv(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params,
                                             const tinyaot_dims *input_dims, const int8_t *input,
                                             const tinyaot_dims *filter_dims, const void *weights, const int32_t *bias,
                                             const tinyaot_dims *output_dims, int8_t *output, int32_t layout,
                                             tinyaot_cw_begin_fn begin, tinyaot_cw_dot4_fn dot4)
{
    const int32_t batches = input_dims->n;
    const int32_t out_c = filter_dims->n;
    const int32_t ker_c = filter_dims->c;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    const int32_t stride_h = conv_params->stride.h;
    const int32_t stride_w = conv_params->stride.w;
    int32_t local_col[2 * TINYAOT_CW_CHUNK]; /* int16 column, declared as words for its alignment */
    int32_t base_y[4];
    int32_t base_x[4];
    tinyaot_cw_geom g;
    tinyaot_cw_job job;

    if (ker_c <= 0 || input_dims->c % ker_c != 0 || output_dims->c != out_c || stride_h <= 0 || stride_w <= 0 ||
        conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || filter_dims->h <= 0 ||
        filter_dims->w <= 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t groups = input_dims->c / ker_c;
    if (out_c % groups != 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t out_c_g = out_c / groups;
    const int32_t k = filter_dims->h * filter_dims->w * ker_c;
    g.in_h = input_dims->h;
    g.in_w = input_dims->w;
    g.in_c = input_dims->c;
    g.k_w = filter_dims->w;
    g.ker_c = ker_c;
    g.dil_h = conv_params->dilation.h;
    g.dil_w = conv_params->dilation.w;
    g.in_off = conv_params->input_offset;
    g.layout = layout;

    job.weights = weights;
    job.k = k;
    /* the whole column in scratch (filled once per four pixels), else TINYAOT_CW_CHUNK positions on the stack */
    job.col = (int16_t *)(void *)local_col;
    job.cap = TINYAOT_CW_CHUNK;
    if (ctx != NULL && ctx->buf != NULL && ((uintptr_t)ctx->buf & 3u) == 0 &&
        ctx->size >= tinyaot_cw_buffer_size(filter_dims)) {
        job.col = (int16_t *)ctx->buf;
        job.cap = k;
    }
    job.g = &g;
    job.base_y = base_y;
    job.base_x = base_x;
    job.bias = bias;
    job.mult = quant_params->multiplier;
    job.shift = quant_params->shift;
    job.out_c = out_c;
    job.out_off = conv_params->output_offset;
    job.act_min = conv_params->activation.min;
    job.act_max = conv_params->activation.max;
    const int32_t n_pix = out_h * out_w;

    int32_t b;
    for (b = 0; b < batches; b++) {
        job.in_b = input + b * g.in_h * g.in_w * g.in_c;
        int32_t grp;
        for (grp = 0; grp < groups; grp++) {
            job.in_g = grp * ker_c;
            job.o_begin = grp * out_c_g;
            job.o_end = job.o_begin + out_c_g;
            int32_t oy = 0;
            int32_t ox = 0; /* position of pixel q0 */
            int32_t q0;
            for (q0 = 0; q0 < n_pix; q0 += 4) {
                int32_t p;
                job.npx = tinyaot_min_i32(4, n_pix - q0);
                for (p = 0; p < job.npx; p++) {
                    base_y[p] = oy * stride_h - conv_params->padding.h;
                    base_x[p] = ox * stride_w - conv_params->padding.w;
                    if (++ox == out_w) {
                        ox = 0;
                        oy++;
                    }
                }
                if (job.cap >= k) {
                    tinyaot_cw_fill(job.col, &g, job.in_b, base_y, base_x, job.npx, job.in_g, 0, k);
                }
                job.out_px = output + (b * n_pix + q0) * out_c;
                tinyaot_cw_rows(&job, begin, dot4);
            }
        }
    }
    return TINYAOT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Depthwise conv: nonzero-tap lists run over groups of output pixels
 * ------------------------------------------------------------------------------------------------------------- */
#define TINYAOT_DW_GROUP 16 /* output pixels per decode of a channel's taps (planner: tinyaot/ops/compressed.py) */
#define TINYAOT_DW_TAPS 32  /* nonzero taps decoded per pass of the per-channel lists (windows over 64 taps) */

/* A decoded tap: the kind's decoder writes the tap position t (ky * kw + kx) in `off` and the nonzero weight; the
   driver then turns t into the input offset of the tap. */
typedef struct {
    int32_t off;
    int32_t w;
} tinyaot_tap;

/* Appends tap t with weight w at taps[n] (n counts them) unless w is zero. */
#define TINYAOT_TAP_PUSH(taps, n, t, w)                                                                           \
    do {                                                                                                          \
        if ((w) != 0) {                                                                                           \
            (taps)[n].off = (t);                                                                                  \
            (taps)[n].w = (w);                                                                                    \
            (n)++;                                                                                                \
        }                                                                                                         \
    } while (0)

/* A kind's depthwise decoder. begin: cursor at the start of output channel oc's tap row (row_len = kh * kw taps;
   out_c channels). decode: the next nonzero taps of the row, at most max, in increasing position; fewer than max
   means the row is finished. */
typedef void (*tinyaot_dw_begin_fn)(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                    tinyaot_cursor *cur);
typedef int32_t (*tinyaot_dw_decode_fn)(const void *weights, int32_t oc, int32_t out_c, int32_t row_len,
                                        tinyaot_cursor *cur, tinyaot_tap *taps, int32_t max);

/* One group of output pixels: everything the per-channel loop needs. */
typedef struct {
    const void *weights;
    const int8_t *in_b;
    int32_t in_row, in_c, k_h, k_w, dil_h, dil_w, in_off, ch_mult;
    const int32_t *pbase;  /* per pixel: input index of the window origin, channel 0 (negative in the padding) */
    const uint32_t *pbox;  /* per pixel: valid taps ky0 | ky1 << 8 | kx0 << 16 | kx1 << 24; 0 when all are */
    const int32_t *pfirst; /* per pixel: input index of the first valid tap, channel 0 */
    const int32_t *pshape; /* per pixel: first valid tap index | valid rows << 10 | valid columns << 20 */
    int32_t npx;
    int8_t *out;           /* output of the group's first pixel, channel 0 */
    int32_t out_c;
    const int32_t *bias, *mult, *shift;
    int32_t out_off, act_min, act_max;
} tinyaot_dw_job;

/* sum over the n taps of x[off] * w for an interior window (the input offset is folded out by the caller) */
static inline int32_t tinyaot_dw_taps1(const int8_t *x, const tinyaot_tap *tp, int32_t n, int32_t a)
{
    const tinyaot_tap *const end = tp + n;
    for (; tp < end; tp++) {
        a += (int32_t)x[tp->off] * tp->w;
    }
    return a;
}

/* Windows of more than TINYAOT_DW_TILE_TAPS taps: the output channels of one pixel group one at a time, each
   row decoded in passes of up to TINYAOT_DW_TAPS nonzero taps (kept as input offset and weight, their position as
   ky << 8 | kx for the window test of border pixels) that all the group's pixels accumulate: interior windows with
   the input offset folded out (acc += input_offset * sum(w) + sum(x * w)), border windows testing each tap.
   Out of line with few live values, so the kind's decoder, inlined here (constant begin/decode from the kernel's
   one call site, propagated by GCC at -O2), keeps its registers. */
static TINYAOT_NOINLINE void tinyaot_dw_channels(const tinyaot_dw_job *job, tinyaot_dw_begin_fn begin,
                                                 tinyaot_dw_decode_fn decode)
{
    const int32_t k_w = job->k_w;
    const int32_t row_len = job->k_h * k_w;
    const int32_t npx = job->npx;
    const int32_t in_off = job->in_off;
    const int32_t out_c = job->out_c;
    const int32_t col_step = job->dil_w * job->in_c;
    const int32_t row_step = job->dil_h * job->in_row;
    tinyaot_tap taps[TINYAOT_DW_TAPS];
    int16_t kyx[TINYAOT_DW_TAPS];
    int32_t acc[TINYAOT_DW_GROUP];
    int32_t c = 0; /* input channel of oc */
    int32_t m = 0; /* oc = c * ch_mult + m */
    int32_t oc;
    for (oc = 0; oc < out_c; oc++) {
        const int32_t b0 = job->bias ? job->bias[oc] : 0;
        const int8_t *const x_c = job->in_b + c;
        tinyaot_cursor cur;
        int32_t i;
        int32_t t;
        int32_t n;
        int32_t ky = 0;
        int32_t kx = 0;
        int32_t prev = 0; /* position of (ky, kx), carried across passes */
        for (i = 0; i < npx; i++) {
            acc[i] = b0;
        }
        begin(job->weights, oc, out_c, row_len, &cur);
        do {
            n = decode(job->weights, oc, out_c, row_len, &cur, taps, TINYAOT_DW_TAPS);
            int32_t sum_w = 0;
            for (t = 0; t < n; t++) { /* positions increase: (ky, kx) advance without a division */
                const int32_t pos = taps[t].off;
                for (kx += pos - prev, prev = pos; kx >= k_w; kx -= k_w) {
                    ky++;
                }
                kyx[t] = (int16_t)(ky << 8 | kx);
                taps[t].off = ky * row_step + kx * col_step;
                sum_w += taps[t].w;
            }
            for (i = 0; i < npx; i++) {
                const uint32_t box = job->pbox[i];
                if (box == 0) {
                    acc[i] = tinyaot_dw_taps1(x_c + job->pbase[i], taps, n, acc[i] + in_off * sum_w);
                } else {
                    const int32_t ky0 = (int32_t)(box & 0xFFu);
                    const int32_t ky1 = (int32_t)((box >> 8) & 0xFFu);
                    const int32_t kx0 = (int32_t)((box >> 16) & 0xFFu);
                    const int32_t kx1 = (int32_t)(box >> 24);
                    int32_t a = 0;
                    for (t = 0; t < n; t++) {
                        const int32_t ty = kyx[t] >> 8;
                        const int32_t tx = kyx[t] & 0xFF;
                        if (ty >= ky0 && ty < ky1 && tx >= kx0 && tx < kx1) {
                            a += ((int32_t)x_c[job->pbase[i] + taps[t].off] + in_off) * taps[t].w;
                        }
                    }
                    acc[i] += a;
                }
            }
        } while (n == TINYAOT_DW_TAPS);
        for (i = 0; i < npx; i++) {
            job->out[i * out_c + oc] = tinyaot_requantize_s8(acc[i], job->mult[oc], job->shift[oc], job->out_off,
                                                             job->act_min, job->act_max);
        }
        if (++m == job->ch_mult) {
            m = 0;
            c++;
        }
    }
}

/* Depthwise windows of up to 64 taps: the weights of four consecutive output channels for every tap, decoded once
   per pixel group into a small stack tile (4 bytes per tap, the dense 1HWC order of those channels) and run like
   the dense kernel: per pixel the valid rectangle of taps, four channels per word (SXTB16 / SMLABB / SMLATT on
   DSP cores), no tap tested against the window. The sparse kinds (skip_zero_taps) skip a tap whose four weights
   are all zero, a test per tap; finer skipping, channel by channel over lists of nonzero taps (the path of larger
   windows below), was measured slower than the dense kernel even at 90 % zeros on a 3x3 layer: a 3x3 window has
   too few taps to pay for a list per channel. decode_tile writes tile[4 t + j] = weight of tap t of output
   channel oc + j, for j < nch (<= 4); lanes j >= nch are zero. */
#define TINYAOT_DW_TILE_TAPS 64 /* windows up to 64 taps (8 x 8) use tiles; larger ones the tap lists */
typedef void (*tinyaot_dw_tile_fn)(const void *weights, int32_t oc, int32_t nch, int32_t out_c, int32_t row_len,
                                   int8_t *tile);

static TINYAOT_NOINLINE void tinyaot_dw_quads(const tinyaot_dw_job *job, tinyaot_dw_tile_fn decode_tile,
                                              int skip_zero_taps)
{
    const int32_t k_h = job->k_h;
    const int32_t k_w = job->k_w;
    const int32_t row_len = k_h * k_w;
    const int32_t npx = job->npx;
    const int32_t in_off = job->in_off;
    const int32_t out_c = job->out_c;
    const int32_t col_step = job->dil_w * job->in_c;
    const int32_t row_step = job->dil_h * job->in_row;
    const int32_t ch_mult = job->ch_mult;
    int32_t tile_words[TINYAOT_DW_TILE_TAPS]; /* int8 tile, declared as words for their alignment */
    int8_t *const tile = (int8_t *)(void *)tile_words;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(in_off);
#endif
    int32_t oc;
    for (oc = 0; oc < out_c; oc += 4) {
        const int32_t nch = tinyaot_min_i32(4, out_c - oc);
        int32_t cin[4]; /* input channel of each lane */
        int32_t j;
        for (j = 0; j < 4; j++) {
            cin[j] = (oc + tinyaot_min_i32(j, nch - 1)) / ch_mult;
        }
        decode_tile(job->weights, oc, nch, out_c, row_len, tile);
        /* four consecutive input channels: one word of input per tap */
        const int simd = (ch_mult == 1 && nch == 4);
        const int32_t *const bias_q = job->bias ? job->bias + oc : NULL;
        const int32_t *const mult_q = job->mult + oc;
        const int32_t *const shift_q = job->shift + oc;
        int32_t i;
        for (i = 0; i < npx; i++) {
            const int32_t shape = job->pshape[i];
            const int32_t rows = (shape >> 10) & 0x3FF;
            const int32_t cols = shape >> 20;
            const int8_t *x_row = job->in_b + job->pfirst[i];
            const int8_t *w_row = tile + 4 * (shape & 0x3FF);
            int32_t a0 = 0;
            int32_t a1 = 0;
            int32_t a2 = 0;
            int32_t a3 = 0;
            int32_t r;
            for (r = 0; r < rows; r++, x_row += row_step, w_row += 4 * k_w) {
                const int8_t *x = x_row;
                const int8_t *w = w_row;
                int32_t q;
                if (simd) {
                    x += oc;
                    for (q = 0; q < cols; q++, x += col_step, w += 4) {
#if TINYAOT_USE_DSP
                        const int32_t wv = tinyaot_read_s8x4(w);
                        if (skip_zero_taps && wv == 0) {
                            continue; /* the four channels' weights all zero: ten instructions saved */
                        }
                        const int32_t xv = tinyaot_read_s8x4(x);
                        const int32_t x02 = __sxtab16(off2, xv);
                        const int32_t x13 = tinyaot_sxtab16_ror8(off2, xv);
                        const int32_t w02 = __sxtb16(wv);
                        const int32_t w13 = tinyaot_sxtb16_ror8(wv);
                        a0 = __smlabb(x02, w02, a0);
                        a2 = __smlatt(x02, w02, a2);
                        a1 = __smlabb(x13, w13, a1);
                        a3 = __smlatt(x13, w13, a3);
#else
                        if (skip_zero_taps && (w[0] | w[1] | w[2] | w[3]) == 0) {
                            continue;
                        }
                        a0 += ((int32_t)x[0] + in_off) * w[0];
                        a1 += ((int32_t)x[1] + in_off) * w[1];
                        a2 += ((int32_t)x[2] + in_off) * w[2];
                        a3 += ((int32_t)x[3] + in_off) * w[3];
#endif
                    }
                } else { /* lanes read their own input channels; lanes past nch have zero weights */
                    for (q = 0; q < cols; q++, x += col_step, w += 4) {
                        a0 += ((int32_t)x[cin[0]] + in_off) * w[0];
                        a1 += ((int32_t)x[cin[1]] + in_off) * w[1];
                        a2 += ((int32_t)x[cin[2]] + in_off) * w[2];
                        a3 += ((int32_t)x[cin[3]] + in_off) * w[3];
                    }
                }
            }
            int8_t *out = job->out + i * out_c + oc;
            const int32_t acc[4] = {a0, a1, a2, a3};
            for (j = 0; j < nch; j++) {
                out[j] = tinyaot_requantize_s8(acc[j] + (bias_q ? bias_q[j] : 0), mult_q[j], shift_q[j], job->out_off,
                                               job->act_min, job->act_max);
            }
        }
    }
}

/* The same for 3x3 windows without dilation, channel multiplier 1 and whole groups of four channels (DS-CNN and
   MobileNet depthwise layers), with the tap loops written out: a pixel whose window lies inside the input runs its
   nine taps unrolled (constant tile offsets, no loop counters), a border pixel its valid rows with the row's taps
   picked by a switch on the column count. Same integer sums and requantization as tinyaot_dw_quads, so the same
   results. GCC's pre-allocation scheduler would hoist the nine taps' loads and spill; it is turned off here. */
/* one tap of four channels of the decoded tile, and TINYAOT_DW3_NOSCHED: tinyaot_dw3_support.h */
#define TINYAOT_DW3_TAP(p, t) TINYAOT_DW3_MAC4((p), tile + 4 * (t))

/* The output requantization of four channels, in a short exact form when every one of them allows it: a right
   shift e in 1..30, |acc| < 2^30 and |acc| + 2^(e-1) + 128 * 2^e < 2^31 with |acc| <= |bias| + 9 * 255 * 128 (any
   3x3 window of int8 weights): tinyaot_dw3_short_rq (tinyaot_dw3_support.h, the dense 3x3 kernel's), with
   radd = 2^(e-1) + output_offset * 2^e. Otherwise tinyaot_requantize_s8. */
typedef struct {
    int32_t fast;
    int32_t mult[4], radd[4], e[4];
} tinyaot_dw3_rq;

static void tinyaot_dw3_rq_init(tinyaot_dw3_rq *r, const tinyaot_dw_job *job, int32_t oc)
{
    int32_t j;
    r->fast = 1;
    for (j = 0; j < 4; j++) {
        /* a channel of multiplier 0 outputs its zero point whatever the sums; e = 1 gives that too */
        const int32_t shift = job->mult[oc + j] == 0 ? -1 : job->shift[oc + j];
        const int64_t b = job->bias ? job->bias[oc + j] : 0;
        const int64_t bound = job->mult[oc + j] == 0 ? 0 : (b < 0 ? -b : b) + 9 * 255 * 128;
        r->mult[j] = job->mult[oc + j];
        r->e[j] = 1;
        r->radd[j] = 0;
        /* bound < 2^30 too: the sum below 2^31 does not imply it (a bias near 2^30 with a large right shift,
           e.g. a dead channel's bias 2^30 + 14 with e = 22, found by ci/fuzz.py), and 2acc must fit int32 */
        if (shift > -1 || shift < -30 || bound >= ((int64_t)1 << 30) ||
            bound + ((int64_t)1 << (-shift - 1)) + ((int64_t)128 << -shift) >= ((int64_t)1 << 31)) {
            r->fast = 0;
            continue;
        }
        r->e[j] = -shift;
        r->radd[j] = (int32_t)(((int64_t)1 << (-shift - 1)) + (int64_t)job->out_off * ((int64_t)1 << -shift));
    }
}

static TINYAOT_ALWAYS_INLINE int8_t tinyaot_dw3_rq_out(int32_t acc, const tinyaot_dw3_rq *r, int32_t j,
                                                       const tinyaot_dw_job *job)
{
    /* the dense 3x3 kernel's short form (tinyaot_dw3_support.h), under the bounds tinyaot_dw3_rq_init checked */
    return (int8_t)tinyaot_clamp_i32(tinyaot_dw3_short_rq(acc, r->mult[j], r->radd[j], r->e[j]), job->act_min,
                                     job->act_max);
}

TINYAOT_DW3_NOSCHED static TINYAOT_NOINLINE void tinyaot_dw_quads_3x3(const tinyaot_dw_job *job,
                                                                     tinyaot_dw_tile_fn decode_tile)
{
    const int32_t npx = job->npx;
    const int32_t in_off = job->in_off;
    const int32_t out_c = job->out_c;
    const int32_t in_c = job->in_c;
    const int32_t in_row = job->in_row;
    int32_t tile_words[9]; /* the 3x3 tile of four channels, as words for their alignment */
    const int8_t *const tile = (const int8_t *)(const void *)tile_words;
#if TINYAOT_USE_DSP
    const int32_t off2 = tinyaot_dup16(in_off);
#endif
    int32_t oc;
    for (oc = 0; oc < out_c; oc += 4) {
        decode_tile(job->weights, oc, 4, out_c, 9, (int8_t *)(void *)tile_words);
        tinyaot_dw3_rq rq;
        tinyaot_dw3_rq_init(&rq, job, oc);
        const int32_t *const mult_q = job->mult + oc;
        const int32_t *const shift_q = job->shift + oc;
        int8_t *out = job->out + oc;
        int32_t i;
        for (i = 0; i < npx; i++, out += out_c) {
            const int32_t shape = job->pshape[i];
            const int8_t *x = job->in_b + job->pfirst[i] + oc;
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            if (job->bias) {
                a0 = job->bias[oc];
                a1 = job->bias[oc + 1];
                a2 = job->bias[oc + 2];
                a3 = job->bias[oc + 3];
            }
            if ((shape >> 10) == (3 | 3 << 10)) { /* three rows of three taps: the whole window */
                TINYAOT_DW3_TAP(x, 0);
                TINYAOT_DW3_TAP(x + in_c, 1);
                TINYAOT_DW3_TAP(x + 2 * in_c, 2);
                x += in_row;
                TINYAOT_DW3_TAP(x, 3);
                TINYAOT_DW3_TAP(x + in_c, 4);
                TINYAOT_DW3_TAP(x + 2 * in_c, 5);
                x += in_row;
                TINYAOT_DW3_TAP(x, 6);
                TINYAOT_DW3_TAP(x + in_c, 7);
                TINYAOT_DW3_TAP(x + 2 * in_c, 8);
            } else {
                const int32_t rows = (shape >> 10) & 0x3FF;
                const int32_t cols = shape >> 20;
                int32_t t = shape & 0x3FF; /* the first valid tap */
                int32_t r;
                for (r = 0; r < rows; r++, x += in_row, t += 3) {
                    switch (cols) { /* the row's taps, last first; each case falls through to the ones before */
                    case 3:
                        TINYAOT_DW3_TAP(x + 2 * in_c, t + 2);
                        /* fall through */
                    case 2:
                        TINYAOT_DW3_TAP(x + in_c, t + 1);
                        /* fall through */
                    case 1:
                        TINYAOT_DW3_TAP(x, t);
                        break;
                    default:
                        break;
                    }
                }
            }
            if (rq.fast) {
                out[0] = tinyaot_dw3_rq_out(a0, &rq, 0, job);
                out[1] = tinyaot_dw3_rq_out(a1, &rq, 1, job);
                out[2] = tinyaot_dw3_rq_out(a2, &rq, 2, job);
                out[3] = tinyaot_dw3_rq_out(a3, &rq, 3, job);
                continue;
            }
            out[0] = tinyaot_requantize_s8(a0, mult_q[0], shift_q[0], job->out_off, job->act_min, job->act_max);
            out[1] = tinyaot_requantize_s8(a1, mult_q[1], shift_q[1], job->out_off, job->act_min, job->act_max);
            out[2] = tinyaot_requantize_s8(a2, mult_q[2], shift_q[2], job->out_off, job->act_min, job->act_max);
            out[3] = tinyaot_requantize_s8(a3, mult_q[3], shift_q[3], job->out_off, job->act_min, job->act_max);
        }
    }
}

static inline tinyaot_status tinyaot_dw_conv(const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,
                                             const tinyaot_per_channel_quant_params *quant_params,
                                             const tinyaot_dims *input_dims, const int8_t *input,
                                             const tinyaot_dims *filter_dims, const void *weights, const int32_t *bias,
                                             const tinyaot_dims *output_dims, int8_t *output, tinyaot_dw_begin_fn begin,
                                             tinyaot_dw_decode_fn decode, tinyaot_dw_tile_fn decode_tile, int skip_zero_taps)
{
    const int32_t batches = input_dims->n;
    const int32_t in_h = input_dims->h;
    const int32_t in_w = input_dims->w;
    const int32_t in_c = input_dims->c;
    const int32_t k_h = filter_dims->h;
    const int32_t k_w = filter_dims->w;
    const int32_t out_c = filter_dims->c;
    const int32_t out_w = output_dims->w;
    const int32_t ch_mult = dw_conv_params->ch_mult;
    const int32_t stride_h = dw_conv_params->stride.h;
    const int32_t stride_w = dw_conv_params->stride.w;
    const int32_t dil_h = dw_conv_params->dilation.h;
    const int32_t dil_w = dw_conv_params->dilation.w;
    int32_t pbase[TINYAOT_DW_GROUP];
    uint32_t pbox[TINYAOT_DW_GROUP];
    int32_t pfirst[TINYAOT_DW_GROUP];
    int32_t pshape[TINYAOT_DW_GROUP];
    tinyaot_dw_job job;
    (void)ctx;

    /* window boxes keep ky, kx in bytes (kernels up to 255 x 255); tile shapes need kh * kw < 1024 */
    if (ch_mult <= 0 || out_c != in_c * ch_mult || output_dims->c != out_c || stride_h <= 0 || stride_w <= 0 ||
        dil_h <= 0 || dil_w <= 0 || k_h <= 0 || k_w <= 0 || k_h > 255 || k_w > 255) {
        return TINYAOT_ARG_ERROR;
    }
    job.weights = weights;
    job.in_row = in_w * in_c;
    job.in_c = in_c;
    job.k_h = k_h;
    job.k_w = k_w;
    job.dil_h = dil_h;
    job.dil_w = dil_w;
    job.in_off = dw_conv_params->input_offset;
    job.ch_mult = ch_mult;
    job.pbase = pbase;
    job.pbox = pbox;
    job.pfirst = pfirst;
    job.pshape = pshape;
    job.out_c = out_c;
    job.bias = bias;
    job.mult = quant_params->multiplier;
    job.shift = quant_params->shift;
    job.out_off = dw_conv_params->output_offset;
    job.act_min = dw_conv_params->activation.min;
    job.act_max = dw_conv_params->activation.max;
    const int32_t n_pix = output_dims->h * out_w;

    int32_t b;
    for (b = 0; b < batches; b++) {
        job.in_b = input + b * in_h * job.in_row;
        int32_t oy = 0;
        int32_t ox = 0;
        int32_t q0;
        for (q0 = 0; q0 < n_pix; q0 += TINYAOT_DW_GROUP) {
            int32_t i;
            job.npx = tinyaot_min_i32(TINYAOT_DW_GROUP, n_pix - q0);
            for (i = 0; i < job.npx; i++) {
                const int32_t by = oy * stride_h - dw_conv_params->padding.h;
                const int32_t bx = ox * stride_w - dw_conv_params->padding.w;
                int32_t y0, y1, x0, x1;
                tinyaot_valid_taps(by, k_h, dil_h, in_h, &y0, &y1);
                tinyaot_valid_taps(bx, k_w, dil_w, in_w, &x0, &x1);
                pbase[i] = by * job.in_row + bx * in_c;
                pfirst[i] = 0; /* a window all in the padding: no taps (bias only) */
                pshape[i] = 0;
                if (y1 > y0 && x1 > x0) {
                    pfirst[i] = (by + y0 * dil_h) * job.in_row + (bx + x0 * dil_w) * in_c;
                    pshape[i] = (y0 * k_w + x0) | (y1 - y0) << 10 | (x1 - x0) << 20;
                }
                pbox[i] = (y0 == 0 && y1 == k_h && x0 == 0 && x1 == k_w)
                              ? 0u
                              : (uint32_t)y0 | (uint32_t)y1 << 8 | (uint32_t)x0 << 16 | (uint32_t)x1 << 24;
                if (++ox == out_w) {
                    ox = 0;
                    oy++;
                }
            }
            job.out = output + (b * n_pix + q0) * out_c;
            if (k_h == 3 && k_w == 3 && dil_h == 1 && dil_w == 1 && ch_mult == 1 && out_c % 4 == 0 &&
                !skip_zero_taps) {
                tinyaot_dw_quads_3x3(&job, decode_tile);
            } else if (k_h * k_w <= TINYAOT_DW_TILE_TAPS) {
                tinyaot_dw_quads(&job, decode_tile, skip_zero_taps);
            } else {
                tinyaot_dw_channels(&job, begin, decode);
            }
        }
    }
    return TINYAOT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Fully connected
 * ------------------------------------------------------------------------------------------------------------- */
/* A kind's fully connected decoder: sum over the depth positions of row `row` of (x[j] + x_off) * w[j]. */
typedef int32_t (*tinyaot_fc_dot_fn)(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                     int32_t x_off);

/* A kind's two-row decoder: rows `row` and `row + 1` against the same input, added to *a0 and *a1, so that each
   input load and its unpacking serve two rows (DSP cores, where unpacking the input costs as much as a weight). */
typedef void (*tinyaot_fc_dot2_fn)(const void *weights, int32_t row, int32_t depth, const int8_t *x, int32_t x_off,
                                   int32_t *a0, int32_t *a1);

/* Same contract and filter-offset factoring as tinyaot_fully_connected_s8: sum (x + io) * (w + fo) =
   sum (x + io) * w + fo * sum (x + io), so the decoders only see the stored weights. With `dot2` (NULL: none) and
   `use_dot2` (decided at run time, e.g. on the depth) the rows go two at a time and an odd last row through `dot`;
   integer sums, so the grouping changes no result.
   Each kernel passes its decoders as constants, never a pointer chosen at run time, and this driver is always
   inlined into the kernel, so every call through `dot` and `dot2` becomes a direct call before GCC's inliner meets
   the always_inline decoders. Left out of line (GCC -O1 did so), the decoders were called through a pointer, which
   GCC refuses to build for an always_inline function. The direct `dot2` call is also inlined where GCC finds it
   pays (deploys on stm32, instructions per inference against the pointer chosen at run time: ad_fc_autoencoder
   --weight-bits 4 713,619 -> 700,333, --clusters 16 1,121,873 -> 1,109,333). */
static TINYAOT_ALWAYS_INLINE tinyaot_status tinyaot_fc_run(const tinyaot_fc_params *fc_params,
                                                           const tinyaot_per_channel_quant_params *quant_params,
                                                           int32_t per_channel, const tinyaot_dims *input_dims,
                                                           const int8_t *input, const tinyaot_dims *filter_dims,
                                                           const void *weights, const int32_t *bias,
                                                           const tinyaot_dims *output_dims, int8_t *output,
                                                           tinyaot_fc_dot_fn dot, tinyaot_fc_dot2_fn dot2, int use_dot2)
{
    const int32_t batches = input_dims->n;
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    const int32_t in_off = fc_params->input_offset;
    const int32_t w_off = fc_params->filter_offset;
    const int32_t out_off = fc_params->output_offset;
    const int32_t act_min = fc_params->activation.min;
    const int32_t act_max = fc_params->activation.max;
    const int32_t *mult = quant_params->multiplier;
    const int32_t *shift = quant_params->shift;
    const int32_t q_step = per_channel ? 1 : 0;

    if (input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != out_c) {
        return TINYAOT_ARG_ERROR;
    }
    int32_t b;
    for (b = 0; b < batches; b++) {
        const int8_t *x = input + b * depth;
        int8_t *out = output + b * out_c;
        int32_t corr = 0;
        if (w_off != 0) {
            int32_t s = 0;
            int32_t j;
            for (j = 0; j < depth; j++) {
                s += x[j];
            }
            corr = w_off * (s + depth * in_off);
        }
        int32_t o = 0;
        if (dot2 != NULL && use_dot2) {
            for (; o + 1 < out_c; o += 2) {
                int32_t acc0 = (bias ? bias[o] : 0) + corr;
                int32_t acc1 = (bias ? bias[o + 1] : 0) + corr;
                dot2(weights, o, depth, x, in_off, &acc0, &acc1);
                const int32_t q0 = o * q_step;
                const int32_t q1 = (o + 1) * q_step;
                out[o] = tinyaot_requantize_s8(acc0, mult[q0], shift[q0], out_off, act_min, act_max);
                out[o + 1] = tinyaot_requantize_s8(acc1, mult[q1], shift[q1], out_off, act_min, act_max);
            }
        }
        for (; o < out_c; o++) {
            const int32_t acc = (bias ? bias[o] : 0) + corr + dot(weights, o, depth, x, in_off);
            out[o] = tinyaot_requantize_s8(acc, mult[o * q_step], shift[o * q_step], out_off, act_min, act_max);
        }
    }
    return TINYAOT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * The entry points of the compressed kernels (declared in tinyaot_nn.h), one macro per op: every storage kind's
 * file names its weights struct, an extra argument check (1 where the kind has none) and its decoder, and the
 * macro writes the kernel (and the conv's scratch size) around the shared driver above. The weights of clustered
 * storage are checked by TINYAOT_CLUSTERED_OK.
 * ------------------------------------------------------------------------------------------------------------- */

/* Clustered weights of rows of row_len values: 1..8-bit indices into codebooks of 1..2^bits entries, every row's
   indices inside its row_bytes. */
#define TINYAOT_CLUSTERED_OK(w, row_len)                                                                          \
    (!((w)->bits < 1 || (w)->bits > 8 || (w)->k < 1 || (w)->k > (1 << (w)->bits) || (w)->group_size < 1 ||      \
       (w)->row_bytes * 8 < (row_len) * (w)->bits))

/* x on DSP cores, otherwise `otherwise` (x is then not compiled: it may name a DSP-only function). */
#if TINYAOT_USE_DSP
#define TINYAOT_IF_DSP(x, otherwise) (x)
#else
#define TINYAOT_IF_DSP(x, otherwise) (otherwise)
#endif

#define TINYAOT_CW_CONV_KERNEL(name, weights_type, check, layout, begin, dot4)                                    \
    int32_t name##_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)              \
    {                                                                                                             \
        (void)input_dims;                                                                                         \
        return tinyaot_cw_buffer_size(filter_dims);                                                               \
    }                                                                                                             \
    tinyaot_status name(TINYAOT_CONV_ARGS(weights_type))                                                          \
    {                                                                                                             \
        (void)bias_dims;                                                                                          \
        if (!(check)) {                                                                                           \
            return TINYAOT_ARG_ERROR;                                                                             \
        }                                                                                                         \
        return tinyaot_cw_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias,     \
                               output_dims, output, layout, begin, dot4);                                        \
    }

#define TINYAOT_DW_COMPRESSED_KERNEL(name, weights_type, check, begin, decode, tile, skips)                       \
    tinyaot_status name(TINYAOT_DW_CONV_ARGS(weights_type, bias))                                                 \
    {                                                                                                             \
        (void)bias_dims;                                                                                          \
        if (!(check)) {                                                                                           \
            return TINYAOT_ARG_ERROR;                                                                             \
        }                                                                                                         \
        return tinyaot_dw_conv(ctx, dw_conv_params, quant_params, input_dims, input, filter_dims, filter, bias,  \
                               output_dims, output, begin, decode, tile, skips);                                  \
    }

#define TINYAOT_FC_COMPRESSED_KERNEL(name, weights_type, check, dot, rows2, pairs)                                \
    tinyaot_status name(TINYAOT_FC_ARGS(weights_type))                                                            \
    {                                                                                                             \
        (void)ctx;                                                                                                \
        (void)bias_dims;                                                                                          \
        if (!(check)) {                                                                                           \
            return TINYAOT_ARG_ERROR;                                                                             \
        }                                                                                                         \
        return tinyaot_fc_run(fc_params, quant_params, per_channel, input_dims, input, filter_dims, filter, bias, \
                              output_dims, output, dot, rows2, pairs);                                           \
    }

#endif /* TINYAOT_NN_COMPRESSED_H */
