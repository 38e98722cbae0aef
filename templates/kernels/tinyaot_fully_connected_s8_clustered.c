/*
 * tinyaot_fully_connected_s8_clustered: tinyaot_fully_connected_s8 with clustered weights
 * (tinyaot_clustered_weights): row o's weights are codebooks[o / group_size][index], indices bits wide.
 *
 * One sequential pass per output channel. 8-, 4- and 2-bit indices are unpacked with constant shifts (on DSP cores
 * four at a time, their values paired for SMLAD); other widths through a bit buffer of fewer than 16 bits,
 * refilled a byte at a time.
 *
 * DSP cores, 4-bit indices: two rows per pass, each with its own codebook, share each input load and its SXTAB16
 * unpacking; per weight one bit-field extract, one LDRSB from the codebook (flash) and one SMLABB/SMLATB. A table
 * of weight pairs expanded from a codebook (256 x 4 bytes of stack) was measured and left out: it saved 2.6 % of
 * ad_fc_autoencoder's instructions with --clusters 16 (1.120 M -> 1.091 M on stm32) and raised the stack
 * high-water from 552 to 1,640 B, and most layers have a codebook per row, where it cannot pay for its build.
 * Results equal
 * tinyaot_fully_connected_s8 on the decoded weights, bit for bit (filter offset included).
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE int32_t cl_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                            int32_t x_off)
{
    const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;
    const uint8_t *p = w->packed + row * w->row_bytes;
    const int8_t *cb = w->codebooks + (row / w->group_size) * w->k;
    int32_t acc = 0;
    int32_t j = 0;
#if TINYAOT_USE_DSP
    /* four weights per step, looked up and paired as (w0, w2), (w1, w3) to match the input lanes SXTAB16 gives
       (x0, x2), (x1, x3) with the offset added: two SMLAD per four products */
    const int32_t off2 = tinyaot_dup16(x_off);
    if (w->bits == 8) {
        for (; j + 4 <= depth; j += 4, p += 4) {
            const int32_t xv = tinyaot_read_s8x4(x + j);
            acc = __smlad(__sxtab16(off2, xv), tinyaot_pack16x2(cb[p[0]], cb[p[2]]), acc);
            acc = __smlad(tinyaot_sxtab16_ror8(off2, xv), tinyaot_pack16x2(cb[p[1]], cb[p[3]]), acc);
        }
        p -= j; /* the scalar loop below indexes p[j] */
    } else if (w->bits == 4) {
        for (; j + 4 <= depth; j += 4, p += 2) {
            const uint32_t b0 = p[0];
            const uint32_t b1 = p[1];
            const int32_t xv = tinyaot_read_s8x4(x + j);
            acc = __smlad(__sxtab16(off2, xv), tinyaot_pack16x2(cb[b0 & 15u], cb[b1 & 15u]), acc);
            acc = __smlad(tinyaot_sxtab16_ror8(off2, xv), tinyaot_pack16x2(cb[b0 >> 4], cb[b1 >> 4]), acc);
        }
    } else if (w->bits == 2) {
        for (; j + 4 <= depth; j += 4) {
            const uint32_t byte = *p++;
            const int32_t xv = tinyaot_read_s8x4(x + j);
            acc = __smlad(__sxtab16(off2, xv), tinyaot_pack16x2(cb[byte & 3u], cb[(byte >> 4) & 3u]), acc);
            acc = __smlad(tinyaot_sxtab16_ror8(off2, xv), tinyaot_pack16x2(cb[(byte >> 2) & 3u], cb[byte >> 6]),
                          acc);
        }
    }
#endif
    if (w->bits == 8) {
        for (; j < depth; j++) {
            acc += ((int32_t)x[j] + x_off) * cb[p[j]];
        }
    } else if (w->bits == 4) {
        for (; j + 2 <= depth; j += 2) {
            const uint32_t byte = *p++;
            acc += ((int32_t)x[j] + x_off) * cb[byte & 15u];
            acc += ((int32_t)x[j + 1] + x_off) * cb[byte >> 4];
        }
        if (j < depth) {
            acc += ((int32_t)x[j] + x_off) * cb[*p & 15u];
        }
    } else if (w->bits == 2) {
        for (; j + 4 <= depth; j += 4) {
            const uint32_t byte = *p++;
            acc += ((int32_t)x[j] + x_off) * cb[byte & 3u];
            acc += ((int32_t)x[j + 1] + x_off) * cb[(byte >> 2) & 3u];
            acc += ((int32_t)x[j + 2] + x_off) * cb[(byte >> 4) & 3u];
            acc += ((int32_t)x[j + 3] + x_off) * cb[byte >> 6];
        }
        for (; j < depth; j++) {
            acc += ((int32_t)x[j] + x_off) * cb[(*p >> (2 * (j & 3))) & 3u];
        }
    } else {
        const int32_t bits = w->bits;
        const uint32_t mask = (1u << bits) - 1u;
        uint32_t buf = 0;
        int32_t have = 0;
        for (; j < depth; j++) {
            if (have < bits) {
                buf |= (uint32_t)*p++ << have;
                have += 8;
            }
            acc += ((int32_t)x[j] + x_off) * cb[buf & mask];
            buf >>= bits;
            have -= bits;
        }
    }
    return acc;
}

#if TINYAOT_USE_DSP
/* GCC's first scheduling pass hoists all sixteen codebook loads of a step and runs out of registers (measured: 5.2
   instead of ~3.3 instructions per weight); without it the loop keeps everything in registers. */
#define CL_NO_PRESCHED TINYAOT_NO_SCHEDULE
/* One row's eight positions: the word of eight 4-bit indices at p, each weight looked up in the row's codebook
   cb and multiplied with its input lane (x02, x13, x46, x57 hold positions 0/2, 1/3, 4/6, 5/7) into acc. */
#define CL_ROW8(acc, cb, p)                                                                                           \
    do {                                                                                                              \
        __builtin_memcpy(&u, p, 4);                                                                                   \
        acc = __smlabb(x02, cb[u & 15u], acc);                                                                        \
        acc = __smlabb(x13, cb[(u >> 4) & 15u], acc);                                                                 \
        acc = __smlatb(x02, cb[(u >> 8) & 15u], acc);                                                                 \
        acc = __smlatb(x13, cb[(u >> 12) & 15u], acc);                                                                \
        acc = __smlabb(x46, cb[(u >> 16) & 15u], acc);                                                                \
        acc = __smlabb(x57, cb[(u >> 20) & 15u], acc);                                                                \
        acc = __smlatb(x46, cb[(u >> 24) & 15u], acc);                                                                \
        acc = __smlatb(x57, cb[u >> 28], acc);                                                                        \
    } while (0)
/* Rows p0 and p1 with their own codebooks. Per eight positions and row: one LDR of eight indices, then per weight one bit-field extract, one LDRSB from the codebook
   and one SMLABB/SMLATB against the input lane SXTAB16 gave.
   |x + off| <= 255, |w| <= 128: each step adds at most 32640 per weight, exact in int32 for depth < 65 000. */
static TINYAOT_NOINLINE CL_NO_PRESCHED void cl_dot2_books(const int8_t *cb0, const int8_t *cb1, const uint8_t *p0,
                                                const uint8_t *p1, int32_t depth, const int8_t *x, int32_t x_off,
                                                int32_t *a0, int32_t *a1)
{
    const int32_t off2 = tinyaot_dup16(x_off);
    int32_t acc0 = *a0;
    int32_t acc1 = *a1;
    int32_t j = 0;
    for (; j + 8 <= depth; j += 8, p0 += 4, p1 += 4) {
        const int32_t xa = tinyaot_read_s8x4(x + j);
        const int32_t xb = tinyaot_read_s8x4(x + j + 4);
        const int32_t x02 = __sxtab16(off2, xa);
        const int32_t x13 = tinyaot_sxtab16_ror8(off2, xa);
        const int32_t x46 = __sxtab16(off2, xb);
        const int32_t x57 = tinyaot_sxtab16_ror8(off2, xb);
        uint32_t u;
        CL_ROW8(acc0, cb0, p0);
        CL_ROW8(acc1, cb1, p1);
    }
    for (; j < depth; j++) { /* position j: nibble j & 1 of byte j / 2 (p0, p1 at byte (j & ~7) / 2) */
        const int32_t sh = (int32_t)(4 * (j & 1));
        const int32_t xj = (int32_t)x[j] + x_off;
        acc0 += xj * cb0[(p0[(j & 7) >> 1] >> sh) & 15u];
        acc1 += xj * cb1[(p1[(j & 7) >> 1] >> sh) & 15u];
    }
    *a0 = acc0;
    *a1 = acc1;
}

/* CL_ROW8 for 5-bit indices: eight positions' indices in the five bytes at p (a word u and byte v; index 6
   straddles them). */
#define CL_ROW8_5(acc, cb, p)                                                                                         \
    do {                                                                                                              \
        __builtin_memcpy(&u, p, 4);                                                                                   \
        v = (p)[4];                                                                                                   \
        acc = __smlabb(x02, cb[u & 31u], acc);                                                                        \
        acc = __smlabb(x13, cb[(u >> 5) & 31u], acc);                                                                 \
        acc = __smlatb(x02, cb[(u >> 10) & 31u], acc);                                                                \
        acc = __smlatb(x13, cb[(u >> 15) & 31u], acc);                                                                \
        acc = __smlabb(x46, cb[(u >> 20) & 31u], acc);                                                                \
        acc = __smlabb(x57, cb[(u >> 25) & 31u], acc);                                                                \
        acc = __smlatb(x46, cb[(u >> 30) | ((v << 2) & 31u)], acc);                                                   \
        acc = __smlatb(x57, cb[v >> 3], acc);                                                                         \
    } while (0)
/* cl_dot2_books for 5-bit indices (clusters of up to 32 values): per eight positions and row a word and a byte of
   indices, then as above (one more shift and OR for the index across them). Same bound. */
static TINYAOT_NOINLINE CL_NO_PRESCHED void cl_dot2_books5(const int8_t *cb0, const int8_t *cb1, const uint8_t *p0,
                                                 const uint8_t *p1, int32_t depth, const int8_t *x, int32_t x_off,
                                                 int32_t *a0, int32_t *a1)
{
    const int32_t off2 = tinyaot_dup16(x_off);
    int32_t acc0 = *a0;
    int32_t acc1 = *a1;
    int32_t j = 0;
    for (; j + 8 <= depth; j += 8, p0 += 5, p1 += 5) {
        const int32_t xa = tinyaot_read_s8x4(x + j);
        const int32_t xb = tinyaot_read_s8x4(x + j + 4);
        const int32_t x02 = __sxtab16(off2, xa);
        const int32_t x13 = tinyaot_sxtab16_ror8(off2, xa);
        const int32_t x46 = __sxtab16(off2, xb);
        const int32_t x57 = tinyaot_sxtab16_ror8(off2, xb);
        uint32_t u, v;
        CL_ROW8_5(acc0, cb0, p0);
        CL_ROW8_5(acc1, cb1, p1);
    }
    for (; j < depth; j++) { /* position j: bits 5 * (j & 7) .. of the five bytes at p0 / p1 */
        const int32_t bit = 5 * (j & 7);
        const int32_t xj = (int32_t)x[j] + x_off;
        const uint32_t b0 = (uint32_t)p0[bit >> 3] | ((bit & 7) > 3 ? (uint32_t)p0[(bit >> 3) + 1] << 8 : 0u);
        const uint32_t b1 = (uint32_t)p1[bit >> 3] | ((bit & 7) > 3 ? (uint32_t)p1[(bit >> 3) + 1] << 8 : 0u);
        acc0 += xj * cb0[(b0 >> (bit & 7)) & 31u];
        acc1 += xj * cb1[(b1 >> (bit & 7)) & 31u];
    }
    *a0 = acc0;
    *a1 = acc1;
}

/* tinyaot_fc_dot2_fn `name`: rows `row`, `row + 1`, each with its group's codebook, through `dot2`. */
#define CL_ROWS2(name, dot2)                                                                                          \
    static void name(const void *weights, int32_t row, int32_t depth, const int8_t *x, int32_t x_off, int32_t *a0, \
                     int32_t *a1)                                                                                     \
    {                                                                                                                 \
        const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;                              \
        const uint8_t *p0 = w->packed + row * w->row_bytes;                                                           \
        dot2(w->codebooks + (row / w->group_size) * w->k, w->codebooks + ((row + 1) / w->group_size) * w->k, p0,      \
             p0 + w->row_bytes, depth, x, x_off, a0, a1);                                                             \
    }
CL_ROWS2(cl_rows2, cl_dot2_books)     /* 4-bit indices */
CL_ROWS2(cl_rows2_5, cl_dot2_books5)  /* 5-bit indices */
#endif

/* On DSP cores rows run in pairs for 4-bit indices (cl_dot2_books). */
TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s8_clustered, tinyaot_clustered_weights,
                             TINYAOT_CLUSTERED_OK(filter, filter_dims->n), cl_dot, TINYAOT_IF_DSP(cl_rows2, NULL),
                             TINYAOT_IF_DSP(filter->bits == 4 && filter_dims->n < 65000, 0))

/* tinyaot_fully_connected_s8_clustered for 5-bit indices (--clusters 32; an entry of its own, so that a model
   without such a layer links none of its code): on DSP cores rows in pairs (cl_dot2_books5). */
TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s8_clustered5, tinyaot_clustered_weights,
                             TINYAOT_CLUSTERED_OK(filter, filter_dims->n), cl_dot, TINYAOT_IF_DSP(cl_rows2_5, NULL),
                             TINYAOT_IF_DSP(filter->bits == 5 && filter_dims->n < 65000, 0))
