/*
 * tinyaot_fully_connected_s4: tinyaot_fully_connected_s8 with 4-bit weights: two's-complement nibbles in
 * [-7, 7], two per byte, low nibble first, row-major over the whole [out_ch][depth] filter (row o starts at nibble
 * o * depth, in the middle of a byte when depth is odd and o too).
 *
 * One sequential pass per output channel: each byte gives two weights by sign-extending its nibbles (SBFX); on DSP
 * cores eight weights per word are paired for SMLAD against SXTAB16-unpacked inputs.
 * Results equal tinyaot_fully_connected_s8 on the unpacked weights, bit for bit (filter offset included).
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE int32_t s4_dot(const void *weights, int32_t row, int32_t depth, const int8_t *x,
                                            int32_t x_off)
{
    const int32_t nib = row * depth;
    const uint8_t *p = (const uint8_t *)weights + (nib >> 1);
    int32_t acc = 0;
    int32_t j = 0;
    if (depth > 0 && (nib & 1)) { /* the row starts on a high nibble: one weight, then whole bytes */
        acc += ((int32_t)x[0] + x_off) * tinyaot_s4_hi(*p++);
        j = 1;
    }
#if TINYAOT_USE_DSP
    /* eight weights per word: SBFX pairs them as (w0, w2), (w1, w3), ... to match the input lanes SXTAB16 gives
       (x0, x2), (x1, x3) with the offset added, and SMLAD takes two products per instruction */
    const int32_t off2 = tinyaot_dup16(x_off);
    for (; j + 8 <= depth; j += 8) {
        int32_t wv;
        __builtin_memcpy(&wv, p, 4); /* one (unaligned) LDR */
        p += 4;
        const int32_t xa = tinyaot_read_s8x4(x + j);
        const int32_t xb = tinyaot_read_s8x4(x + j + 4);
        const uint32_t u = (uint32_t)wv;
        acc = __smlad(__sxtab16(off2, xa), tinyaot_pack16x2((int32_t)(u << 28) >> 28, (int32_t)(u << 20) >> 28), acc);
        acc = __smlad(tinyaot_sxtab16_ror8(off2, xa),
                      tinyaot_pack16x2((int32_t)(u << 24) >> 28, (int32_t)(u << 16) >> 28), acc);
        acc = __smlad(__sxtab16(off2, xb), tinyaot_pack16x2((int32_t)(u << 12) >> 28, (int32_t)(u << 4) >> 28), acc);
        acc = __smlad(tinyaot_sxtab16_ror8(off2, xb), tinyaot_pack16x2((int32_t)(u << 8) >> 28, (int32_t)u >> 28),
                      acc);
    }
#endif
    for (; j + 2 <= depth; j += 2) {
        const uint32_t byte = *p++;
        acc += ((int32_t)x[j] + x_off) * tinyaot_s4_lo(byte);
        acc += ((int32_t)x[j + 1] + x_off) * tinyaot_s4_hi(byte);
    }
    if (j < depth) {
        acc += ((int32_t)x[j] + x_off) * tinyaot_s4_lo(*p);
    }
    return acc;
}

int tinyaot_fully_connected_s4(const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,
                               const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,
                               const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                               const uint8_t *filter, const tinyaot_dims *bias_dims, const int32_t *bias,
                               const tinyaot_dims *output_dims, int8_t *output)
{
    (void)ctx;
    (void)bias_dims;
    return tinyaot_fc_run(fc_params, quant_params, per_channel, input_dims, input, filter_dims, filter, bias,
                          output_dims, output, s4_dot);
}
