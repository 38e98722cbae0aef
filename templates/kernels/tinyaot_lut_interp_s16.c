/*
 * tinyaot_lut_interp_s16: Sigmoid and Tanh on int16 (output scale 1/32768, zero point 0) by a 513-entry table over
 * |x| in [0, L] with linear interpolation; numpy twin lut_interp_s16 in tinyaot/ops/s16_lut.py (which explains the
 * table and the error bound).
 *
 * table: T[k] = f(k L / 512) in Q15 output LSBs (0 <= T[k] <= 2^30). p = {K, odd}: K is one input LSB in Q32 table
 * segments (0 <= K <= 2^41, so the position |q| * K <= 2^56), odd is 1 for tanh (negate for q < 0) and 0 for
 * sigmoid (32768 - magnitude for q < 0). The interpolated value T[i] * 2^16 + (T[i+1] - T[i]) * frac, with frac < 2^16
 * (2^16 past the table), is at most 2^46. output may be input (element i is read first).
 */
#include "tinyaot_s16_support.h"

tinyaot_status tinyaot_lut_interp_s16(const int16_t *input, int32_t size, const int32_t *table, const int64_t *p,
                                      int16_t *output)
{
    const int64_t k = p[0];
    const int32_t odd = (int32_t)p[1];
    int32_t i;
    if (k < 0 || k > ((int64_t)512 << 32)) {
        return TINYAOT_ARG_ERROR;
    }
    for (i = 0; i < size; i++) {
        const int32_t q = input[i];
        const int64_t pos = (int64_t)(q < 0 ? -q : q) * k;
        int64_t seg = pos >> 32, frac = (pos >> 16) & 0xFFFF, v, mag, out;
        if (seg >= 512) {
            seg = 511;
            frac = (int64_t)1 << 16;
        }
        v = ((int64_t)table[seg] << 16) + ((int64_t)table[seg + 1] - table[seg]) * frac;
        mag = (v + ((int64_t)1 << 30)) >> 31; /* v >= 0: the table is non-negative on [0, L] */
        out = q >= 0 ? mag : (odd ? -mag : 32768 - mag);
        output[i] = tinyaot_clamp64_s16(out, -32768, 32767);
    }
    return TINYAOT_OK;
}
