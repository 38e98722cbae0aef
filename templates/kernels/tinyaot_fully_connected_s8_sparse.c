/*
 * tinyaot_fully_connected_s8_sparse: tinyaot_fully_connected_s8 with bitmap-sparse weights
 * (tinyaot_sparse_weights): per output channel a bitmap of its nonzero positions and only the nonzero values.
 *
 * On DSP cores (Armv7E-M and up, which have CLZ and RBIT) the bitmap is read 32 positions at a time and each set
 * bit found directly; elsewhere a byte (eight inputs) at a time, an all-zero byte costing a test and a branch and
 * any other two jumps through a 16-way switch that runs one multiply-accumulate per set bit. Either way the work
 * is per stored value: executed instructions fall with sparsity. Results equal tinyaot_fully_connected_s8 bit for bit.
 */
#include "tinyaot_nn_compressed.h"

#define SP_STEP(k)                                                                                                    \
    do {                                                                                                              \
        acc += ((int32_t)x4[k] + x_off) * *v++;                                                                       \
    } while (0)

/* out of line on every core: inlined into the requantization loop its bit-scan loop spilled on the M4 (9 -> 13
   instructions per stored value) and its switches on the M0 */
static TINYAOT_NOINLINE int32_t sp_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                       int32_t x_off)
{
    const tinyaot_sparse_weights *w = (const tinyaot_sparse_weights *)weights;
    const uint8_t *bm = w->bitmap + row * ((depth + 7) >> 3);
    const int8_t *v = w->values + w->row_offsets[row];
    int32_t acc = 0;
    int32_t j = 0;
#if TINYAOT_USE_DSP && TINYAOT_GNU
    /* 32 positions per bitmap word; each set bit found with RBIT + CLZ and cleared, so the cost is a few
       instructions per nonzero and nothing per zero (a jump table per nibble costs more per position than the
       single product each position here feeds) */
    for (; j + 32 <= depth; j += 32, bm += 4) {
        uint32_t m;
        __builtin_memcpy(&m, bm, 4); /* one (unaligned) LDR */
        while (m != 0) {
            const int32_t t = (int32_t)__builtin_ctz(m);
            m &= m - 1u;
            acc += ((int32_t)x[j + t] + x_off) * *v++;
        }
    }
#endif
    for (; j < depth; j += 8, bm++) {
        uint32_t m = *bm;
        if (depth - j < 8) {
            m &= (1u << (depth - j)) - 1u; /* the row's last byte: padding bits are not inputs */
        }
        if (m == 0) {
            continue;
        }
        const int8_t *x4 = x + j;
        TINYAOT_FOR_BITS4(m & 15u, SP_STEP)
        x4 += 4;
        TINYAOT_FOR_BITS4(m >> 4, SP_STEP)
    }
    return acc;
}

TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s8_sparse, tinyaot_sparse_weights, 1, sp_dot, NULL, 0)
