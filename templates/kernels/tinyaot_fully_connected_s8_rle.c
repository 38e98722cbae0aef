/*
 * tinyaot_fully_connected_s8_rle: tinyaot_fully_connected_s8 with run-length-sparse weights (tinyaot_rle_weights):
 * per output channel entries (run, value), run zeros then the value.
 *
 * Each entry advances the input pointer over its run and multiplies its value in: two byte loads, an add, an input
 * load and a multiply-accumulate per stored value, nothing per zero. Results equal tinyaot_fully_connected_s8.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_FC_DECODER int32_t rle_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                          int32_t x_off)
{
    const tinyaot_rle_weights *w = (const tinyaot_rle_weights *)weights;
    const uint8_t *r = w->runs + w->row_offsets[row];
    const int8_t *v = w->values + w->row_offsets[row];
    const int8_t *const v_end = w->values + w->row_offsets[row + 1];
    int32_t acc = 0;
    (void)depth;
    while (v < v_end) {
        x += *r++;
        acc += ((int32_t)*x++ + x_off) * *v++;
    }
    return acc;
}

TINYAOT_FC_COMPRESSED_KERNEL(tinyaot_fully_connected_s8_rle, tinyaot_rle_weights, 1, rle_dot, NULL, 0)
