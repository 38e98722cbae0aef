/*
 * tinyaot_convolve_s8_block2x1: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) over
 * 2x1 block-sparse weights (tinyaot/compress/pattern.py "block2x1"): each pair of output channels 2p, 2p+1 keeps
 * its own list of window positions, both channels' weights at each (tinyaot/ops/compressed.py block2x1_arrays).
 * The input offset is folded into the bias, and the requantization is the 4x4 block kernels' (fold table or
 * multiplier/shift per channel; tinyaot_block_support.h).
 *
 * Same result as tinyaot_convolve_s8 on the decoded weights, bit for bit. Arguments as tinyaot_convolve_s8_block,
 * except the filter (tinyaot_block2x1_weights) and the scratch, 4-byte aligned: 4 * K bytes (K = kh * kw * in_ch),
 * the windows of two output pixels a, b as one int16 word (a_j, b_j) per position j, then what the bitmaps decode
 * to once per call (filter->decoded bytes): per channel pair its count of position pairs (uint16, to whole words),
 * then the positions (uint8, or uint16 when K > 256; and 4 bytes that word stores may pass).
 *
 * Flash holds per channel pair a bitmap of its kept positions (K bits) and two bytes per kept position: the
 * positions are decoded once per call, not per multiply-add (8-bit: tinyaot_block2x1_decode.h; 16-bit: bit by bit).
 *
 * Per channel pair the kept positions go two at a time (the list is filled to an even length with a zero-weight
 * entry): the words of positions j, k give the SMLAD pairs (a_j, a_k) and (b_j, b_k) by PKHBT / PKHTB, the four
 * weights (c0_j, c1_j, c0_k, c1_k) one word whose SXTB16 and SXTB16 ROR 8 are (c0_j, c0_k) and (c1_j, c1_k): two
 * index loads, two column loads, two packs, one weight load, two unpacks and four SMLAD for 8 multiply-adds. Two
 * channel pairs make the four channels that the block kernels' requantization and stores take at once.
 *
 * Measured on kws_dscnn --prune 0.5 --prune-pattern block2x1 (mps2-an386): 1.63 instructions per kept
 * multiply-add and ~270 per group of four channels and pixel pair (requantization, bias, column, calls).
 *
 * Output pixels go in pairs in raster order (a lone last one paired with itself). Both pixels' windows are copied
 * in one pass, a window row at a time where both rows lie inside the input (else tap by tap), four positions of
 * both pixels from two word loads (block2x1_put2); a pair's windows are copied before its outputs are written, so
 * the output may overlap the input as for the dense kernels.
 *
 * Overflow: as tinyaot_block_support.h (every partial sum is a subset of the dense sum's products plus the folded
 * bias, bounded at compile time by compress/bounds.py).
 */
#include "tinyaot_block_support.h"
#include "tinyaot_block2x1_decode.h"

int32_t tinyaot_convolve_s8_block2x1_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t pairs = (filter_dims->n + 1) / 2;
    (void)input_dims;
    /* every position kept (and a filler block after an odd K), 4 bytes the decoding may pass: the compiler plans the
       layer's own filter->decoded */
    return 4 * k + 4 * ((pairs + 1) / 2) + ((pairs * (k + (k & 1)) * (k > 256 ? 2 : 1) + 4 + 3) & ~3);
}

/* What the row loops read: the values in flash, the positions and counts decoded into the scratch. */
typedef struct {
    const int8_t *values;
    const void *index;
    const uint16_t *counts;
} block2x1_decoded;

/* Positions of pairs channel pairs from their bitmaps (rb bytes each) into ix (uint8: K <= 256); counts: position
   pairs. */
static void block2x1_decode8(const uint8_t *bm, int32_t pairs, int32_t rb, uint8_t *ix, uint16_t *cnt)
{
    int32_t p, n;
    for (p = 0; p < pairs; p++, bm += rb, ix += n) {
        n = tinyaot_block2x1_positions8(bm, rb, ix);
        cnt[p] = (uint16_t)(n >> 1);
    }
}

/* The same with uint16 positions (K > 256): per 32 bitmap bytes (256 positions) their byte positions by
   tinyaot_block2x1_bits8 into tmp (259 bytes: the column's scratch, free until the pixels are copied), widened with
   the segment's first position added (~3 instructions per kept position, where bit by bit took ~5 per position). */
static void block2x1_decode16(const uint8_t *bm, int32_t pairs, int32_t rb, uint16_t *ix, uint16_t *cnt,
                              uint8_t *tmp)
{
    int32_t p, s, i;
    for (p = 0; p < pairs; p++, bm += rb) {
        uint16_t *const start = ix;
        int32_t n;
        for (s = 0; 32 * s < rb; s++) {
            const int32_t c = tinyaot_block2x1_bits8(bm + 32 * s, rb - 32 * s < 32 ? rb - 32 * s : 32, tmp);
            for (i = 0; i < c; i++) {
                ix[i] = (uint16_t)(256 * s + tmp[i]);
            }
            ix += c;
        }
        n = (int32_t)(ix - start);
        if (n & 1) {
            *ix = ix[-1];
            ix++, n++;
        }
        cnt[p] = (uint16_t)(n >> 1);
    }
}

typedef struct {
    int32_t in_h, in_w, in_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
    int32_t zp; /* the input zero point, -input_offset: what a padded position holds */
} block2x1_geom;


/* acc[0], acc[1] (pixel a) and acc[4], acc[5] (pixel b) += the n position pairs of one channel pair (weights *wp,
   positions *ixp of type T) against the column; *wp and *ixp advanced past them. */
#if TINYAOT_BLOCK_ASM
/* One position pair in inline assembly (GCC's C for the PKH forms is five instructions, not two): 13 instructions for
   8 multiply-adds, four pairs per loop pass (an odd one and an odd two first). ld: the index load with post-increment
   (LDRB #1 or LDRH #2). The functions holding it keep no frame pointer (twelve operands: r7 is needed). */
#define TINYAOT_BLOCK2X1_PAIR(ld, step)                                                                               \
    ld " %[u], [%[ix]], #" step "\n\t"                                                                                \
    ld " %[v], [%[ix]], #" step "\n\t"                                                                                \
    "ldr %[u], [%[col], %[u], lsl #2]\n\t"                                                                            \
    "ldr %[v], [%[col], %[v], lsl #2]\n\t"                                                                            \
    "ldr %[t], [%[w]], #4\n\t"                                                                                        \
    "pkhbt %[x], %[u], %[v], lsl #16\n\t"                                                                             \
    "pkhtb %[v], %[v], %[u], asr #16\n\t"                                                                             \
    "sxtb16 %[u], %[t]\n\t"                                                                                           \
    "sxtb16 %[t], %[t], ror #8\n\t"                                                                                   \
    "smlad %[a0], %[x], %[u], %[a0]\n\t"                                                                              \
    "smlad %[a1], %[x], %[t], %[a1]\n\t"                                                                              \
    "smlad %[b0], %[v], %[u], %[b0]\n\t"                                                                              \
    "smlad %[b1], %[v], %[t], %[b1]\n\t"
#define TINYAOT_BLOCK2X1_OPS                                                                                          \
    : [a0] "+r"(a0), [a1] "+r"(a1), [b0] "+r"(b0), [b1] "+r"(b1), [w] "+r"(w), [ix] "+r"(ix), [u] "=&r"(u),           \
      [v] "=&r"(v), [t] "=&r"(t), [x] "=&r"(x)
/* The channel pairs of one group of four channels (pairs: 1 or 2, counts cnt): acc[2h], acc[2h + 1] (pixel a) and
   acc[4 + 2h], acc[5 + 2h] (pixel b) += pair h's position pairs at *wp, *ixp; both advanced. One call per group. */
#define TINYAOT_BLOCK2X1_MAC(name, T, ld, step)                                                                       \
    static TINYAOT_TIGHT_ASM TINYAOT_OMIT_FRAME_POINTER void name(const int32_t *col, const int8_t **wp,             \
                                                                  const T **ixp, const uint16_t *cnt, int32_t pairs, \
                                                                  int32_t *acc)                                      \
    {                                                                                                                 \
        const int8_t *w = *wp;                                                                                        \
        const T *ix = *ixp;                                                                                           \
        int32_t h;                                                                                                    \
        for (h = 0; h < pairs; h++, acc += 2) {                                                                       \
            const int32_t n = cnt[h];                                                                                 \
            int32_t a0 = acc[0], a1 = acc[1], b0 = acc[4], b1 = acc[5];                                               \
            int32_t u, v, t, x;                                                                                       \
            if (n & 1) {                                                                                              \
                __asm__(TINYAOT_BLOCK2X1_PAIR(ld, step) TINYAOT_BLOCK2X1_OPS : [col] "r"(col) : "memory");            \
            }                                                                                                         \
            if (n & 2) {                                                                                              \
                __asm__(TINYAOT_BLOCK2X1_PAIR(ld, step) TINYAOT_BLOCK2X1_PAIR(ld, step) TINYAOT_BLOCK2X1_OPS          \
                        : [col] "r"(col) : "memory");                                                                 \
            }                                                                                                         \
            if (n > 3) {                                                                                              \
                const T *const end = ix + 2 * (n & ~3);                                                               \
                __asm__("1:\n\t" TINYAOT_BLOCK2X1_PAIR(ld, step) TINYAOT_BLOCK2X1_PAIR(ld, step)                      \
                        TINYAOT_BLOCK2X1_PAIR(ld, step) TINYAOT_BLOCK2X1_PAIR(ld, step)                               \
                        "cmp %[ix], %[end]\n\t"                                                                       \
                        "bne 1b\n\t" TINYAOT_BLOCK2X1_OPS                                                             \
                        : [col] "r"(col), [end] "r"(end)                                                              \
                        : "cc", "memory");                                                                            \
            }                                                                                                         \
            acc[0] = a0, acc[1] = a1, acc[4] = b0, acc[5] = b1;                                                       \
        }                                                                                                             \
        *wp = w;                                                                                                      \
        *ixp = ix;                                                                                                    \
    }
#elif TINYAOT_USE_DSP
#define TINYAOT_BLOCK2X1_MAC(name, T, ld, step)                                                                       \
    static void name(const int32_t *col, const int8_t **wp, const T **ixp, const uint16_t *cnt, int32_t pairs,      \
                     int32_t *acc)                                                                                    \
    {                                                                                                                 \
        const int8_t *w = *wp;                                                                                        \
        const T *ix = *ixp;                                                                                           \
        int32_t h;                                                                                                    \
        for (h = 0; h < pairs; h++, acc += 2) {                                                                       \
        int32_t n = cnt[h];                                                                                           \
        int32_t a0 = acc[0], a1 = acc[1], b0 = acc[4], b1 = acc[5];                                                   \
        for (; n > 0; n--, ix += 2, w += 4) {                                                                         \
            const uint32_t u = (uint32_t)col[ix[0]], v = (uint32_t)col[ix[1]];                                        \
            const int32_t pa = (int32_t)((u & 0xFFFFu) | (v << 16));     /* PKHBT: (a_j, a_k) */                      \
            const int32_t pb = (int32_t)((v & 0xFFFF0000u) | (u >> 16)); /* PKHTB: (b_j, b_k) */                      \
            const int32_t t = tinyaot_read_s8x4(w);                                                                   \
            const int32_t w0 = __sxtb16(t), w1 = tinyaot_sxtb16_ror8(t);                                              \
            a0 = __smlad(pa, w0, a0);                                                                                 \
            a1 = __smlad(pa, w1, a1);                                                                                 \
            b0 = __smlad(pb, w0, b0);                                                                                 \
            b1 = __smlad(pb, w1, b1);                                                                                 \
        }                                                                                                             \
        acc[0] = a0, acc[1] = a1, acc[4] = b0, acc[5] = b1;                                                           \
        }                                                                                                             \
        *wp = w;                                                                                                      \
        *ixp = ix;                                                                                                    \
    }
#else
#define TINYAOT_BLOCK2X1_MAC(name, T, ld, step)                                                                       \
    static void name(const int32_t *col, const int8_t **wp, const T **ixp, const uint16_t *cnt, int32_t pairs,      \
                     int32_t *acc)                                                                                    \
    {                                                                                                                 \
        const int16_t *c16 = (const int16_t *)(const void *)col;                                                      \
        const int8_t *w = *wp;                                                                                        \
        const T *ix = *ixp;                                                                                           \
        int32_t h;                                                                                                    \
        for (h = 0; h < pairs; h++, acc += 2) {                                                                       \
        int32_t n = 2 * cnt[h];                                                                                       \
        int32_t a0 = acc[0], a1 = acc[1], b0 = acc[4], b1 = acc[5];                                                   \
        for (; n > 0; n--, ix++, w += 2) {                                                                      \
            /* products of magnitude at most 128 * 128 */                                                             \
            const int32_t xa = c16[2 * (int32_t)ix[0]], xb = c16[2 * (int32_t)ix[0] + 1];                             \
            a0 += xa * w[0];                                                                                          \
            a1 += xa * w[1];                                                                                          \
            b0 += xb * w[0];                                                                                          \
            b1 += xb * w[1];                                                                                          \
        }                                                                                                             \
        acc[0] = a0, acc[1] = a1, acc[4] = b0, acc[5] = b1;                                                           \
        }                                                                                                             \
        *wp = w;                                                                                                      \
        *ixp = ix;                                                                                                    \
    }
#endif
TINYAOT_BLOCK2X1_MAC(block2x1_mac8, uint8_t, "ldrb", "1")
TINYAOT_BLOCK2X1_MAC(block2x1_mac16, uint16_t, "ldrh", "2")

#if TINYAOT_USE_DSP
/* (lo's low half, hi's low half) and (lo's high half, hi's high half): PKHBT and PKHTB, which GCC does not make of
   the C (UXTH / AND + ORR); not volatile, so scheduled like expressions. */
static inline uint32_t block2x1_pack_lo(uint32_t lo, uint32_t hi)
{
#if TINYAOT_GNU
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
#else
    return (lo & 0xFFFFu) | (hi << 16);
#endif
}

static inline uint32_t block2x1_pack_hi(uint32_t lo, uint32_t hi)
{
#if TINYAOT_GNU
    uint32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(hi), "r"(lo));
    return r;
#else
    return (hi & 0xFFFF0000u) | (lo >> 16);
#endif
}

/* Four positions of both pixels from the words va, vb (bytes 0..3 of each) into col[0..3]. */
#define BLOCK2X1_PUT4(col, va, vb)                                                                                    \
    do {                                                                                                              \
        const uint32_t a02 = (uint32_t)__sxtb16(va), a13 = (uint32_t)tinyaot_sxtb16_ror8(va);                         \
        const uint32_t b02 = (uint32_t)__sxtb16(vb), b13 = (uint32_t)tinyaot_sxtb16_ror8(vb);                         \
        (col)[0] = (int32_t)block2x1_pack_lo(a02, b02);                                                               \
        (col)[1] = (int32_t)block2x1_pack_lo(a13, b13);                                                               \
        (col)[2] = (int32_t)block2x1_pack_hi(a02, b02);                                                               \
        (col)[3] = (int32_t)block2x1_pack_hi(a13, b13);                                                               \
    } while (0)
#endif

/* n window values of pixels a and b (at xa and xb; NULL: padding, the zero point zp) into n column words
   (a_j, b_j). On DSP cores four positions at a time: a word load per pixel read, four SXTB16, four PKH and four
   stores (about 2 instructions a value, where one value at a time took ~3.7). */
static void block2x1_put2(int32_t *col, const int8_t *xa, const int8_t *xb, int32_t n, int32_t zp)
{
    int32_t j = 0;
#if TINYAOT_USE_DSP
    const int32_t zp4 = (int32_t)((uint32_t)(uint8_t)(int8_t)zp * 0x01010101u);
    if (xa != NULL && xb != NULL) {
        for (; j + 4 <= n; j += 4, col += 4) {
            BLOCK2X1_PUT4(col, tinyaot_read_s8x4(xa + j), tinyaot_read_s8x4(xb + j));
        }
    } else if (xa != NULL) {
        for (; j + 4 <= n; j += 4, col += 4) {
            BLOCK2X1_PUT4(col, tinyaot_read_s8x4(xa + j), zp4);
        }
    } else if (xb != NULL) {
        for (; j + 4 <= n; j += 4, col += 4) {
            BLOCK2X1_PUT4(col, zp4, tinyaot_read_s8x4(xb + j));
        }
    } else {
        const int32_t f = tinyaot_dup16(zp);
        for (; j + 4 <= n; j += 4, col += 4) {
            col[0] = col[1] = col[2] = col[3] = f;
        }
    }
#endif
    for (; j < n; j++, col++) {
        const int32_t a = xa != NULL ? xa[j] : zp, b = xb != NULL ? xb[j] : zp;
        *col = (int32_t)(((uint32_t)(uint16_t)(int16_t)a) | ((uint32_t)b << 16));
    }
}

/* The windows of output pixels a (image ba, row ya, column xa) and b into the column: per window row one run of
   k_w * in_c values when both pixels' rows lie inside the input (dilation 1), else tap by tap. */
static void block2x1_fill2(int32_t *col, const block2x1_geom *g, const int8_t *input, int32_t ba, int32_t ya,
                           int32_t xa, int32_t bb, int32_t yb, int32_t xb)
{
    const int32_t in_c = g->in_c, row_step = g->in_w * in_c, row_len = g->k_w * in_c;
    const int32_t ya0 = ya * g->stride_h - g->pad_t, yb0 = yb * g->stride_h - g->pad_t;
    const int32_t xa0 = xa * g->stride_w - g->pad_l, xb0 = xb * g->stride_w - g->pad_l;
    const int8_t *const in_a = input + ba * g->in_h * row_step, *const in_b = input + bb * g->in_h * row_step;
    const int run = g->dil_w == 1 && xa0 >= 0 && xa0 + g->k_w <= g->in_w && xb0 >= 0 && xb0 + g->k_w <= g->in_w;
    int32_t ky, kx;
    for (ky = 0; ky < g->k_h; ky++, col += row_len) {
        const int32_t iya = ya0 + ky * g->dil_h, iyb = yb0 + ky * g->dil_h;
        const int8_t *const ra = (iya >= 0 && iya < g->in_h) ? in_a + iya * row_step : NULL;
        const int8_t *const rb = (iyb >= 0 && iyb < g->in_h) ? in_b + iyb * row_step : NULL;
        if (run || (ra == NULL && rb == NULL)) {
            block2x1_put2(col, ra != NULL ? ra + xa0 * in_c : NULL, rb != NULL ? rb + xb0 * in_c : NULL, row_len,
                          g->zp);
            continue;
        }
        for (kx = 0; kx < g->k_w; kx++) {
            const int32_t ia = xa0 + kx * g->dil_w, ib = xb0 + kx * g->dil_w;
            block2x1_put2(col + kx * in_c, (ra != NULL && ia >= 0 && ia < g->in_w) ? ra + ia * in_c : NULL,
                          (rb != NULL && ib >= 0 && ib < g->in_w) ? rb + ib * in_c : NULL, in_c, g->zp);
        }
    }
}

/* Every channel group of one pixel pair (column col32) into out_a, out_b. */
#define TINYAOT_BLOCK2X1_ROWS(name, T, mac)                                                                           \
    static void name(const int32_t *col32, const block2x1_decoded *f, const tinyaot_block_out *q,                    \
                     int32_t out_c, int8_t *out_a, int8_t *out_b)                                                     \
    {                                                                                                                 \
        const int8_t *w = f->values;                                                                                  \
        const T *ix = (const T *)f->index;                                                                            \
        const uint16_t *cnt = f->counts;                                                                              \
        int32_t o;                                                                                                    \
        for (o = 0; o < out_c; o += 4, cnt += 2) {                                                                    \
            const int32_t nc = out_c - o < 4 ? out_c - o : 4;                                                         \
            int32_t acc[8];                                                                                           \
            tinyaot_block_init(q, o, nc, acc);                                                                        \
            mac(col32, &w, &ix, cnt, nc > 2 ? 2 : 1, acc);                                                            \
            tinyaot_block_store(q, o, nc, acc, out_a, out_b);                                                         \
        }                                                                                                             \
    }
TINYAOT_BLOCK2X1_ROWS(block2x1_rows8, uint8_t, block2x1_mac8)
TINYAOT_BLOCK2X1_ROWS(block2x1_rows16, uint16_t, block2x1_mac16)

tinyaot_status tinyaot_convolve_s8_block2x1(TINYAOT_CONV_ARGS(tinyaot_block2x1_weights))
{
    const int32_t out_c = filter_dims->n;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    (void)bias_dims;
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL ||
        filter == NULL || ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 || filter->decoded < 0) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t pairs = (out_c + 1) / 2;
    const int index16 = k > 256;
    if (ctx->size < 4 * k + filter->decoded) {
        return TINYAOT_ARG_ERROR;
    }
    /* the positions, once per call: after the column, the counts, then the index */
    uint16_t *const cnt = (uint16_t *)(void *)((int8_t *)ctx->buf + 4 * k);
    void *const ix = (void *)(cnt + 2 * ((pairs + 1) / 2));
    if (index16) {
        block2x1_decode16(filter->bitmap, pairs, (k + 7) / 8, (uint16_t *)ix, cnt, (uint8_t *)ctx->buf);
    } else {
        block2x1_decode8(filter->bitmap, pairs, (k + 7) / 8, (uint8_t *)ix, cnt);
    }
    const block2x1_decoded d = {filter->values, ix, cnt};
    block2x1_geom g;
    TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
    g.zp = -conv_params->input_offset;
    tinyaot_block_out q;
    TINYAOT_BLOCK_OUT_SET(q, bias, quant_params, filter, out_c, conv_params);
    const int32_t n_pix = input_dims->n * out_h * out_w;
    /* a 1x1 window without padding is the pixel's in_c channels, read in place */
    const int one = g.k_h == 1 && g.k_w == 1 && g.pad_t == 0 && g.pad_l == 0;
    int32_t *col32 = (int32_t *)ctx->buf;
    int32_t p, ya = 0, xa = 0, ba = 0;
    for (p = 0; p < n_pix; p += 2) {
        /* a lone last pixel is computed twice (slot b holds it again and writes the same results over slot a's) */
        const int two_pix = (p + 1 < n_pix);
        /* pixel p at (ba, ya, xa) of the output, p + 1 the next in raster order */
        int32_t yb = ya, xb = xa + 1, bb = ba;
        if (xb == out_w) {
            xb = 0;
            if (++yb == out_h) {
                yb = 0;
                bb++;
            }
        }
        if (!two_pix) {
            yb = ya, xb = xa, bb = ba;
        }
        if (one) {
            block2x1_put2(col32, input + ((ba * g.in_h + ya * g.stride_h) * g.in_w + xa * g.stride_w) * g.in_c,
                          input + ((bb * g.in_h + yb * g.stride_h) * g.in_w + xb * g.stride_w) * g.in_c, g.in_c, 0);
        } else {
            block2x1_fill2(col32, &g, input, ba, ya, xa, bb, yb, xb);
        }
        xa = xb + 1, ya = yb, ba = bb;
        if (xa == out_w) {
            xa = 0;
            if (++ya == out_h) {
                ya = 0;
                ba++;
            }
        }
        int8_t *out_a = output + p * out_c;
        int8_t *out_b = two_pix ? out_a + out_c : out_a;
        if (index16) {
            block2x1_rows16(col32, &d, &q, out_c, out_a, out_b);
        } else {
            block2x1_rows8(col32, &d, &q, out_c, out_a, out_b);
        }
    }
    return TINYAOT_OK;
}
