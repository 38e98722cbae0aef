/*
 * tinyaot_convolve_s8_mve: int8 NHWC convolution, one group, any kernel size, stride, dilation and padding, with
 * the input offset folded into the bias (tinyaot_nn_mve.h).
 *
 * Each output pixel's window is gathered into an int8 im2col column of K = kh * kw * in_ch values in the filter's
 * OHWI order (a kernel row inside the input is one contiguous run of kw * in_ch bytes when there is no horizontal
 * dilation). Padded taps hold the input zero point -input_offset: then (zp + input_offset) * w = 0 exactly as in
 * the reference, i.e. their raw product zp * w cancels their share input_offset * w of the folded bias. The column
 * is then one matrix product with the OHWI filter rows (tinyaot_mve_gemm.h: Helium, four output channels per pass,
 * two pixels per pass when the scratch holds two columns; portable C on other cores).
 *
 * When there is no horizontal dilation, in_c >= 8 and a kernel row holds at least 16 values (k_w * in_c >= 16),
 * the windows are read in place instead (the direct path below, no scratch). A kernel row inside the input is then
 * one contiguous run of k_w * in_c bytes of the NHWC input row; the filter pads each kernel row of every output
 * channel with zeros to whole 16-value chunks (tinyaot/ops/mve.py direct_rows), so the last chunk of a row is
 * loaded with a tail predicate and multiplies zero weights past the run. With in_c a multiple of 16 (no padding)
 * each chunk lies within one tap and a padded tap is the zero-point vector; otherwise a chunk may join padded and
 * input taps, and takes the zero point in the padded lanes.
 *
 * Scratch (column path only): required, one column (K bytes, no alignment needed) or two. Pixels are produced in
 * raster order, at most two at a time, and a pixel's window is read before its output is written, as tinyaot_nn.h
 * promises the memory planner.
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_window.h"
#include "tinyaot_mve_gemm.h"
#include "tinyaot_mve_im2col.h"

int32_t tinyaot_convolve_s8_mve_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    /* the direct path (in_c >= 8, k_w * in_c >= 16, no horizontal dilation: tinyaot/ops/mve.py asks the same)
       needs none; the dilation is not known here, so with a dilated width the kernel still needs the columns it
       asks for */
    if (input_dims->c >= 8 && filter_dims->w * input_dims->c >= 16) {
        return 0;
    }
    return 2 * filter_dims->h * filter_dims->w * filter_dims->c;
}

#if TINYAOT_USE_MVE
/* The window of output pixel q when a kernel row is at most 16 values (k_w * in_c <= 16, the thin first layers) and
   lies horizontally inside the input: each row is one predicated 16-byte move (prow: the first k_w * in_c lanes),
   a row above or below the input the zero point. Returns 0 (nothing written) for windows crossing the left or right
   padding, which col_fill handles. */
static int col_fill_thin(int8_t *col, const conv_geom *g, const int8_t *input, const pixel_pos *q, mve_pred16_t prow)
{
    const int32_t base_x = q->ox * g->stride_w - g->pad_l;
    const int32_t in_h = g->in_h;
    const int32_t run = g->k_w * g->in_c;
    const int32_t row_bytes = g->in_w * g->in_c;
    int32_t iy = q->oy * g->stride_h - g->pad_t;
    int32_t ky = g->k_h;
    const int8_t *src;
    /* rows dil_h apart */
    if (base_x < 0 || base_x + g->k_w > g->in_w) {
        return 0;
    }
    src = input + q->b * in_h * row_bytes + base_x * g->in_c;
    for (; ky > 0; ky--, iy += g->dil_h, col += run) {
        if (iy >= 0 && iy < in_h) {
            vstrbq_p_s8(col, vldrbq_z_s8(src + iy * row_bytes, prow), prow);
        } else {
            vstrbq_p_s8(col, vdupq_n_s8(g->zp), prow);
        }
    }
    return 1;
}
#endif

/* ---------------------------------------------------------------------------------------------------------------
 * Direct path (no scratch): no horizontal dilation, in_c >= 8 and k_w * in_c >= 16. A kernel row inside the input
 * is one contiguous run of the NHWC input row, in the filter's own order; the filter holds each kernel row as
 * row_chunks = ceil(k_w * in_c / 16) chunks, zero-padded (tinyaot/ops/mve.py direct_rows). A chunk of padded taps
 * is the zero-point vector instead of a load.
 * ------------------------------------------------------------------------------------------------------------- */
#if TINYAOT_USE_MVE
/* The asm text shared by the two loop nests below: the four weight chunks of a block against the two columns' chunk
   in q0 and q1 (8 VMLADAVA), and the step to the next kernel row (loop[1] bytes on, loop[2] rows left). */
#define DIRECT_WEIGHTS_MAC                                                                                        \
    "vldrb.8 q2, [%[pw]], #16\n\t"                                                                                 \
    "vmladava.s8 %[r0], q0, q2\n\t"                                                                                \
    "vmladava.s8 %[s0], q1, q2\n\t"                                                                                \
    "vldrb.8 q2, [%[pw]], #16\n\t"                                                                                 \
    "vmladava.s8 %[r1], q0, q2\n\t"                                                                                \
    "vmladava.s8 %[s1], q1, q2\n\t"                                                                                \
    "vldrb.8 q2, [%[pw]], #16\n\t"                                                                                 \
    "vmladava.s8 %[r2], q0, q2\n\t"                                                                                \
    "vmladava.s8 %[s2], q1, q2\n\t"                                                                                \
    "vldrb.8 q2, [%[pw]], #16\n\t"                                                                                 \
    "vmladava.s8 %[r3], q0, q2\n\t"                                                                                \
    "vmladava.s8 %[s3], q1, q2\n\t"
#define DIRECT_NEXT_ROW                                                                                           \
    "ldr %[cnt], [%[lp], #4]\n\t"                                                                                  \
    "add %[pa], %[pa], %[cnt]\n\t"                                                                                 \
    "add %[pb], %[pb], %[cnt]\n\t"                                                                                 \
    "ldr %[cnt], [%[lp], #8]\n\t"                                                                                  \
    "subs %[cnt], %[cnt], #1\n\t"                                                                                  \
    "str %[cnt], [%[lp], #8]\n\t"                                                                                  \
    "bne 2b"

/* n_pairs pairs of horizontally adjacent pixels of one output row whose windows are inside the input: the first
   window's top-left tap at w0, the next pixel's pix_step bytes further; outputs from out on. `tail` (a constant
   where this is inlined): k_w * in_c is not a multiple of 16, so each kernel row ends in a partial chunk, loaded
   with a tail predicate (VCTP.8: the lanes past the run read no memory; their weights are zero). The inline
   assembly below uses every low register, r7 included, so GCC must keep no frame pointer here even in a build with
   -fno-omit-frame-pointer (found building with it: "asm operand has impossible constraints"). */
static TINYAOT_ALWAYS_INLINE void direct_pairs_body(const int8_t *w0, int32_t n_pairs,
                                                                    int32_t pix_step, const conv_geom *g,
                                                                    const int8_t *filter, int32_t n_out,
                                                                    const tinyaot_mve_requant *q, int8_t *out,
                                                                    const int tail)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t k_h = g->k_h;
    const int32_t run = g->k_w * g->in_c;            /* values per kernel row, >= 16 */
    const int32_t chunks = run / 16;                 /* whole chunks per kernel row, >= 1 */
    const int32_t row_step = g->dil_h * g->in_w * g->in_c;
    const int32_t k = k_h * (chunks + (tail ? 1 : 0)) * 16;
    for (; n_pairs > 0; n_pairs--, w0 += 2 * pix_step, out += 2 * n_out) {
        const int8_t *wa = w0;
        const int8_t *wb = w0 + pix_step;
        int8_t *out_a = out;
        int8_t *out_b = out + n_out;
        int32_t o;
        for (o = 0; o < n_out; o += 4) {
            const int8_t *w = filter + o * k;
            const int8_t *xa = wa;
            const int8_t *xb = wb;
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            int32_t b0 = 0, b1 = 0, b2 = 0, b3 = 0;
#if defined(__OPTIMIZE__) && TINYAOT_GCC
            /* All kernel rows in one loop nest, the row loop's constants in memory (loop[]): the eight even-register
               accumulators and the three pointers leave no register for them (see TINYAOT_MVE_MAC4X2). */
            int32_t loop[4];
            int32_t n;
            loop[0] = chunks;
            loop[1] = row_step - chunks * 16; /* from the end of one row's whole chunks to the start of the next */
            loop[2] = k_h;
            if (!tail) {
                __asm__("2:\n\t"
                        "ldr %[cnt], [%[lp]]\n\t"
                        "1:\n\t"
                        "vldrb.8 q0, [%[pa]], #16\n\t"
                        "vldrb.8 q1, [%[pb]], #16\n\t"
                        DIRECT_WEIGHTS_MAC
                        "subs %[cnt], %[cnt], #1\n\t"
                        "bne 1b\n\t"
                        DIRECT_NEXT_ROW
                        : [r0] "+Te"(a0), [r1] "+Te"(a1), [r2] "+Te"(a2), [r3] "+Te"(a3), [s0] "+Te"(b0),
                          [s1] "+Te"(b1), [s2] "+Te"(b2), [s3] "+Te"(b3), [pa] "+r"(xa), [pb] "+r"(xb), [pw] "+r"(w),
                          [cnt] "=&r"(n)
                        : [lp] "r"(loop)
                        : "q0", "q1", "q2", "memory", "cc");
            } else {
                /* the same, and after each row's whole chunks its partial one: both columns' loads predicated to
                   the run's last run % 16 values (loop[3]), the four weight chunks whole (zero past the run) */
                loop[3] = run % 16;
                __asm__("2:\n\t"
                        "ldr %[cnt], [%[lp]]\n\t"
                        "1:\n\t"
                        "vldrb.8 q0, [%[pa]], #16\n\t"
                        "vldrb.8 q1, [%[pb]], #16\n\t"
                        DIRECT_WEIGHTS_MAC
                        "subs %[cnt], %[cnt], #1\n\t"
                        "bne 1b\n\t"
                        "ldr %[cnt], [%[lp], #12]\n\t"
                        "vctp.8 %[cnt]\n\t"
                        "vpstt\n\t"
                        "vldrbt.8 q0, [%[pa]]\n\t"
                        "vldrbt.8 q1, [%[pb]]\n\t"
                        DIRECT_WEIGHTS_MAC
                        DIRECT_NEXT_ROW
                        : [r0] "+Te"(a0), [r1] "+Te"(a1), [r2] "+Te"(a2), [r3] "+Te"(a3), [s0] "+Te"(b0),
                          [s1] "+Te"(b1), [s2] "+Te"(b2), [s3] "+Te"(b3), [pa] "+r"(xa), [pb] "+r"(xb), [pw] "+r"(w),
                          [cnt] "=&r"(n)
                        : [lp] "r"(loop)
                        : "q0", "q1", "q2", "p0", "memory", "cc");
            }
#else
            int32_t ky;
            for (ky = 0; ky < k_h; ky++) {
                const int8_t *ra = xa + ky * row_step;
                const int8_t *rb = xb + ky * row_step;
                int32_t n = chunks;
                TINYAOT_MVE_MAC4X2(ra, rb, w, n, a0, a1, a2, a3, b0, b1, b2, b3);
                if (tail) {
                    const mve_pred16_t pt = vctp8q((uint32_t)(run % 16));
                    const int8x16_t va_ = vldrbq_z_s8(ra, pt);
                    const int8x16_t vb_ = vldrbq_z_s8(rb, pt);
                    int8x16_t wv_ = vldrbq_s8(w);
                    a0 = vmladavaq_s8(a0, va_, wv_);
                    b0 = vmladavaq_s8(b0, vb_, wv_);
                    wv_ = vldrbq_s8(w + 16);
                    a1 = vmladavaq_s8(a1, va_, wv_);
                    b1 = vmladavaq_s8(b1, vb_, wv_);
                    wv_ = vldrbq_s8(w + 32);
                    a2 = vmladavaq_s8(a2, va_, wv_);
                    b2 = vmladavaq_s8(b2, vb_, wv_);
                    wv_ = vldrbq_s8(w + 48);
                    a3 = vmladavaq_s8(a3, va_, wv_);
                    b3 = vmladavaq_s8(b3, vb_, wv_);
                    w += 64;
                }
            }
#endif
            {
                int32x4_t va = tinyaot_mve_lanes(a0, a1, a2, a3);
                int32x4_t vb = tinyaot_mve_lanes(b0, b1, b2, b3);
                const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
                tinyaot_mve_requant2(&va, &vb, &e, o);
                vstrbq_p_s32(out_a + o, va, p4);
                vstrbq_p_s32(out_b + o, vb, p4);
            }
        }
    }
}

static TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER void direct_pairs(const int8_t *w0, int32_t n_pairs, int32_t pix_step, const conv_geom *g,
                                          const int8_t *filter, int32_t n_out, const tinyaot_mve_requant *q,
                                          int8_t *out)
{
    direct_pairs_body(w0, n_pairs, pix_step, g, filter, n_out, q, out, 0);
}

static TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER void direct_pairs_tail(const int8_t *w0, int32_t n_pairs, int32_t pix_step,
                                               const conv_geom *g, const int8_t *filter, int32_t n_out,
                                               const tinyaot_mve_requant *q, int8_t *out)
{
    direct_pairs_body(w0, n_pairs, pix_step, g, filter, n_out, q, out, 1);
}

/* acc[0..3] += chunks of x (n >= 0 of them) against the block rows at *w (advanced). */
#define DIRECT_RUN(xsrc, n)                                                                                       \
    do {                                                                                                          \
        const int8_t *x_ = (xsrc);                                                                                \
        int32_t n_ = (n);                                                                                         \
        for (; n_ > 0; n_--, x_ += 16, w += 64) {                                                                 \
            const int8x16_t xv_ = vldrbq_s8(x_);                                                                  \
            a0 = vmladavaq_s8(a0, xv_, vldrbq_s8(w));                                                             \
            a1 = vmladavaq_s8(a1, xv_, vldrbq_s8(w + 16));                                                        \
            a2 = vmladavaq_s8(a2, xv_, vldrbq_s8(w + 32));                                                        \
            a3 = vmladavaq_s8(a3, xv_, vldrbq_s8(w + 48));                                                        \
        }                                                                                                         \
    } while (0)

/* acc[0..3] += n >= 0 chunks of the zero point (padded taps) against the block rows at *w (advanced). */
#define DIRECT_PAD(n)                                                                                             \
    do {                                                                                                          \
        int32_t n_ = (n);                                                                                         \
        for (; n_ > 0; n_--, w += 64) {                                                                           \
            a0 = vmladavaq_s8(a0, zp, vldrbq_s8(w));                                                              \
            a1 = vmladavaq_s8(a1, zp, vldrbq_s8(w + 16));                                                         \
            a2 = vmladavaq_s8(a2, zp, vldrbq_s8(w + 32));                                                         \
            a3 = vmladavaq_s8(a3, zp, vldrbq_s8(w + 48));                                                         \
        }                                                                                                         \
    } while (0)

/* One pixel anywhere (its window may cross the padding): per kernel row, the padded taps before the input, the
   taps inside it (one contiguous run), the padded taps after it. */
static TINYAOT_NOINLINE void direct_one(const int8_t *input, const conv_geom *g, const pixel_pos *q,
                                        const int8_t *filter, int32_t n_out, const tinyaot_mve_requant *rq,
                                        int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(rq);
    const int32_t in_h = g->in_h;
    const int32_t in_w = g->in_w;
    const int32_t in_c = g->in_c;
    const int32_t k_h = g->k_h;
    const int32_t k_w = g->k_w;
    const int32_t dil_h = g->dil_h;
    const int32_t base_y = q->oy * g->stride_h - g->pad_t;
    const int32_t base_x = q->ox * g->stride_w - g->pad_l;
    const int32_t kx0 = base_x < 0 ? -base_x : 0;
    const int32_t kx1 = base_x + k_w > in_w ? (in_w - base_x > kx0 ? in_w - base_x : kx0) : k_w;
    const int32_t per_tap = in_c / 16;
    const int32_t lead = kx0 * per_tap;               /* chunks per row: padding, input, padding */
    const int32_t span = (kx1 - kx0) * per_tap;
    const int32_t trail = (k_w - kx1) * per_tap;
    const int32_t row_chunks = k_w * per_tap;
    const int8_t *in_b = input + q->b * in_h * in_w * in_c + (base_x + kx0) * in_c; /* column of the run */
    const int32_t k = k_h * k_w * in_c;
    const int8x16_t zp = vdupq_n_s8(g->zp);
    int32_t o;
    for (o = 0; o < n_out; o += 4) {
        const int8_t *w = filter + o * k;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int32_t ky;
        int32_t iy = base_y;
        for (ky = 0; ky < k_h; ky++, iy += dil_h) {
            if (iy < 0 || iy >= in_h) {
                DIRECT_PAD(row_chunks);
                continue;
            }
            DIRECT_PAD(lead);
            DIRECT_RUN(in_b + iy * in_w * in_c, span);
            DIRECT_PAD(trail);
        }
        {
            const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
            const tinyaot_mve_block b = tinyaot_mve_block_of(&e, o, p4);
            tinyaot_mve_store4(tinyaot_mve_lanes(a0, a1, a2, a3), &e, &b, p4, out + o);
        }
    }
}

/* acc[0..3] += one chunk at x whose lanes in predicate p are input values and the others padded taps (the zero
   point) or lanes past the run (zero weights): the load reads the lanes of p only. */
#define DIRECT_MIXED(xsrc, p)                                                                                     \
    do {                                                                                                          \
        const int8x16_t xv_ = vpselq_s8(vldrbq_z_s8((xsrc), (p)), zp, (p));                                       \
        a0 = vmladavaq_s8(a0, xv_, vldrbq_s8(w));                                                                 \
        a1 = vmladavaq_s8(a1, xv_, vldrbq_s8(w + 16));                                                            \
        a2 = vmladavaq_s8(a2, xv_, vldrbq_s8(w + 32));                                                            \
        a3 = vmladavaq_s8(a3, xv_, vldrbq_s8(w + 48));                                                            \
        w += 64;                                                                                                  \
    } while (0)

/* One pixel anywhere when a kernel row's run k_w * in_c is not whole chunks of taps (in_c not a multiple of 16):
   in each row inside the input, bytes [lo, hi) of the padded row come from the input and the rest are padded taps
   (or, past the run, lanes of zero weights). The row splits the same way for every row and output channel:
   n_pre chunks of padding, the chunk holding lo if it is partial (m1), n_in whole chunks of input, the chunk holding
   hi if partial and not the same one (m2), then padding. A partial chunk's input lanes are loaded under a predicate
   and the others take the zero point (DIRECT_MIXED). */
static TINYAOT_NOINLINE void direct_one_rows(const int8_t *input, const conv_geom *g, const pixel_pos *q,
                                             const int8_t *filter, int32_t n_out, const tinyaot_mve_requant *rq,
                                             int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(rq);
    const int32_t in_h = g->in_h;
    const int32_t in_w = g->in_w;
    const int32_t in_c = g->in_c;
    const int32_t k_h = g->k_h;
    const int32_t k_w = g->k_w;
    const int32_t dil_h = g->dil_h;
    const int32_t base_y = q->oy * g->stride_h - g->pad_t;
    const int32_t base_x = q->ox * g->stride_w - g->pad_l;
    const int32_t kx0 = base_x < 0 ? -base_x : 0;
    const int32_t kx1 = base_x + k_w > in_w ? (in_w - base_x > kx0 ? in_w - base_x : kx0) : k_w;
    const int32_t row_chunks = (k_w * in_c + 15) / 16;
    const int32_t lo = kx0 * in_c;
    const int32_t hi = kx1 * in_c;
    const int32_t n_pre = lo / 16;
    const int32_t m1 = lo % 16 != 0;
    const int32_t j1 = n_pre + m1;
    const int32_t n_in = hi / 16 > j1 ? hi / 16 - j1 : 0;
    const int32_t j2 = j1 + n_in;
    const int32_t m2 = j2 < row_chunks && j2 * 16 < hi;
    const int32_t n_post = row_chunks - j2 - m2;
    /* lanes of the partial chunks that hold input: [lo % 16, min(hi - 16 * n_pre, 16)) and [0, hi - 16 * j2) */
    const int32_t end1 = hi - 16 * n_pre < 16 ? hi - 16 * n_pre : 16;
    const mve_pred16_t p1 = (mve_pred16_t)(vctp8q((uint32_t)end1) & (mve_pred16_t)~vctp8q((uint32_t)(lo % 16)));
    const mve_pred16_t p2 = vctp8q((uint32_t)(m2 ? hi - 16 * j2 : 0));
    /* the input row's byte at padded-row position lo (input column base_x + kx0); a partial first chunk starts
       lo % 16 bytes before it, reading only the lanes of p1 (the address is formed as an integer: it may lie
       before the input) */
    const int8_t *in_b = input + q->b * in_h * in_w * in_c + (base_x + kx0) * in_c;
    const int32_t k = k_h * row_chunks * 16;
    const int8x16_t zp = vdupq_n_s8(g->zp);
    int32_t o;
    for (o = 0; o < n_out; o += 4) {
        const int8_t *w = filter + o * k;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int32_t ky;
        int32_t iy = base_y;
        for (ky = 0; ky < k_h; ky++, iy += dil_h) {
            const int8_t *r;
            if (iy < 0 || iy >= in_h) {
                DIRECT_PAD(row_chunks);
                continue;
            }
            r = in_b + iy * in_w * in_c;
            DIRECT_PAD(n_pre);
            if (m1) {
                DIRECT_MIXED((const int8_t *)((uintptr_t)r - (uintptr_t)(lo % 16)), p1);
            }
            DIRECT_RUN(r + (16 * j1 - lo), n_in);
            if (m2) {
                DIRECT_MIXED(r + (16 * j2 - lo), p2);
            }
            DIRECT_PAD(n_post);
        }
        {
            const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
            const tinyaot_mve_block b = tinyaot_mve_block_of(&e, o, p4);
            tinyaot_mve_store4(tinyaot_mve_lanes(a0, a1, a2, a3), &e, &b, p4, out + o);
        }
    }
}
#else
/* Portable: one pixel, any position, zero point for padded taps. */
static void direct_one(const int8_t *input, const conv_geom *g, const pixel_pos *q, const int8_t *filter,
                       int32_t n_out, const tinyaot_mve_requant *rq, int8_t *out)
{
    const int8_t *in_b = input + q->b * g->in_h * g->in_w * g->in_c;
    const int32_t base_y = q->oy * g->stride_h - g->pad_t;
    const int32_t base_x = q->ox * g->stride_w - g->pad_l;
    const int32_t row16 = (g->k_w * g->in_c + 15) / 16 * 16; /* a kernel row as the filter pads it */
    const int32_t k = g->k_h * row16;
    int32_t o;
    for (o = 0; o < n_out; o++) {
        int32_t acc = 0;
        int32_t ky;
        for (ky = 0; ky < g->k_h; ky++) {
            const int32_t iy = base_y + ky * g->dil_h;
            int32_t i = ky * row16;
            int32_t kx;
            for (kx = 0; kx < g->k_w; kx++) {
                const int32_t ix = base_x + kx * g->dil_w;
                const int inside = iy >= 0 && iy < g->in_h && ix >= 0 && ix < g->in_w;
                int32_t c;
                for (c = 0; c < g->in_c; c++, i++) {
                    const int32_t x = inside ? in_b[(iy * g->in_w + ix) * g->in_c + c] : g->zp;
                    acc += x * tinyaot_mve_filter_at(filter, k, o, i);
                }
            }
        }
        acc += rq->bias ? rq->bias[o] : 0;
        out[o] = tinyaot_requantize_s8(acc, rq->mult[o], rq->shift[o], rq->out_off, rq->act_min, rq->act_max);
    }
}

static void direct_pairs(const int8_t *w0, int32_t n_pairs, int32_t pix_step, const conv_geom *g,
                         const int8_t *filter, int32_t n_out, const tinyaot_mve_requant *q, int8_t *out)
{
    /* not reached in the portable build: every pixel goes through direct_one */
    (void)w0, (void)n_pairs, (void)pix_step, (void)g, (void)filter, (void)n_out, (void)q, (void)out;
}

#define direct_pairs_tail direct_pairs
#define direct_one_rows direct_one
#endif

/* The direct path applies: no scratch needed. */
static int direct_ok(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims, const tinyaot_conv_params *cp)
{
    return input_dims->c >= 8 && filter_dims->w * input_dims->c >= 16 && cp->dilation.w == 1;
}

/* Every pixel of the direct path, row by row in raster order: the output columns whose windows lie horizontally
   inside the input, [x_lo, x_hi), in pairs (rows whose windows are vertically inside too), every other pixel
   alone. `whole` (a constant where this is inlined): in_c is a multiple of 16, every chunk within one tap. */
static TINYAOT_ALWAYS_INLINE void direct_all(const conv_geom *g, const int8_t *input,
                                                             const int8_t *filter, const tinyaot_mve_requant *q,
                                                             int8_t *output, int32_t batches, int32_t out_c,
                                                             const int whole)
{
    const int32_t img = g->in_h * g->in_w * g->in_c;
    const int rows_whole = whole || g->k_w * g->in_c % 16 == 0;
    const int32_t right = g->in_w - g->k_w + g->pad_l;
    int32_t x_lo = (g->pad_l + g->stride_w - 1) / g->stride_w;
    int32_t x_hi = right >= 0 ? right / g->stride_w + 1 : 0;
    int32_t b;
    pixel_pos pos;
    if (x_hi > g->out_w) {
        x_hi = g->out_w;
    }
    if (x_lo > x_hi) {
        x_lo = x_hi;
    }
    for (b = 0; b < batches; b++) {
        for (pos.oy = 0; pos.oy < g->out_h; pos.oy++) {
            const int32_t y0 = pos.oy * g->stride_h - g->pad_t;
            const int rows_in = y0 >= 0 && y0 + (g->k_h - 1) * g->dil_h < g->in_h;
            const int32_t n_pairs = TINYAOT_USE_MVE && rows_in ? (x_hi - x_lo) / 2 : 0;
            const int32_t pair_lo = n_pairs > 0 ? x_lo : g->out_w;
            int8_t *orow = output + ((b * g->out_h + pos.oy) * g->out_w) * out_c;
            pos.b = b;
            for (pos.ox = 0; pos.ox < g->out_w; pos.ox++) {
                if (pos.ox == pair_lo) {
                    const int8_t *w0 = input + b * img + (y0 * g->in_w + pos.ox * g->stride_w - g->pad_l) * g->in_c;
                    if (rows_whole) {
                        direct_pairs(w0, n_pairs, g->stride_w * g->in_c, g, filter, out_c, q, orow + pos.ox * out_c);
                    } else {
                        direct_pairs_tail(w0, n_pairs, g->stride_w * g->in_c, g, filter, out_c, q,
                                          orow + pos.ox * out_c);
                    }
                    pos.ox += 2 * n_pairs - 1;
                    continue;
                }
                if (whole) {
                    direct_one(input, g, &pos, filter, out_c, q, orow + pos.ox * out_c);
                } else {
                    direct_one_rows(input, g, &pos, filter, out_c, q, orow + pos.ox * out_c);
                }
            }
        }
    }
}

tinyaot_status tinyaot_convolve_s8_mve(TINYAOT_CONV_ARGS(int8_t))
{
    const int32_t out_c = output_dims->c;
    const int32_t k = filter_dims->h * filter_dims->w * filter_dims->c;
    const int32_t pixels = output_dims->n * output_dims->h * output_dims->w;
    const int32_t in_off = conv_params->input_offset;
    conv_geom g;
    tinyaot_mve_requant q;
    int8_t *col;
    pixel_pos pos;
    int32_t p;
    (void)bias_dims;
    if (filter_dims->c != input_dims->c || filter_dims->n != out_c || output_dims->n != input_dims->n ||
        in_off < -127 || in_off > 128 || k < 1 || bias == NULL) {
        return TINYAOT_ARG_ERROR;
    }
    TINYAOT_CONV_WINDOW_FIELDS(g, conv_params, input_dims, filter_dims);
    g.out_h = output_dims->h;
    g.out_w = output_dims->w;
    g.zp = (int8_t)(-in_off);
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, conv_params);
    pos.b = 0;
    pos.oy = 0;
    pos.ox = 0;
    p = 0;
    if (direct_ok(input_dims, filter_dims, conv_params)) {
        /* the loop instantiated for each kind of window chunking, so that no layer pays a branch per pixel */
        if (g.in_c % 16 == 0) {
            direct_all(&g, input, filter, &q, output, output_dims->n, out_c, 1);
        } else {
            direct_all(&g, input, filter, &q, output, output_dims->n, out_c, 0);
        }
        (void)p;
        return TINYAOT_OK;
    }
    if (ctx == NULL || ctx->buf == NULL || ctx->size < k) {
        return TINYAOT_ARG_ERROR;
    }
    col = (int8_t *)ctx->buf;
    {
#if TINYAOT_USE_MVE
        const int thin = g.dil_w == 1 && g.k_w * g.in_c <= 16;
        const mve_pred16_t prow = vctp8q((uint32_t)(g.k_w * g.in_c));
#define COL_FILL(dst)                                                                                             \
    do {                                                                                                          \
        if (!thin || !col_fill_thin((dst), &g, input, &pos, prow)) {                                              \
            col_fill((dst), &g, input, &pos);                                                                     \
        }                                                                                                         \
    } while (0)
#else
#define COL_FILL(dst) col_fill((dst), &g, input, &pos)
#endif
        if (ctx->size >= 2 * k) {
            for (; p + 1 < pixels; p += 2) {
                COL_FILL(col);
                next_pixel(&pos, &g);
                COL_FILL(col + k);
                next_pixel(&pos, &g);
                tinyaot_mve_gemm2_s8(col, k, 1, k, filter, out_c, &q, output + p * out_c);
            }
        }
        for (; p < pixels; p++) {
            COL_FILL(col);
            next_pixel(&pos, &g);
            tinyaot_mve_gemm1_s8(col, k, filter, out_c, &q, output + p * out_c);
        }
#undef COL_FILL
    }
    return TINYAOT_OK;
}
