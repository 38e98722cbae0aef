/*
 * tinyaot_fully_connected_s5: tinyaot_fully_connected_s8 with 5-bit weights (the 31-level grid --clusters 17..32 puts
 * a batch-1 fully connected layer on, tinyaot/compress/storage.py "int5"): each weight stored biased, u = w + 16 in
 * [1, 31], six per uint32 word, row-major over the whole [out_ch][depth] filter; value 6i + j in word i at bit
 * 5 * (j % 3) + 16 * (j // 3). The portable path (any core, the host): one sequential pass per output channel,
 * each weight decoded by a shift and a mask; the DSP kernel is tinyaot_fully_connected_s5_fold.c.
 *
 * Overflow: the partial sums are those of tinyaot_fully_connected_s8 on the decoded weights (|w| <= 15), bounded by
 * |bias| + sum|w| * (128 + |input_offset|) (compress/bounds.py); results equal it bit for bit.
 */
#include "tinyaot_nn_compressed.h"

static int32_t s5_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x, int32_t x_off)
{
    const int32_t first = row * depth; /* the row's first value in the tensor */
    const uint32_t *p = (const uint32_t *)weights + first / 6;
    int32_t field = first % 6;
    uint32_t word = *p++;
    int32_t acc = 0;
    int32_t j;
    for (j = 0; j < depth; j++) {
        /* fields 0..2 at bits 0, 5, 10; fields 3..5 at bits 16, 21, 26 */
        const int32_t u = (int32_t)((word >> (5 * (field % 3) + (field >= 3 ? 16 : 0))) & 31u);
        acc += ((int32_t)x[j] + x_off) * (u - 16);
        if (++field == 6 && j + 1 < depth) {
            field = 0;
            word = *p++;
        }
    }
    return acc;
}

TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s5, uint32_t, 1, s5_dot, NULL, 0)
