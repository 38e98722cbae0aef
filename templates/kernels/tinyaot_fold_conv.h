/*
 * The fold convolution's internals, shared by tinyaot_convolve_s8_fold.c (dense weights) and
 * tinyaot_convolve_s8_fold_decoded.c (int4 and clustered weights decoded into the same layout): the geometry, the
 * in-place 4x2 blocks (inline assembly on GCC with DSP), the clipped-window pairs and the requantization of a
 * block (the column path below a multiple of 4 input channels stays in tinyaot_convolve_s8_fold.c). tinyaot_convolve_s8_fold.c says how they work.
 */
#ifndef TINYAOT_FOLD_CONV_H
#define TINYAOT_FOLD_CONV_H

#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

/* FOLD_ASM: the 4x2 blocks in inline assembly (TINYAOT_FOLD_ASM, tinyaot_fold_support.h says when). */
#define FOLD_ASM TINYAOT_FOLD_ASM

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t zp;      /* the input zero point, -input_offset: what a padded tap holds */
    int32_t k;       /* values per window */
    int32_t k4;      /* k rounded down to a multiple of 4 */
} fold_geom;

/* ---- in place (in_ch a multiple of 4: every tap is whole groups of four, no scratch) ---- */

#if FOLD_ASM
/* One group of four inputs of the 4x2 block (fold_mac_4x2_s8): lanes (0, 2) of both pixels against SXTB16 of the
   four filter words, then lanes (1, 3) against SXTB16 ROR 8; xa (r0), xb (r1) advance by 4 and w (r2) by 16.
   Accumulators a0..a3 in r4..r7, b0..b3 in r8..r11, temporaries r3, r12, lr. */
#define FOLD_4X2_STEP                                                                                                  \
    "ldr r3, [r0]\n\t"                                                                                                 \
    "ldr r12, [r1]\n\t"                                                                                                \
    "sxtb16 r3, r3\n\t"                                                                                                \
    "sxtb16 r12, r12\n\t"                                                                                              \
    "ldr lr, [r2]\n\t"                                                                                                 \
    "sxtb16 lr, lr\n\t"                                                                                                \
    "smlad r4, r3, lr, r4\n\t"                                                                                         \
    "smlad r8, r12, lr, r8\n\t"                                                                                        \
    "ldr lr, [r2, #4]\n\t"                                                                                             \
    "sxtb16 lr, lr\n\t"                                                                                                \
    "smlad r5, r3, lr, r5\n\t"                                                                                         \
    "smlad r9, r12, lr, r9\n\t"                                                                                        \
    "ldr lr, [r2, #8]\n\t"                                                                                             \
    "sxtb16 lr, lr\n\t"                                                                                                \
    "smlad r6, r3, lr, r6\n\t"                                                                                         \
    "smlad r10, r12, lr, r10\n\t"                                                                                      \
    "ldr lr, [r2, #12]\n\t"                                                                                            \
    "sxtb16 lr, lr\n\t"                                                                                                \
    "smlad r7, r3, lr, r7\n\t"                                                                                         \
    "smlad r11, r12, lr, r11\n\t"                                                                                      \
    "ldr r3, [r0], #4\n\t"                                                                                             \
    "ldr r12, [r1], #4\n\t"                                                                                            \
    "sxtb16 r3, r3, ror #8\n\t"                                                                                        \
    "sxtb16 r12, r12, ror #8\n\t"                                                                                      \
    "ldr lr, [r2, #4]\n\t"                                                                                             \
    "sxtb16 lr, lr, ror #8\n\t"                                                                                        \
    "smlad r5, r3, lr, r5\n\t"                                                                                         \
    "smlad r9, r12, lr, r9\n\t"                                                                                        \
    "ldr lr, [r2, #8]\n\t"                                                                                             \
    "sxtb16 lr, lr, ror #8\n\t"                                                                                        \
    "smlad r6, r3, lr, r6\n\t"                                                                                         \
    "smlad r10, r12, lr, r10\n\t"                                                                                      \
    "ldr lr, [r2, #12]\n\t"                                                                                            \
    "sxtb16 lr, lr, ror #8\n\t"                                                                                        \
    "smlad r7, r3, lr, r7\n\t"                                                                                         \
    "smlad r11, r12, lr, r11\n\t"                                                                                      \
    "ldr lr, [r2], #16\n\t"                                                                                            \
    "sxtb16 lr, lr, ror #8\n\t"                                                                                        \
    "smlad r4, r3, lr, r4\n\t"                                                                                         \
    "smlad r8, r12, lr, r8\n\t"
#endif

/*
 * acc[c] += xa . filter of channel c and acc[4 + c] += xb . filter of channel c over n4 groups of four inputs
 * (xa, xb contiguous int8; w the quad layout of a block of four channels).
 */
#if FOLD_ASM
/* The whole function in assembly (naked: no prologue of GCC's), so that its 14 registers (8 accumulators, 3 pointers,
   3 temporaries: r7 too) never depend on GCC's register allocation: it builds at every optimisation level and with
   -fno-omit-frame-pointer (r7 is saved and restored here like the other callee-saved registers). Per group of four
   inputs: 4 input loads (each word twice: no register is left to keep it), 4 filter loads, 12 SXTB16, 16 SMLAD:
   40 instructions for 32 multiply-adds; two groups per loop pass, whose end is compared from the stack. */
static TINYAOT_NAKED void fold_mac_4x2_s8(TINYAOT_UNUSED const int8_t *xa, TINYAOT_UNUSED const int8_t *xb,
                                          TINYAOT_UNUSED const int8_t *w, TINYAOT_UNUSED int32_t n4,
                                          TINYAOT_UNUSED int32_t acc[8])
{
    __asm__ volatile(TINYAOT_NAKED_4X2_ASM("add r12, r0, r3, lsl #2\n\t" /* the end of xa */, FOLD_4X2_STEP, "r0"));
}
#else
static void fold_mac_4x2_s8(const int8_t *xa, const int8_t *xb, const int8_t *w, int32_t n4, int32_t acc[8])
{
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int32_t b0 = acc[4], b1 = acc[5], b2 = acc[6], b3 = acc[7];
#if TINYAOT_USE_DSP
    for (; n4 > 0; n4--) {
        int32_t xa02 = tinyaot_read_s8x4(xa);
        int32_t xb02 = tinyaot_read_s8x4(xb);
        const int32_t xa13 = tinyaot_sxtb16_ror8(xa02);
        const int32_t xb13 = tinyaot_sxtb16_ror8(xb02);
        int32_t t;
        xa02 = __sxtb16(xa02);
        xb02 = __sxtb16(xb02);
        t = tinyaot_read_s8x4(w);
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
        xa += 4;
        xb += 4;
        w += 16;
    }
#else
    for (; n4 > 0; n4--) {
        int32_t i;
        for (i = 0; i < 4; i++) {
            /* one input position of both pixels against the four channels: 8 products below 2^14 each */
            const int32_t va = xa[i];
            const int32_t vb = xb[i];
            int32_t f = w[i];
            a0 += va * f;
            b0 += vb * f;
            f = w[4 + i];
            a1 += va * f;
            b1 += vb * f;
            f = w[8 + i];
            a2 += va * f;
            b2 += vb * f;
            f = w[12 + i];
            a3 += va * f;
            b3 += vb * f;
        }
        xa += 4;
        xb += 4;
        w += 16;
    }
#endif
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    acc[4] = b0, acc[5] = b1, acc[6] = b2, acc[7] = b3;
}
#endif

/* One pixel, one channel in order (a channel after the last block): acc + x . w over n4 groups of four. */
static int32_t fold_dot_s8(const int8_t *x, const int8_t *w, int32_t n4, int32_t acc)
{
    for (; n4 > 0; n4--, x += 4, w += 4) {
        /* four products of magnitude at most 128 * 128 */
        acc += (int32_t)x[0] * w[0] + (int32_t)x[1] * w[1] + (int32_t)x[2] * w[2] + (int32_t)x[3] * w[3];
    }
    return acc;
}

typedef struct {
    const int8_t *in_b; /* the pixel's batch image */
    int32_t base_y, base_x;
    int inside;         /* the whole window lies inside the input */
} fold_pixel;

static void fold_locate(const fold_geom *g, const int8_t *input, int32_t out_h, int32_t out_w, int32_t q,
                        fold_pixel *px)
{
    const int32_t per_batch = out_h * out_w;
    const int32_t bq = q / per_batch;
    const int32_t r = q - bq * per_batch;
    const int32_t oy = r / out_w;
    px->in_b = input + bq * g->in_h * g->in_w * g->in_c;
    px->base_y = oy * g->stride_h - g->pad_t;
    px->base_x = (r - oy * out_w) * g->stride_w - g->pad_l;
    px->inside = (px->base_y >= 0 && px->base_y + (g->k_h - 1) * g->dil_h < g->in_h && px->base_x >= 0 &&
                  px->base_x + (g->k_w - 1) * g->dil_w < g->in_w);
}

typedef struct {
    const int32_t *bias;
    const int32_t *mr; /* {mult, radd} per channel */
    const int32_t *e;  /* right shifts, four per word (tinyaot_fold_e) */
    int32_t out_c, act_min, act_max;
} fold_out;

/* Sets q to a layer's fold requantization (its folded bias, the table in quant_params, its out_c channels and the
   clamp of its conv params). A macro: the same stores in the same order as written out. */
#define FOLD_OUT_SET(q, bias_, quant_params_, out_c_, conv_params_)                                               \
    do {                                                                                                          \
        (q).bias = (bias_);                                                                                       \
        (q).mr = (quant_params_)->multiplier;                                                                     \
        (q).e = (quant_params_)->shift;                                                                           \
        (q).out_c = (out_c_);                                                                                     \
        (q).act_min = (conv_params_)->activation.min;                                                             \
        (q).act_max = (conv_params_)->activation.max;                                                             \
    } while (0)

/* The eight results of a 4x2 block: channels o .. o+3 of pixel a (acc[0..3]) and of pixel b (acc[4..7]). The
   table is read into locals before the stores (an int8 store may alias it); the full int8 range clamps without
   the activation bounds. out_b may equal out_a (a lone last pixel: both results are the same). */
static void fold_store_4x2(const fold_out *q, int32_t o, const int32_t acc[8], int8_t *out_a, int8_t *out_b)
{
    const int32_t *mr = q->mr + 2 * o;
    const uint32_t ew = (uint32_t)q->e[o >> 2]; /* o is a multiple of 4: the block's four shifts */
    int32_t c;
    if (q->act_min == -128 && q->act_max == 127) {
        for (c = 0; c < 4; c++) {
            const int32_t m = mr[2 * c], radd = mr[2 * c + 1], e = (int32_t)((ew >> (8 * c)) & 0xFFu);
            const int32_t ra = tinyaot_fold_scale(acc[c], m, radd, e);
            const int32_t rb = tinyaot_fold_scale(acc[4 + c], m, radd, e);
            out_a[o + c] = (int8_t)tinyaot_fold_sat8(ra);
            out_b[o + c] = (int8_t)tinyaot_fold_sat8(rb);
        }
        return;
    }
    for (c = 0; c < 4; c++) {
        const int32_t m = mr[2 * c], radd = mr[2 * c + 1], e = (int32_t)((ew >> (8 * c)) & 0xFFu);
        int32_t ra = tinyaot_fold_scale(acc[c], m, radd, e);
        int32_t rb = tinyaot_fold_scale(acc[4 + c], m, radd, e);
        ra = ra < q->act_min ? q->act_min : (ra > q->act_max ? q->act_max : ra);
        rb = rb < q->act_min ? q->act_min : (rb > q->act_max ? q->act_max : rb);
        out_a[o + c] = (int8_t)ra;
        out_b[o + c] = (int8_t)rb;
    }
}

/* Bytes of zero points kept on the stack for clipped windows: a padded kernel row (k_w * in_ch values, when at
   most this) or tap (in_ch values: the compiler offers the in-place path only for in_ch <= FOLD_ZP_BYTES). */
#define FOLD_ZP_BYTES 256

/* Kernel row ky of pixel px as one run of k_w * in_ch values: the input, or zrow (a padded row); NULL when the row
   is not one run (partly clipped, dilated, or a padded row longer than zrow): its taps then go one by one. */
static const int8_t *fold_row(const fold_geom *g, const fold_pixel *px, int32_t ky, const int8_t *zrow)
{
    const int32_t iy = px->base_y + ky * g->dil_h;
    if (g->dil_w != 1) {
        return NULL;
    }
    if (iy < 0 || iy >= g->in_h) {
        return g->k_w * g->in_c <= FOLD_ZP_BYTES ? zrow : NULL;
    }
    if (px->base_x < 0 || px->base_x + g->k_w > g->in_w) {
        return NULL;
    }
    return px->in_b + (iy * g->in_w + px->base_x) * g->in_c;
}

/* Tap (ky, kx) of pixel px: its in_ch input values, or zrow when padded. */
static const int8_t *fold_tap(const fold_geom *g, const fold_pixel *px, int32_t ky, int32_t kx, const int8_t *zrow)
{
    const int32_t iy = px->base_y + ky * g->dil_h;
    const int32_t ix = px->base_x + kx * g->dil_w;
    if (iy < 0 || iy >= g->in_h || ix < 0 || ix >= g->in_w) {
        return zrow;
    }
    return px->in_b + (iy * g->in_w + ix) * g->in_c;
}

/* The taps of one block of nc channels (nc <= 4; 4: the 4x2 block; w: their weights) of a pixel pair into acc. */
static TINYAOT_ALWAYS_INLINE void fold_pair_block(const fold_geom *g, const fold_pixel *pa, const fold_pixel *pb,
                                                  const int8_t *zrow, const int8_t *w, int32_t nc, int32_t acc[8])
{
    const int32_t rl = g->k_w * g->in_c; /* values per kernel row */
    int32_t c, ky, kx;
    for (ky = 0; ky < g->k_h; ky++) {
        const int8_t *ra = fold_row(g, pa, ky, zrow);
        const int8_t *rb = fold_row(g, pb, ky, zrow);
        const int whole = (ra != NULL && rb != NULL); /* one run for the row, else one per tap */
        const int32_t runs = whole ? 1 : g->k_w;
        const int32_t n4 = (whole ? rl : g->in_c) >> 2;
        for (kx = 0; kx < runs; kx++) {
            const int8_t *xa = whole ? ra : fold_tap(g, pa, ky, kx, zrow);
            const int8_t *xb = whole ? rb : fold_tap(g, pb, ky, kx, zrow);
            const int32_t j = ky * rl + kx * g->in_c; /* first window position of the run */
            if (nc == 4) {
                fold_mac_4x2_s8(xa, xb, w + 4 * j, n4, acc);
            } else {
                for (c = 0; c < nc; c++) {
                    acc[c] = fold_dot_s8(xa, w + c * g->k + j, n4, acc[c]);
                    acc[4 + c] = fold_dot_s8(xb, w + c * g->k + j, n4, acc[4 + c]);
                }
            }
        }
    }
}

/* Channels o_begin .. o_end-1 (o_begin a multiple of 4; filter: their weights) of a pixel pair of which at least one
   window is clipped (or dilated): whole kernel rows where both pixels have them as one run, else tap by tap; padded
   values are read from zrow (zero points), so the same 4x2 block runs as inside. The whole blocks of four have a
   loop of their own (no channel-count test per run) and the function is not inlined into the pixel loop (whose
   registers then stay with the in-place path): on ic_resnet8's fold convolutions 0.8-1.2 % fewer instructions on
   M3/M4/M7 than one loop with a per-block count, for ~450 B of code. */
static TINYAOT_NOINLINE void fold_pair_clipped(const fold_geom *g, const fold_pixel *pa, const fold_pixel *pb,
                                               const int8_t *zrow, const int8_t *filter, const fold_out *q,
                                               int32_t o_begin, int32_t o_end, int8_t *out_a, int8_t *out_b)
{
    const int8_t *w = filter;
    int32_t o, c;
    for (o = o_begin; o + 4 <= o_end; o += 4, w += 4 * g->k) {
        int32_t acc[8];
        for (c = 0; c < 4; c++) {
            acc[c] = acc[4 + c] = q->bias[o + c];
        }
        fold_pair_block(g, pa, pb, zrow, w, 4, acc);
        fold_store_4x2(q, o, acc, out_a, out_b);
    }
    if (o < o_end) { /* the last channels, fewer than four, in order */
        const int32_t nc = o_end - o;
        int32_t acc[8];
        for (c = 0; c < 4; c++) { /* (a fixed count: GCC turns a variable one into memcpy calls) */
            const int32_t b = c < nc ? q->bias[o + c] : 0;
            acc[c] = b;
            acc[4 + c] = b;
        }
        fold_pair_block(g, pa, pb, zrow, w, nc, acc);
        for (c = 0; c < nc; c++) {
            const int32_t *mr = q->mr + 2 * (o + c);
            out_a[o + c] = tinyaot_fold_rq(acc[c], mr, tinyaot_fold_e(q->e, o + c), q->act_min, q->act_max);
            out_b[o + c] = tinyaot_fold_rq(acc[4 + c], mr, tinyaot_fold_e(q->e, o + c), q->act_min, q->act_max);
        }
    }
}

#endif /* TINYAOT_FOLD_CONV_H */
