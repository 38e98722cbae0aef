/*
 * tinyaot_fully_connected_s8_clustered: tinyaot_fully_connected_s8 with clustered weights
 * (tinyaot_clustered_weights): row o's weights are codebooks[o / group_size][index], indices bits wide.
 *
 * One sequential pass per output channel. 8-, 4- and 2-bit indices are unpacked with constant shifts (on DSP cores
 * four at a time, their values paired for SMLAD); other widths through a bit buffer of fewer than 16 bits,
 * refilled a byte at a time. Results equal
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

int tinyaot_fully_connected_s8_clustered(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                                         const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                                         const tinyaot_dims *input_dims, const int8_t *input,
                                         const tinyaot_dims *filter_dims, const tinyaot_clustered_weights *filter,
                                         const tinyaot_dims *bias_dims, const int32_t *bias,
                                         const tinyaot_dims *output_dims, int8_t *output)
{
    (void)ctx;
    (void)bias_dims;
    if (filter->bits < 1 || filter->bits > 8 || filter->k < 1 || filter->k > (1 << filter->bits) ||
        filter->group_size < 1 || filter->row_bytes * 8 < filter_dims->n * filter->bits) {
        return -1;
    }
    return tinyaot_fc_run(fc_params, quant_params, per_channel, input_dims, input, filter_dims, filter, bias,
                          output_dims, output, cl_dot);
}
