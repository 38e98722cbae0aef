/*
 * tinyaot int8 kernels: the Helium (MVE) matrix cores shared by tinyaot_convolve_s8_mve.c,
 * tinyaot_convolve_1x1_s8_mve.c and tinyaot_fully_connected_s8_mve.c (see tinyaot_mve_gemm.h for the filter layout,
 * the blocking, the requantization and the overflow bound). Portable C computing the same integers on cores
 * without MVE and on the host.
 */
#include "tinyaot_mve_gemm.h"

#if TINYAOT_USE_MVE

/* One column against all n_out filter rows. */
void tinyaot_mve_gemm1_s8(const int8_t *col, int32_t k, const int8_t *filter, int32_t n_out,
                          const tinyaot_mve_requant *q, int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int32_t k16 = (k + 15) & ~15;
    /* the column's last partial chunk, loaded once for every block */
    const int8x16_t x_tail = vldrbq_z_s8(col + (k & ~15), vctp8q((uint32_t)t));
    int32_t o;
    for (o = 0; o < n_out; o += 4) {
        const int8_t *w = filter + o * k16;
        const int8_t *x = col;
        int32_t a0 = 0;
        int32_t a1 = 0;
        int32_t a2 = 0;
        int32_t a3 = 0;
        int32_t n;
        for (n = k >> 4; n > 0; n--) {
            const int8x16_t xv = vldrbq_s8(x);
            x += 16;
            a0 = vmladavaq_s8(a0, xv, vldrbq_s8(w));
            a1 = vmladavaq_s8(a1, xv, vldrbq_s8(w + 16));
            a2 = vmladavaq_s8(a2, xv, vldrbq_s8(w + 32));
            a3 = vmladavaq_s8(a3, xv, vldrbq_s8(w + 48));
            w += 64;
        }
        if (t > 0) {
            a0 = vmladavaq_s8(a0, x_tail, vldrbq_s8(w));
            a1 = vmladavaq_s8(a1, x_tail, vldrbq_s8(w + 16));
            a2 = vmladavaq_s8(a2, x_tail, vldrbq_s8(w + 32));
            a3 = vmladavaq_s8(a3, x_tail, vldrbq_s8(w + 48));
        }
        {
            const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
            const tinyaot_mve_block b = tinyaot_mve_block_of(&e, o, p4);
            tinyaot_mve_store4(tinyaot_mve_lanes(a0, a1, a2, a3), &e, &b, p4, out + o);
        }
    }
}

/* n_pairs pairs of columns against all n_out filter rows, two columns (two output pixels) per pass so that each
   weight load serves both: column i at col0 + i * col_step, its outputs at out0 + i * out_step. TINYAOT_TIGHT_ASM:
   TINYAOT_MVE_MAC4X2's assembly takes twelve registers, all there are in a debug build keeping r7 as the frame
   pointer. */
TINYAOT_TIGHT_ASM void tinyaot_mve_gemm2_strided_s8(const int8_t *col0, int32_t col_step, int32_t n_pairs, int32_t k,
                                                    const int8_t *filter, int32_t n_out, int32_t out_step,
                                                    const tinyaot_mve_requant *q, int8_t *out0)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int32_t k16 = (k + 15) & ~15;
    for (; n_pairs > 0; n_pairs--, col0 += 2 * col_step, out0 += 2 * out_step) {
        const int8_t *col_a = col0;
        const int8_t *col_b = col0 + col_step;
        int8_t *out_a = out0;
        int8_t *out_b = out0 + out_step;
        int32_t o;
        for (o = 0; o < n_out; o += 4) {
            const int8_t *w = filter + o * k16;
            const int8_t *xa = col_a;
            const int8_t *xb = col_b;
            int32x4_t va, vb;
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            int32_t b0 = 0, b1 = 0, b2 = 0, b3 = 0;
            int32_t n = k >> 4;
            if (n > 0) {
                TINYAOT_MVE_MAC4X2(xa, xb, w, n, a0, a1, a2, a3, b0, b1, b2, b3);
            }
            if (t > 0) {
                /* the last partial chunk: activations past k load as zero (the weights there are zero too) */
                const mve_pred16_t pt = vctp8q((uint32_t)t);
                const int8x16_t ta = vldrbq_z_s8(xa, pt);
                const int8x16_t tb = vldrbq_z_s8(xb, pt);
                int8x16_t wv = vldrbq_s8(w);
                a0 = vmladavaq_s8(a0, ta, wv);
                b0 = vmladavaq_s8(b0, tb, wv);
                wv = vldrbq_s8(w + 16);
                a1 = vmladavaq_s8(a1, ta, wv);
                b1 = vmladavaq_s8(b1, tb, wv);
                wv = vldrbq_s8(w + 32);
                a2 = vmladavaq_s8(a2, ta, wv);
                b2 = vmladavaq_s8(b2, tb, wv);
                wv = vldrbq_s8(w + 48);
                a3 = vmladavaq_s8(a3, ta, wv);
                b3 = vmladavaq_s8(b3, tb, wv);
            }
            va = tinyaot_mve_lanes(a0, a1, a2, a3);
            vb = tinyaot_mve_lanes(b0, b1, b2, b3);
            tinyaot_mve_requant2(&va, &vb, &e, o);
            {
                const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
                vstrbq_p_s32(out_a + o, va, p4);
                vstrbq_p_s32(out_b + o, vb, p4);
            }
        }
    }
}

/* n_pairs pairs of columns against all n_out filter rows, each pixel's outputs after the previous one's. */
#else /* portable C */

void tinyaot_mve_gemm1_s8(const int8_t *col, int32_t k, const int8_t *filter, int32_t n_out,
                          const tinyaot_mve_requant *q, int8_t *out)
{
    int32_t o;
    for (o = 0; o < n_out; o++) {
        int32_t acc = 0;
        int32_t i;
        for (i = 0; i < k; i++) {
            acc += (int32_t)col[i] * tinyaot_mve_filter_at(filter, k, o, i);
        }
        acc += q->bias ? q->bias[o] : 0;
        out[o] = tinyaot_requantize_s8(acc, q->mult[o], q->shift[o], q->out_off, q->act_min, q->act_max);
    }
}

void tinyaot_mve_gemm2_strided_s8(const int8_t *col0, int32_t col_step, int32_t n_pairs, int32_t k,
                                  const int8_t *filter, int32_t n_out, int32_t out_step, const tinyaot_mve_requant *q,
                                  int8_t *out0)
{
    int32_t i;
    for (i = 0; i < 2 * n_pairs; i++) {
        tinyaot_mve_gemm1_s8(col0 + i * col_step, k, filter, n_out, q, out0 + i * out_step);
    }
}

#endif
