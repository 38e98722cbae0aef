/*
 * tinyaot_convolve_s8_sparse: tinyaot_convolve_s8 with bitmap-sparse weights (tinyaot_sparse_weights): per output
 * channel a bitmap of its nonzero positions and only the nonzero values.
 *
 * Four-pixel im2col columns by position pair (tinyaot_nn_compressed.h): positions 2i, 2i+1 of a pixel in one word.
 * The bitmap is read a byte (eight positions, four pairs) at a time; an all-zero byte costs a test and a branch,
 * any other byte two jumps through a 16-way switch over its nibbles (two pairs each). A pair with both bits set
 * takes its two stored values as one int16 pair and one SMLAD per pixel (two multiply-accumulates per
 * instruction, as the dense kernel), a pair with one bit set one SMLABB / SMLATB per pixel on that lane, an empty
 * pair nothing. So the work falls with sparsity, and at low sparsity it stays close to the dense kernel's.
 * Accumulation order differs from the dense kernel's; the sums are exact integers that cannot wrap (each term
 * |(x + input_offset) * w| <= 255 * 128, see tinyaot_nn_support.h for the bound on K), so the result is identical.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void sp_begin(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur)
{
    const tinyaot_sparse_weights *w = (const tinyaot_sparse_weights *)weights;
    cur->bytes = w->bitmap + row * ((row_len + 7) >> 3);
    cur->values = w->values + w->row_offsets[row];
}

/* One pair of positions of the column at c (8 int16: pixel p's word at 2p), c then moves to the next pair.
   SP_PAIRb: b = the pair's two bitmap bits (bit 0: the even position, the low lane). The column is walked with
   post-incremented LDRDs (TINYAOT_LOAD2_INC) so that one pointer register serves every case. */
#define SP_PAIR0()                                                                                                    \
    do {                                                                                                              \
        c += 8;                                                                                                       \
    } while (0)
#if TINYAOT_USE_DSP
#define SP_LANES(OP, w)                                                                                               \
    do {                                                                                                              \
        int32_t x0_, x1_, x2_, x3_;                                                                                   \
        TINYAOT_LOAD2_INC(c, x0_, x1_);                                                                               \
        TINYAOT_LOAD2_INC(c, x2_, x3_);                                                                               \
        a0 = OP(x0_, (w), a0);                                                                                        \
        a1 = OP(x1_, (w), a1);                                                                                        \
        a2 = OP(x2_, (w), a2);                                                                                        \
        a3 = OP(x3_, (w), a3);                                                                                        \
    } while (0)
#define SP_PAIR1()                                                                                                    \
    do {                                                                                                              \
        const int32_t v_ = *v++;                                                                                      \
        SP_LANES(__smlabb, v_);                                                                                       \
    } while (0)
#define SP_PAIR2()                                                                                                    \
    do {                                                                                                              \
        const int32_t v_ = *v++;                                                                                      \
        SP_LANES(__smlatb, v_);                                                                                       \
    } while (0)
#define SP_PAIR3()                                                                                                    \
    do {                                                                                                              \
        const int32_t v0_ = v[0];                                                                                     \
        const int32_t v1_ = v[1];                                                                                     \
        const int32_t wp_ = tinyaot_pack16x2(v0_, v1_);                                                               \
        v += 2;                                                                                                       \
        SP_LANES(__smlad, wp_);                                                                                       \
    } while (0)
#else
#define SP_LANE1(h, w)                                                                                                \
    do {                                                                                                              \
        a0 += c[(h)] * (w);                                                                                           \
        a1 += c[2 + (h)] * (w);                                                                                       \
        a2 += c[4 + (h)] * (w);                                                                                       \
        a3 += c[6 + (h)] * (w);                                                                                       \
    } while (0)
#define SP_PAIR1()                                                                                                    \
    do {                                                                                                              \
        const int32_t v_ = *v++;                                                                                      \
        SP_LANE1(0, v_);                                                                                              \
        c += 8;                                                                                                       \
    } while (0)
#define SP_PAIR2()                                                                                                    \
    do {                                                                                                              \
        const int32_t v_ = *v++;                                                                                      \
        SP_LANE1(1, v_);                                                                                              \
        c += 8;                                                                                                       \
    } while (0)
#define SP_PAIR3()                                                                                                    \
    do {                                                                                                              \
        const int32_t v0_ = v[0];                                                                                     \
        const int32_t v1_ = v[1];                                                                                     \
        v += 2;                                                                                                       \
        SP_LANE1(0, v0_);                                                                                             \
        SP_LANE1(1, v1_);                                                                                             \
        c += 8;                                                                                                       \
    } while (0)
#endif

/* The four positions of nibble m (0..15): a jump table over the 16 cases (TBB on Armv7-M), each case the two
   pairs' fixed work, values taken in increasing position. */
#define SP_NIBBLE(m)                                                                                                  \
    switch (m) {                                                                                                      \
    case 0: SP_PAIR0(); SP_PAIR0(); break;                                                                            \
    case 1: SP_PAIR1(); SP_PAIR0(); break;                                                                            \
    case 2: SP_PAIR2(); SP_PAIR0(); break;                                                                            \
    case 3: SP_PAIR3(); SP_PAIR0(); break;                                                                            \
    case 4: SP_PAIR0(); SP_PAIR1(); break;                                                                            \
    case 5: SP_PAIR1(); SP_PAIR1(); break;                                                                            \
    case 6: SP_PAIR2(); SP_PAIR1(); break;                                                                            \
    case 7: SP_PAIR3(); SP_PAIR1(); break;                                                                            \
    case 8: SP_PAIR0(); SP_PAIR2(); break;                                                                            \
    case 9: SP_PAIR1(); SP_PAIR2(); break;                                                                            \
    case 10: SP_PAIR2(); SP_PAIR2(); break;                                                                           \
    case 11: SP_PAIR3(); SP_PAIR2(); break;                                                                           \
    case 12: SP_PAIR0(); SP_PAIR3(); break;                                                                           \
    case 13: SP_PAIR1(); SP_PAIR3(); break;                                                                           \
    case 14: SP_PAIR2(); SP_PAIR3(); break;                                                                           \
    default: SP_PAIR3(); SP_PAIR3(); break;                                                                           \
    }

/* the eight positions of bitmap byte m at the column pointer c (32 int16: four pairs of four pixels) */
#define SP_BYTE(m)                                                                                                    \
    do {                                                                                                              \
        SP_NIBBLE((m) & 15u)                                                                                          \
        SP_NIBBLE((m) >> 4)                                                                                           \
    } while (0)

static TINYAOT_ALWAYS_INLINE void sp_dot4(const void *weights, tinyaot_cursor *cur, const int16_t *col, int32_t n,
                                          int32_t acc[4])
{
    const uint8_t *bm = cur->bytes;
    const uint8_t *const bm_full = bm + (n >> 3); /* whole bytes; a partial last byte follows */
    const int8_t *v = cur->values;
    int32_t a0 = acc[0];
    int32_t a1 = acc[1];
    int32_t a2 = acc[2];
    int32_t a3 = acc[3];
    (void)weights;
    const int16_t *c = col;
    while (bm < bm_full) {
        const uint32_t m = *bm++;
        if (m == 0) { /* eight zeros cost this test */
            c += 32;
            continue;
        }
        SP_BYTE(m);
    }
    if (n & 7) {
        /* padding bits are not positions; an odd n's last pair has a zero partner in the column */
        const uint32_t m = *bm++ & ((1u << (n & 7)) - 1u);
        SP_BYTE(m);
    }
    cur->bytes = bm;
    cur->values = v;
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

TINYAOT_CW_CONV_KERNEL(tinyaot_convolve_s8_sparse, tinyaot_sparse_weights, 1, TINYAOT_CW_BY_PAIR, sp_begin, sp_dot4)
