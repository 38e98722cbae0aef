/*
 * tinyaot_batch_matmul_s8: out[b0, b1, m, n] = requant(sum_k (lhs(m, k) + lhs_offset) * (rhs(k, n) + rhs_offset)),
 * the matrix product of two int8 activations (CMSIS-NN batch_matmul semantics, per-tensor requantization).
 *
 * Operands are addressed by strides only: lhs(m, k) = lhs[b0 * l_b0 + b1 * l_b1 + m * l_m + k * l_k], likewise rhs,
 * so broadcast batch dimensions (stride 0) and transposed operands (adj_x / adj_y) need no copy. Each product of two
 * offset int8 values is at most 255 * 255 in magnitude; the compiler refuses K > 33025, so the int32 sum cannot
 * overflow. The output is written densely [d0, d1, M, N] and must not overlap either operand.
 */
#include "tinyaot_nn.h"

tinyaot_status tinyaot_batch_matmul_s8(const int8_t *lhs, const int8_t *rhs, int8_t *out, int32_t d0, int32_t d1, int32_t m_size,
                                       int32_t n_size, int32_t k_size, int32_t l_b0, int32_t l_b1, int32_t l_m, int32_t l_k,
                                       int32_t r_b0, int32_t r_b1, int32_t r_k, int32_t r_n, int32_t lhs_offset,
                                       int32_t rhs_offset, int32_t out_offset, int32_t mult, int32_t shift, int32_t act_min,
                                       int32_t act_max)
{
    int32_t b0, b1, m, n, k;
    for (b0 = 0; b0 < d0; b0++) {
        for (b1 = 0; b1 < d1; b1++) {
            const int8_t *l_mat = lhs + b0 * l_b0 + b1 * l_b1;
            const int8_t *r_mat = rhs + b0 * r_b0 + b1 * r_b1;
            for (m = 0; m < m_size; m++) {
                const int8_t *l_row = l_mat + m * l_m;
                for (n = 0; n < n_size; n++) {
                    const int8_t *r_col = r_mat + n * r_n;
                    int32_t acc = 0;
                    for (k = 0; k < k_size; k++) {
                        acc += ((int32_t)l_row[k * l_k] + lhs_offset) * ((int32_t)r_col[k * r_k] + rhs_offset);
                    }
                    *out++ = tinyaot_requantize_s8(acc, mult, shift, out_offset, act_min, act_max);
                }
            }
        }
    }
    return TINYAOT_OK;
}
