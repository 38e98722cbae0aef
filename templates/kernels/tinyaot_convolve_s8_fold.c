/*
 * tinyaot_convolve_s8_fold: int8 NHWC convolution (one group; any kernel size, stride, dilation, padding) with the
 * input offset folded into the bias at compile time, the weights pre-arranged in flash for a block of four output
 * channels x two output pixels, and a requantization table (tinyaot_fold_support.h).
 *
 * Same arguments and result as tinyaot_convolve_s8, except for compile-time transformations of the constants
 * (tinyaot/ops/conv.py, tinyaot/ops/common.py fold_input_offset / fold_requant_table / interleave_quads):
 *
 *   - bias[o] is the folded bias bias[o] + input_offset * sum_k w[o, k]. Then
 *       bias[o] + sum_k (x_k + input_offset) * w[o, k] = folded[o] + sum_k x_k * w[o, k],
 *     so the inner loop multiplies raw int8 activations by raw int8 weights: both unpack the same way (SXTB16 for
 *     bytes 0 and 2, SXTB16 ROR 8 for bytes 1 and 3) and one SMLAD does two multiply-adds. A padded tap holds the
 *     input zero point (= -input_offset), which takes back exactly its share of the folded term.
 *   - filter holds K = kh * kw * in_ch values per output channel: per block of four channels (4c .. 4c+3), per group
 *     of four positions the four bytes of each channel in turn (16 bytes), then the K % 4 last values of each
 *     channel in turn; the out_ch % 4 channels after the last block keep their K values in order. Same bytes as
 *     OHWI, only reordered (flash does not grow).
 *   - quant_params->multiplier holds {mult, radd} per channel and quant_params->shift the right shifts e, four per
 *     word: see tinyaot_fold_support.h (output_offset is inside radd).
 *
 * in_ch a multiple of 4: no scratch. Two output pixels whose windows lie inside the input are read in place, row by
 * row of the window (each a contiguous run of whole groups of four); one pass over four positions loads the two
 * pixels' input words (twice: the registers hold eight accumulators) and four filter words, and does 32
 * multiply-adds. On GCC with DSP that loop is inline assembly (GCC 12 spills in the C version); the C loop below it
 * computes the same sums and is used elsewhere (other compilers, -O0, TINYAOT_FOLD_NO_ASM). A pair with a clipped
 * (or dilated) window runs the same block over whole kernel rows where it can, else tap by tap, padded values read
 * from a stack row of zero points (in_ch at most FOLD_ZP_BYTES).
 *
 * Other in_ch: the scratch (ctx->buf, 4-byte aligned, tinyaot_convolve_s8_fold_get_buffer_size bytes) holds the
 * windows of two output pixels a and b as int16 values, per group of four positions (a0, a2, a1, a3, b0, b2, b1,
 * b3), then the K % 4 last values of a and of b. The (0, 2, 1, 3) order makes a column word equal to what SXTB16
 * (bytes 0 and 2) and SXTB16 ROR 8 (bytes 1 and 3) unpack from a filter word, so one SMLAD does two multiply-adds;
 * the same 4x2 block (inline assembly on GCC with DSP: 39 instructions per 32 multiply-adds). Without DSP the same
 * layouts are read value by value.
 *
 * Overflow: with the folded bias the accumulator after any subset of taps is folded[o] + sum_{subset} x * w, of
 * magnitude at most B[o] = |bias| + sum|w| * (128 + |input_offset|) < 2^30 (checked by the compiler before it offers
 * this variant, see tinyaot_fold_support.h); each SMLAD adds two products of magnitude at most 128 * 128.
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_conv.h"

int32_t tinyaot_convolve_s8_fold_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    if (filter_dims->c % 4 == 0) {
        return 0; /* windows read in place */
    }
    return 2 * filter_dims->h * filter_dims->w * filter_dims->c * (int32_t)sizeof(int16_t);
}

/* ---- the column path (in_ch not a multiple of 4) ---- */

/* Column position of window value j of the pixel in slot s (0: a, 1: b). */
static inline int32_t fold_pos(const fold_geom *g, int32_t j, int32_t s)
{
    if (j < g->k4) {
        return ((j & ~3) << 1) + (s << 2) + (((j & 1) << 1) | ((j >> 1) & 1));
    }
    return (g->k4 << 1) + s * (g->k - g->k4) + (j - g->k4);
}

/* Window values j .. j+n-1 of slot s: src[0 .. n-1], or the zero point when src is NULL (padding). */
static void fold_put(int16_t *col, const fold_geom *g, int32_t s, int32_t j, const int8_t *src, int32_t n)
{
    for (; n > 0 && (j & 3) != 0; n--, j++) {
        col[fold_pos(g, j, s)] = (int16_t)(src ? *src++ : g->zp);
    }
#if TINYAOT_USE_DSP
    {
        /* whole groups of four: one word in, two words out, already in (v0, v2), (v1, v3) order */
        int16_t *d = col + (j << 1) + (s << 2);
        const int32_t zz = tinyaot_dup16(g->zp);
        for (; n >= 4 && j + 4 <= g->k4; n -= 4, j += 4, d += 8) {
            if (src) {
                const int32_t v = tinyaot_read_s8x4(src);
                src += 4;
                tinyaot_write_s16x2(d, __sxtb16(v));
                tinyaot_write_s16x2(d + 2, tinyaot_sxtb16_ror8(v));
            } else {
                tinyaot_write_s16x2(d, zz);
                tinyaot_write_s16x2(d + 2, zz);
            }
        }
    }
#endif
    for (; n > 0; n--, j++) {
        col[fold_pos(g, j, s)] = (int16_t)(src ? *src++ : g->zp);
    }
}

TINYAOT_WINDOW_FILL_FN(fold_fill, fold_geom, fold_put)

#if FOLD_ASM
/* One channel of a column group in fold_col_4x2's assembly: filter word at w + off, unpacked by `ext` (SXTB16 with
   or without ROR 8), against the pixel-a and pixel-b column words in t1, t2. */
#define FOLD_COL_CH(ch, off, ext)                                                                                      \
    "ldr %[t3], [%[w], #" off "]\n\t"                                                                                  \
    "sxtb16 %[t3], %[t3]" ext "\n\t"                                                                                  \
    "smlad %[a" #ch "], %[t1], %[t3], %[a" #ch "]\n\t"                                                                \
    "smlad %[b" #ch "], %[t2], %[t3], %[b" #ch "]\n\t"
#endif

/* acc[c] (pixel a) and acc[4 + c] (pixel b) += column . filter of channel c, for the block of four channels at w. */
#if FOLD_ASM
/* the assembly needs 14 registers (r7 too: no frame pointer), which GCC finds only in a small function */
TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER
#endif
static void fold_col_4x2(const int16_t *col, const int8_t *w, const fold_geom *g, int32_t acc[8])
{
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int32_t b0 = acc[4], b1 = acc[5], b2 = acc[6], b3 = acc[7];
    const int16_t *c = col;
    int32_t i;
#if FOLD_ASM
    /* 13 registers: 8 accumulators, column and filter pointers, 3 temporaries (the column end is compared from
       memory: v8.1-M leaves one register fewer). Per group: 4 column loads, 4 filter loads (each twice), 8 SXTB16,
       16 SMLAD, 3 for the loop: 39 instructions for 32 multiply-adds. */
    if (g->k4 > 0) {
        const int16_t *const end = col + 2 * g->k4;
        int32_t t1, t2, t3;
        __asm__("1:\n\t"
                "ldr %[t1], [%[c], #4]\n\t"
                "ldr %[t2], [%[c], #12]\n\t"
                FOLD_COL_CH(0, "0", ", ror #8") FOLD_COL_CH(1, "4", ", ror #8") FOLD_COL_CH(2, "8", ", ror #8")
                FOLD_COL_CH(3, "12", ", ror #8")
                "ldr %[t2], [%[c], #8]\n\t"
                "ldr %[t1], [%[c]], #16\n\t"
                FOLD_COL_CH(1, "4", "") FOLD_COL_CH(2, "8", "") FOLD_COL_CH(3, "12", "")
                "ldr %[t3], [%[w]], #16\n\t"
                "sxtb16 %[t3], %[t3]\n\t"
                "smlad %[a0], %[t1], %[t3], %[a0]\n\t"
                "smlad %[b0], %[t2], %[t3], %[b0]\n\t"
                "ldr %[t1], %[end]\n\t"
                "cmp %[c], %[t1]\n\t"
                "bne 1b\n\t"
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [b0] "+r"(b0), [b1] "+r"(b1),
                  [b2] "+r"(b2), [b3] "+r"(b3), [c] "+r"(c), [w] "+r"(w), [t1] "=&r"(t1), [t2] "=&r"(t2),
                  [t3] "=&r"(t3)
                : [end] "m"(end)
                : "cc", "memory");
    }
#elif TINYAOT_USE_DSP
/* The four channels' filter words at w, each unpacked by ext (SXTB16 with or without ROR 8), against the lane pairs
   xa (pixel a) and xb (pixel b) */
#define FOLD_COL_HALF(ext)                                                                                            \
    do {                                                                                                              \
        t = ext(tinyaot_read_s8x4(w));                                                                                \
        a0 = __smlad(xa, t, a0);                                                                                      \
        b0 = __smlad(xb, t, b0);                                                                                      \
        t = ext(tinyaot_read_s8x4(w + 4));                                                                            \
        a1 = __smlad(xa, t, a1);                                                                                      \
        b1 = __smlad(xb, t, b1);                                                                                      \
        t = ext(tinyaot_read_s8x4(w + 8));                                                                            \
        a2 = __smlad(xa, t, a2);                                                                                      \
        b2 = __smlad(xb, t, b2);                                                                                      \
        t = ext(tinyaot_read_s8x4(w + 12));                                                                           \
        a3 = __smlad(xa, t, a3);                                                                                      \
        b3 = __smlad(xb, t, b3);                                                                                      \
    } while (0)
    for (i = g->k4 >> 2; i > 0; i--) {
        /* lanes (0, 2) of both pixels against SXTB16 of each filter word, then lanes (1, 3) against SXTB16 ROR 8 */
        int32_t xa = tinyaot_read_s16x2(c);
        int32_t xb = tinyaot_read_s16x2(c + 4);
        int32_t t;
        FOLD_COL_HALF(__sxtb16);
        xa = tinyaot_read_s16x2(c + 2);
        xb = tinyaot_read_s16x2(c + 6);
        FOLD_COL_HALF(tinyaot_sxtb16_ror8);
        w += 16;
        c += 8;
    }
#else
    for (i = g->k4 >> 2; i > 0; i--) {
        /* column values in (0, 2, 1, 3) order, filter bytes in order; each sum of four products is below 2^16 */
        const int32_t x0 = c[0], x2 = c[1], x1 = c[2], x3 = c[3];
        a0 += x0 * w[0] + x1 * w[1] + x2 * w[2] + x3 * w[3];
        a1 += x0 * w[4] + x1 * w[5] + x2 * w[6] + x3 * w[7];
        a2 += x0 * w[8] + x1 * w[9] + x2 * w[10] + x3 * w[11];
        a3 += x0 * w[12] + x1 * w[13] + x2 * w[14] + x3 * w[15];
        {
            const int32_t y0 = c[4], y2 = c[5], y1 = c[6], y3 = c[7];
            b0 += y0 * w[0] + y1 * w[1] + y2 * w[2] + y3 * w[3];
            b1 += y0 * w[4] + y1 * w[5] + y2 * w[6] + y3 * w[7];
            b2 += y0 * w[8] + y1 * w[9] + y2 * w[10] + y3 * w[11];
            b3 += y0 * w[12] + y1 * w[13] + y2 * w[14] + y3 * w[15];
        }
        w += 16;
        c += 8;
    }
#endif
    {
        const int32_t t = g->k - g->k4;
        for (i = 0; i < t; i++) {
            const int32_t xa = c[i];
            const int32_t xb = c[t + i];
            a0 += xa * w[i];
            a1 += xa * w[t + i];
            a2 += xa * w[2 * t + i];
            a3 += xa * w[3 * t + i];
            b0 += xb * w[i];
            b1 += xb * w[t + i];
            b2 += xb * w[2 * t + i];
            b3 += xb * w[3 * t + i];
        }
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    acc[4] = b0, acc[5] = b1, acc[6] = b2, acc[7] = b3;
}

/* Both pixels, one channel whose K values are in order. */
static void fold_col_2x1(const int16_t *col, const int8_t *w, const fold_geom *g, int32_t *acc_a, int32_t *acc_b)
{
    int32_t a = *acc_a;
    int32_t b = *acc_b;
    const int16_t *c = col;
    int32_t j;
    for (j = 0; j < g->k4; j += 4, c += 8) {
        a += c[0] * w[j] + c[1] * w[j + 2] + c[2] * w[j + 1] + c[3] * w[j + 3];
        b += c[4] * w[j] + c[5] * w[j + 2] + c[6] * w[j + 1] + c[7] * w[j + 3];
    }
    {
        const int32_t t = g->k - g->k4;
        for (j = 0; j < t; j++) {
            a += c[j] * w[g->k4 + j];
            b += c[t + j] * w[g->k4 + j];
        }
    }
    *acc_a = a;
    *acc_b = b;
}

static void fold_in_place(const fold_geom *g, const int8_t *input, const int8_t *filter, const fold_out *q,
                          int32_t n_pix, int32_t out_h, int32_t out_w, int8_t *output)
{
    uint32_t zwords[FOLD_ZP_BYTES / 4]; /* zero points for clipped windows (fold_pair_clipped) */
    const uint32_t z4 = ((uint32_t)g->zp & 0xFFu) * 0x01010101u;
    const int32_t k = g->k;
    const int32_t out_c = q->out_c;
    const int32_t row_n4 = (g->k_w * g->in_c) >> 2;
    const int32_t row_step = g->dil_h * g->in_w * g->in_c;
    const int rows_run = (g->dil_w == 1); /* a kernel row is one contiguous run of the input */
    const int8_t *zrow = (const int8_t *)zwords;
    int32_t p, i;
    for (i = 0; i < FOLD_ZP_BYTES / 4; i++) {
        zwords[i] = z4;
    }
    for (p = 0; p < n_pix; p += 2) {
        /* a lone last pixel is computed twice (slot b holds it again and writes the same results over slot a's) */
        const int two_pix = (p + 1 < n_pix);
        fold_pixel pa, pb;
        fold_locate(g, input, out_h, out_w, p, &pa);
        fold_locate(g, input, out_h, out_w, two_pix ? p + 1 : p, &pb);
        int8_t *out_a = output + p * out_c;
        int8_t *out_b = two_pix ? out_a + out_c : out_a;
        if (!(rows_run && pa.inside && pb.inside)) {
            fold_pair_clipped(g, &pa, &pb, zrow, filter, q, 0, out_c, out_a, out_b);
            continue;
        }
        const int8_t *xa0 = pa.in_b + (pa.base_y * g->in_w + pa.base_x) * g->in_c;
        const int8_t *xb0 = pb.in_b + (pb.base_y * g->in_w + pb.base_x) * g->in_c;
        const int8_t *w = filter;
        int32_t o;
        for (o = 0; o + 3 < out_c; o += 4) {
            int32_t acc[8];
            int32_t c, ky;
            const int8_t *xa = xa0;
            const int8_t *xb = xb0;
            for (c = 0; c < 4; c++) {
                acc[c] = acc[4 + c] = q->bias[o + c];
            }
            for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, w += 16 * row_n4) {
                fold_mac_4x2_s8(xa, xb, w, row_n4, acc);
            }
            fold_store_4x2(q, o, acc, out_a, out_b);
        }
        for (; o < out_c; o++, w += k) {
            int32_t acc_a = q->bias[o];
            int32_t acc_b = acc_a;
            const int8_t *xa = xa0;
            const int8_t *xb = xb0;
            const int8_t *wr = w;
            int32_t ky;
            for (ky = 0; ky < g->k_h; ky++, xa += row_step, xb += row_step, wr += 4 * row_n4) {
                acc_a = fold_dot_s8(xa, wr, row_n4, acc_a);
                acc_b = fold_dot_s8(xb, wr, row_n4, acc_b);
            }
            out_a[o] = tinyaot_fold_rq(acc_a, q->mr + 2 * o, tinyaot_fold_e(q->e, o), q->act_min, q->act_max);
            out_b[o] = tinyaot_fold_rq(acc_b, q->mr + 2 * o, tinyaot_fold_e(q->e, o), q->act_min, q->act_max);
        }
    }
}

tinyaot_status tinyaot_convolve_s8_fold(TINYAOT_CONV_ARGS(int8_t))
{
    const int32_t out_c = filter_dims->n;
    const int32_t out_h = output_dims->h;
    const int32_t out_w = output_dims->w;
    (void)bias_dims;

    /* one group only, the folded bias given, and (in_ch not a multiple of 4) the whole scratch, 4-byte aligned */
    if (filter_dims->c != input_dims->c || output_dims->c != out_c || conv_params->stride.h <= 0 ||
        conv_params->stride.w <= 0 || conv_params->dilation.h <= 0 || conv_params->dilation.w <= 0 || bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    fold_out q;
    FOLD_OUT_SET(q, bias, quant_params, out_c, conv_params);
    fold_geom g;
    TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
    g.zp = -conv_params->input_offset;
    g.k = g.k_h * g.k_w * g.in_c;
    g.k4 = g.k & ~3;
    const int32_t k = g.k;
    const int32_t n_pix = input_dims->n * out_h * out_w;
    if (g.in_c % 4 == 0) {
        if (g.in_c > FOLD_ZP_BYTES) {
            return TINYAOT_ARG_ERROR; /* a padded tap reads in_ch zero points from the stack */
        }
        fold_in_place(&g, input, filter, &q, n_pix, out_h, out_w, output);
        return TINYAOT_OK;
    }
    if (ctx == NULL || ctx->buf == NULL || ((uintptr_t)ctx->buf & 3u) != 0 ||
        ctx->size < tinyaot_convolve_s8_fold_get_buffer_size(input_dims, filter_dims)) {
        return TINYAOT_ARG_ERROR;
    }
    int16_t *col = (int16_t *)ctx->buf;
    int32_t p;
    for (p = 0; p < n_pix; p += 2) {
        /* a lone last pixel is computed twice (slot b holds it again and writes the same results over slot a's) */
        const int two_pix = (p + 1 < n_pix);
        fold_fill(col, &g, input, out_h, out_w, p, 0);
        fold_fill(col, &g, input, out_h, out_w, two_pix ? p + 1 : p, 1);
        int8_t *out_a = output + p * out_c;
        int8_t *out_b = two_pix ? out_a + out_c : out_a;
        const int8_t *w = filter;
        int32_t o;
        for (o = 0; o + 3 < out_c; o += 4, w += 4 * k) {
            int32_t acc[8];
            int32_t c;
            for (c = 0; c < 4; c++) {
                acc[c] = acc[4 + c] = bias[o + c];
            }
            fold_col_4x2(col, w, &g, acc);
            fold_store_4x2(&q, o, acc, out_a, out_b);
        }
        for (; o < out_c; o++, w += k) {
            int32_t acc_a = bias[o];
            int32_t acc_b = acc_a;
            fold_col_2x1(col, w, &g, &acc_a, &acc_b);
            out_a[o] = tinyaot_fold_rq(acc_a, q.mr + 2 * o, tinyaot_fold_e(q.e, o), q.act_min, q.act_max);
            out_b[o] = tinyaot_fold_rq(acc_b, q.mr + 2 * o, tinyaot_fold_e(q.e, o), q.act_min, q.act_max);
        }
    }
    return TINYAOT_OK;
}
