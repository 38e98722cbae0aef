/*
 * tinyaot_elementwise_add_s8_mve: int8 + int8 -> int8 over block_size elements (TFLite int8 ADD) for Helium (MVE)
 * cores, four elements per vector in int32 lanes; the same arguments and the same integers as
 * tinyaot_elementwise_add_s8 (tinyaot_elementwise_add_s8.c, whose comment gives the arithmetic).
 *
 * Per element: each input, offset and shifted left by left_shift, is one VMLAS,
 * (x + offset) * 2^left_shift = x * 2^left_shift + offset * 2^left_shift, the second term a scalar;
 * each is rescaled to the common scale, the two are summed and the sum rescaled to the output, all with TFLite's
 * double rounding on four lanes (tinyaot_mve_support.h): VQSHL for a positive shift, VQRDMULH, then
 * RoundingDivideByPOT as VRSHL after subtracting one from the negative lanes. The multipliers and shifts are
 * per tensor, so which of these steps a rescaling needs is known before the loop: TFLite's preparation (one input
 * at multiplier 1/2 with shift 0, whose rescaling of an even value is an exact halving, folded into its scale-up;
 * the other shifted right, or halved too; the output shifted right) runs a loop specialised on both inputs, which
 * skips the steps that do nothing; any other combination runs the general loop. Both compute the same integers.
 *
 * Overflow: the kernel takes offsets in [-128, 128] (TFLite's -zero point) and left_shift <= 23, so
 * |offset * 2^ls| <= 2^30, |x * 2^ls| <= 2^30 and their sum (x + offset) * 2^ls lies in [-2^31, 255 * 2^23]:
 * VMLAS wraps nothing. Each rescaled input is at most half of that in magnitude (each input multiplier is at most
 * 1/2), so their sum fits; the saturating steps saturate exactly where tinyaot_requantize does.
 *
 * Four elements are read before their four outputs are written, at the same index, so output may equal input_1 or
 * input_2 (in place), as for the generic kernel. The last 1..3 elements run one tail-predicated step (VCTP: lanes
 * past the end are neither read nor written). On a core without MVE this file runs the scalar loop.
 */
#include "tinyaot_nn.h"
#include "tinyaot_mve_support.h"

#if TINYAOT_USE_MVE

/* A per-tensor rescaling known before the loop: multiplier, left shift (>= 0), right shift as a VRSHL amount
   (<= 0). */
typedef struct {
    int32_t mult, left, right;
} addm_scale;

static TINYAOT_ALWAYS_INLINE addm_scale addm_split(int32_t mult, int32_t shift)
{
    addm_scale s;
    s.mult = mult;
    s.left = shift > 0 ? shift : 0;
    s.right = shift < 0 ? shift : 0;
    return s;
}

/* tinyaot_requantize on four lanes with a per-tensor scale. `general`: any shift (VQSHL always, and the ties
   fixup masked to the lanes' shift, i.e. none when right == 0). Otherwise `mode` (see ADDM_SHIFTED, ADDM_HALF)
   says which steps do something: with ADDM_SHIFTED the multiply and the right shift; with ADDM_HALF nothing at all,
   the caller having halved the scale-up instead (the value is (x + offset) * 2^left_shift, even, and SRDHM by
   2^30 = 1/2 with shift 0 halves an even value exactly). */
#define ADDM_SHIFTED 1 /* no left shift, a right shift (right < 0) */
#define ADDM_HALF 2    /* multiplier 2^30 and shift 0 (TFLite's larger-scale input), left_shift >= 1 */

static TINYAOT_ALWAYS_INLINE int32x4_t addm_rescale(int32x4_t v, addm_scale s, int general, int mode)
{
    if (general) {
        v = vqrdmulhq_n_s32(vqshlq_r_s32(v, s.left), s.mult);
        return tinyaot_mve_rdbpot(v, vdupq_n_s32(s.right));
    }
    if (mode == ADDM_SHIFTED) {
        v = vqrdmulhq_n_s32(v, s.mult);
        v = vqaddq_s32(v, vshrq_n_s32(v, 31)); /* -1 on negative lanes: ties away from zero */
        v = vrshlq_n_s32(v, s.right);
    }
    return v;
}

/* The whole loop, specialised by the flags (always inlined with constant flags). */
static TINYAOT_ALWAYS_INLINE void addm_loop(const int8_t *in1, const int8_t *in2, int8_t *out,
                                                              int32_t n, int32_t scale_up, int32_t off1,
                                                              int32_t off2, addm_scale s1, addm_scale s2,
                                                              addm_scale so, int32_t out_offset, int32_t act_min,
                                                              int32_t act_max, int general, int shifted1,
                                                              int shifted2)
{
    /* x * 2^ls + offset * 2^ls as one VMLAS (vector times vector plus scalar, into the freshly loaded x);
       |offset| <= 128 and left_shift <= 23 keep offset * 2^ls within int32. A halved input (ADDM_HALF) uses
       2^(ls - 1), exactly its rescaled value. */
    const int32_t sc1 = shifted1 == ADDM_HALF ? scale_up / 2 : scale_up;
    const int32_t sc2 = shifted2 == ADDM_HALF ? scale_up / 2 : scale_up;
    const int32x4_t up1 = vdupq_n_s32(sc1);
    const int32x4_t up2 = vdupq_n_s32(sc2);
    const int32_t base1 = off1 * sc1;
    const int32_t base2 = off2 * sc2;
    const int32x4_t lo = vdupq_n_s32(act_min);
    const int32x4_t hi = vdupq_n_s32(act_max);
    int32_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        const int32x4_t a = addm_rescale(vmlasq_n_s32(vldrbq_s32(in1 + i), up1, base1), s1, general, shifted1);
        const int32x4_t b = addm_rescale(vmlasq_n_s32(vldrbq_s32(in2 + i), up2, base2), s2, general, shifted2);
        int32x4_t r = addm_rescale(vaddq_s32(a, b), so, general, ADDM_SHIFTED);
        r = vminq_s32(vmaxq_s32(vqaddq_n_s32(r, out_offset), lo), hi);
        vstrbq_s32(out + i, r);
    }
    if (i < n) {
        const mve_pred16_t p = vctp32q((uint32_t)(n - i));
        const int32x4_t a =
            addm_rescale(vmlasq_n_s32(vldrbq_z_s32(in1 + i, p), up1, base1), s1, general, shifted1);
        const int32x4_t b =
            addm_rescale(vmlasq_n_s32(vldrbq_z_s32(in2 + i, p), up2, base2), s2, general, shifted2);
        int32x4_t r = addm_rescale(vaddq_s32(a, b), so, general, ADDM_SHIFTED);
        r = vminq_s32(vmaxq_s32(vqaddq_n_s32(r, out_offset), lo), hi);
        vstrbq_p_s32(out + i, r, p);
    }
}

#endif

tinyaot_status tinyaot_elementwise_add_s8_mve(const int8_t *input_1, const int8_t *input_2, int32_t input_1_offset,
                                              int32_t input_1_mult, int32_t input_1_shift, int32_t input_2_offset,
                                              int32_t input_2_mult, int32_t input_2_shift, int32_t left_shift, int8_t *output,
                                              int32_t out_offset, int32_t out_mult, int32_t out_shift,
                                              int32_t out_activation_min, int32_t out_activation_max, int32_t block_size)
{
    if (left_shift < 0 || left_shift > 23) {
        return TINYAOT_ARG_ERROR;
    }
    const int32_t scale_up = (int32_t)1 << left_shift;
#if TINYAOT_USE_MVE
    if (input_1_offset < -128 || input_1_offset > 128 || input_2_offset < -128 || input_2_offset > 128) {
        return TINYAOT_ARG_ERROR; /* TFLite's offsets (-zero point) are within this; it bounds the products below */
    }
    const addm_scale s1 = addm_split(input_1_mult, input_1_shift);
    const addm_scale s2 = addm_split(input_2_mult, input_2_shift);
    const addm_scale so = addm_split(out_mult, out_shift);
    /* each input's mode: ADDM_HALF, ADDM_SHIFTED, or 0 (anything else: the general loop) */
    const int m1 = (input_1_mult == (1 << 30) && input_1_shift == 0 && left_shift >= 1) ? ADDM_HALF
                   : (s1.left == 0 && s1.right < 0) ? ADDM_SHIFTED : 0;
    const int m2 = (input_2_mult == (1 << 30) && input_2_shift == 0 && left_shift >= 1) ? ADDM_HALF
                   : (s2.left == 0 && s2.right < 0) ? ADDM_SHIFTED : 0;
    if (m1 && m2 && so.left == 0 && so.right < 0) {
        /* TFLite's preparation: one input (or both) halved, the other shifted right; loops specialised on both */
        if (m1 == ADDM_HALF && m2 == ADDM_SHIFTED) {
            addm_loop(input_1, input_2, output, block_size, scale_up, input_1_offset, input_2_offset, s1, s2, so,
                      out_offset, out_activation_min, out_activation_max, 0, ADDM_HALF, ADDM_SHIFTED);
        } else if (m1 == ADDM_SHIFTED && m2 == ADDM_HALF) {
            addm_loop(input_1, input_2, output, block_size, scale_up, input_1_offset, input_2_offset, s1, s2, so,
                      out_offset, out_activation_min, out_activation_max, 0, ADDM_SHIFTED, ADDM_HALF);
        } else if (m1 == ADDM_HALF) {
            addm_loop(input_1, input_2, output, block_size, scale_up, input_1_offset, input_2_offset, s1, s2, so,
                      out_offset, out_activation_min, out_activation_max, 0, ADDM_HALF, ADDM_HALF);
        } else {
            addm_loop(input_1, input_2, output, block_size, scale_up, input_1_offset, input_2_offset, s1, s2, so,
                      out_offset, out_activation_min, out_activation_max, 0, ADDM_SHIFTED, ADDM_SHIFTED);
        }
    } else {
        addm_loop(input_1, input_2, output, block_size, scale_up, input_1_offset, input_2_offset, s1, s2, so,
                  out_offset, out_activation_min, out_activation_max, 1, 0, 0);
    }
#else
    int32_t i;
    for (i = 0; i < block_size; i++) {
        const int32_t a = tinyaot_requantize(((int32_t)input_1[i] + input_1_offset) * scale_up, input_1_mult,
                                             input_1_shift);
        const int32_t b = tinyaot_requantize(((int32_t)input_2[i] + input_2_offset) * scale_up, input_2_mult,
                                             input_2_shift);
        output[i] =
            tinyaot_requantize_s8(a + b, out_mult, out_shift, out_offset, out_activation_min, out_activation_max);
    }
#endif
    return TINYAOT_OK;
}
