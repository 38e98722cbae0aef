/*
 * tinyaot_elementwise_add_s8_fast: int8 + int8 -> int8 over `size` elements, TFLite's int8 ADD arithmetic exactly
 * (the "fast" variant of ops/add.py; tinyaot_elementwise_add_s8 is the general kernel), for the parameters TFLite's
 * preparation gives (left shift 20, both inputs rescaled to twice the larger input scale). The compiler passes
 * the inputs so that input 1 has the larger scale: its multiplier is then exactly 1/2 (2^30, shift 0), and
 *   a = RoundingDivideByPOT(SaturatingRoundingDoublingHighMul((x1 + o1) * 2^20, 2^30), 0) = (x1 + o1) * 2^19
 * exactly ((x1 + o1) * 2^20 is even, so halving it does not round). Input 2 has a multiplier m2 with a right
 * shift e2 >= 1, or is exactly 1/2 too (equal scales, `in2_half`). The output multiplier has a right shift
 * eo >= 1. What the compiler prepared (and checked, ops/add.py add_fast_params) so each step is shorter:
 * - o1_20 = o1 * 2^20, o2_21 = o2 * 2^21: the offsets already shifted, so (x + o) * 2^k is one add of x << k;
 * - half2 = 2^(e2-1) and radd = 2^(eo-1) + output_offset * 2^eo: the rounding halves of RoundingDivideByPOT
 *   (and the output zero point, added inside the floor, comes out added outside it).
 * Steps, with SRDHM(v, m) = floor((v*m + 2^30) / 2^31) = floor((2v*m + 2^31) / 2^32), the rounding high multiply
 * SMMULR of 2v, and RoundingDivideByPOT(h, e) = floor((h + 2^(e-1) - [h < 0]) / 2^e) for e >= 1 (round half away
 * from zero: for h < 0 the -1 moves a tie's floor away from zero and changes nothing else):
 *   2b = 2 * RDBPOT(SRDHM((x2 + o2) * 2^20, m2), e2)   (SMMLAR of (x2 + o2) * 2^21, see addf_rq)
 *   2s = 2a + 2b = (x1 + o1) * 2^20 + 2b
 *   out = clamp(floor((SRDHM(s, mo) + [SRDHM < 0 ? -1 : 0] + radd) / 2^eo))
 * Bounds: |x + o| <= 255, so |(x + o) * 2^21| < 2^29; each of a, b is at most half of (x + o) * 2^20 in
 * magnitude (m <= 1/2), so |2s| <= 2 * 255 * 2^20 < 2^29 and |SRDHM(s, mo)| <= |s| < 2^28; the compiler requires
 * 2^28 + 2^(eo-1) + 128 * 2^eo < 2^31 for the output rounding add (eo <= 23). No int32 step overflows.
 * Element i is read before output[i] is written, so output may equal input_1 or input_2 (in place).
 */
#include "tinyaot_nn.h"

#if defined(__ARM_FEATURE_SAT) && TINYAOT_GNU
#define ADDF_HAS_SSAT 1 /* SSAT: ARMv7-M and up, DSP or not */
#include <arm_acle.h>
#else
#define ADDF_HAS_SSAT 0
#endif

/* RoundingDivideByPOT(SRDHM(v, m), e) + c * 2^e... as floor((t + floor((2v * m + 2^31) / 2^32)) / 2^e) with
   t = r + (v < 0 ? -1 : 0), r = 2^(e-1) (+ the output zero point * 2^e): SMMLAR where the core has it (the
   rounded high product plus t in one instruction). The sign is v's, not the product's: they differ only when
   v < 0 and the rounded product is 0, where the -1 changes nothing (r - 1 and r, r = 2^(e-1) mod 2^e, floor to
   the same multiple of 2^e). t plus the product fits int32 by the bounds above. */
static TINYAOT_ALWAYS_INLINE int32_t addf_rq(int32_t v2, int32_t m, int32_t r, int32_t e)
{
    const int32_t t = r + (v2 >> 31);
#if TINYAOT_USE_DSP && TINYAOT_GNU
    int32_t h;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(h) : "r"(v2), "r"(m), "r"(t));
    return h >> e;
#else
    /* t * 2^32 + 2^31 + v2 * m in one SMLAL: its high word t + h fits int32, so no int64 step overflows */
    return (int32_t)(((int64_t)t * 4294967296LL + 2147483648LL + (int64_t)v2 * m) >> 32) >> e;
#endif
}

typedef struct {
    int32_t o1_20, o2_21, m2, e2, half2, mo, eo, radd, act_min, act_max;
} addf_params;

/* One element; `in2_half` and `full` are constants after inlining. */
static TINYAOT_ALWAYS_INLINE int8_t addf_one(int32_t x1, int32_t x2, const addf_params *p,
                                                             int in2_half, int full)
{
    int32_t b2;
    if (in2_half) {
        b2 = p->o2_21 / 2 + (int32_t)((uint32_t)x2 << 20); /* (x2 + o2) * 2^20: exact, like input 1 */
    } else {
        const int32_t h = addf_rq(p->o2_21 + (int32_t)((uint32_t)x2 << 21), p->m2, p->half2, p->e2);
        b2 = (int32_t)((uint32_t)h << 1);
    }
    const int32_t s2 = p->o1_20 + (int32_t)((uint32_t)x1 << 20) + b2;
    int32_t v = addf_rq(s2, p->mo, p->radd, p->eo);
#if ADDF_HAS_SSAT
    if (full) {
        return (int8_t)TINYAOT_SSAT8(v);
    }
#else
    (void)full;
#endif
    v = v < p->act_min ? p->act_min : v;
    v = v > p->act_max ? p->act_max : v;
    return (int8_t)v;
}

static TINYAOT_ALWAYS_INLINE void addf_loop(const int8_t *in1, const int8_t *in2, int8_t *out,
                                                            int32_t n, const addf_params *P, int in2_half, int full)
{
    /* the parameters in locals, so they stay in registers across the stores (which may alias the inputs) */
    const addf_params p = *P;
    int32_t i;
    for (i = 0; i < n; i++) {
        out[i] = addf_one(in1[i], in2[i], &p, in2_half, full);
    }
}

tinyaot_status tinyaot_elementwise_add_s8_fast(const int8_t *input_1, const int8_t *input_2, int8_t *output, int32_t size,
                                               int32_t o1_20, int32_t o2_21, int32_t m2, int32_t e2, int32_t half2,
                                               int32_t out_mult, int32_t eo, int32_t radd, int32_t act_min, int32_t act_max,
                                               int32_t in2_half)
{
    if (eo < 1 || eo > 30 || (!in2_half && (e2 < 1 || e2 > 30))) {
        return TINYAOT_ARG_ERROR;
    }
    addf_params p;
    p.o1_20 = o1_20;
    p.o2_21 = o2_21;
    p.m2 = m2;
    p.e2 = e2;
    p.half2 = half2;
    p.mo = out_mult;
    p.eo = eo;
    p.radd = radd;
    p.act_min = act_min;
    p.act_max = act_max;
    const int full = act_min == -128 && act_max == 127;
    if (in2_half) {
        if (full) {
            addf_loop(input_1, input_2, output, size, &p, 1, 1);
        } else {
            addf_loop(input_1, input_2, output, size, &p, 1, 0);
        }
    } else if (full) {
        addf_loop(input_1, input_2, output, size, &p, 0, 1);
    } else {
        addf_loop(input_1, input_2, output, size, &p, 0, 0);
    }
    return TINYAOT_OK;
}
