/*
 * tinyaot_convolve_s8_sparse: tinyaot_convolve_s8 with bitmap-sparse weights (tinyaot_sparse_weights): per output
 * channel a bitmap of its nonzero positions and only the nonzero values.
 *
 * Four-pixel im2col columns by position (tinyaot_nn_compressed.h). The bitmap is read a byte (eight positions) at a
 * time; an all-zero byte costs a test and a branch, any other byte two jumps through a 16-way switch that runs
 * exactly one stored value times four column lanes per set bit. So the work is a few instructions per eight
 * positions plus one load and four multiply-accumulates per nonzero: executed instructions fall with sparsity, where
 * the dense kernel's do not.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void sp_begin(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur)
{
    const tinyaot_sparse_weights *w = (const tinyaot_sparse_weights *)weights;
    cur->bytes = w->bitmap + row * ((row_len + 7) >> 3);
    cur->values = w->values + w->row_offsets[row];
}

/* one stored value against the four lanes of position k of the current nibble (c4: its first position) */
#define SP_STEP(k)                                                                                                    \
    do {                                                                                                              \
        const int32_t v_ = *v++;                                                                                      \
        TINYAOT_MAC4(c4 + 4 * (k), v_);                                                                               \
    } while (0)

/* the eight positions of bitmap byte m, starting at column c8 */
#define SP_BYTE(m, c8)                                                                                                \
    do {                                                                                                              \
        const int16_t *c4 = (c8);                                                                                     \
        TINYAOT_FOR_BITS4((m) & 15u, SP_STEP)                                                                         \
        c4 += 16;                                                                                                     \
        TINYAOT_FOR_BITS4((m) >> 4, SP_STEP)                                                                          \
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
    for (; bm < bm_full; col += 32) {
        const uint32_t m = *bm++;
        if (m != 0) { /* eight zeros cost this test */
            SP_BYTE(m, col);
        }
    }
    if (n & 7) {
        const uint32_t m = *bm++ & ((1u << (n & 7)) - 1u); /* padding bits are not positions */
        SP_BYTE(m, col);
    }
    cur->bytes = bm;
    cur->values = v;
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

int32_t tinyaot_convolve_s8_sparse_get_buffer_size(const tinyaot_dims *input_dims, const tinyaot_dims *filter_dims)
{
    (void)input_dims;
    return tinyaot_cw_buffer_size(filter_dims);
}

int tinyaot_convolve_s8_sparse(const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,
                               const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                               const int8_t *input, const tinyaot_dims *filter_dims,
                               const tinyaot_sparse_weights *filter, const tinyaot_dims *bias_dims,
                               const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output)
{
    (void)bias_dims;
    return tinyaot_cw_conv(ctx, conv_params, quant_params, input_dims, input, filter_dims, filter, bias, output_dims,
                           output, TINYAOT_CW_BY_POSITION, sp_begin, sp_dot4);
}
