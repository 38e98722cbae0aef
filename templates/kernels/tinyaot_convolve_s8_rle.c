/*
 * tinyaot_convolve_s8_rle: tinyaot_convolve_s8 with run-length-sparse weights (tinyaot_rle_weights): per output
 * channel entries (run, value), run zeros then the value.
 *
 * Four-pixel im2col columns by position (tinyaot_nn_compressed.h). Each entry moves the column pointer over its run and
 * multiplies its value into the four lanes there: a byte load, an add, a value load, a doubleword load and four
 * multiply-accumulates per stored value, nothing per zero. With the whole column in scratch the row's entries all
 * fall inside it and the loop has no bounds test; chunked (no scratch) an entry past the chunk waits for the next.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void rle_begin(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur)
{
    const tinyaot_rle_weights *w = (const tinyaot_rle_weights *)weights;
    cur->bytes = w->runs + w->row_offsets[row];
    cur->values = w->values + w->row_offsets[row];
    cur->values_end = w->values + w->row_offsets[row + 1];
    cur->pos = 0;  /* row position just after the last value used */
    cur->base = 0; /* row position of the column's first position */
    cur->t = row_len;
}

static TINYAOT_ALWAYS_INLINE void rle_dot4(const void *weights, tinyaot_cursor *cur, const int16_t *col, int32_t n,
                                           int32_t acc[4])
{
    const uint8_t *r = cur->bytes;
    const int8_t *v = cur->values;
    const int8_t *const v_end = cur->values_end;
    int32_t a0 = acc[0];
    int32_t a1 = acc[1];
    int32_t a2 = acc[2];
    int32_t a3 = acc[3];
    (void)weights;
    if (cur->base + n >= cur->t) {
        /* the rest of the row: every remaining entry lands in this column, no bounds test */
        const int16_t *c = col + 4 * (cur->pos - cur->base);
        while (v < v_end) {
            c += 4 * (int32_t)*r++;
            const int32_t w = *v++;
            TINYAOT_MAC4_INC(c, w);
        }
    } else {
        int32_t p = cur->pos - cur->base;
        while (v < v_end) {
            const int32_t q = p + (int32_t)*r;
            if (q >= n) {
                break; /* lands in a later chunk */
            }
            r++;
            const int32_t w = *v++;
            const int16_t *c = col + 4 * q;
            TINYAOT_MAC4_INC(c, w);
            p = q + 1;
        }
        cur->pos = cur->base + p;
    }
    cur->base += n;
    cur->bytes = r;
    cur->values = v;
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

TINYAOT_CW_CONV_KERNEL(tinyaot_convolve_s8_rle, tinyaot_rle_weights, 1, TINYAOT_CW_BY_POSITION, rle_begin, rle_dot4)
