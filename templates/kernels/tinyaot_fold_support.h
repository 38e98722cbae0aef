/*
 * Helpers shared by the "fold" kernels (tinyaot_convolve_s8_fold.c, tinyaot_fully_connected_s8_fold.c).
 *
 * Requantization table. The compiler (tinyaot/ops/common.py fold_requant_table) offers a fold variant only when,
 * for every output channel o, the right shift e = -shift[o] lies in [1, 22] and
 *     B[o] = |bias[o]| + sum|w[o]| * (128 + |input_offset|) < 2^30,   B[o] + 2^(e-1) + 128 * 2^e < 2^31,
 * and it passes, per channel, the pair {mult, radd} (radd = 2^(e-1) + output_offset * 2^e) through
 * quant_params->multiplier and e through quant_params->shift, four per int32 word (channel o in bits 8 * (o % 4) of
 * word o / 4: a byte each, as the table would otherwise add 4 bytes per channel to flash; output_offset itself is
 * then not read).
 *
 * TFLite's double rounding, computed exactly in fewer steps under those bounds (|acc| <= B[o]):
 *   SaturatingRoundingDoublingHighMul(acc, m) = floor((acc*m + 2^30) / 2^31) = floor((2acc*m + 2^31) / 2^32): the
 *   rounding high multiply of 2acc (which fits int32 as |acc| < 2^30; the saturating case needs acc = -2^31). With
 *   p = 2acc*m as a 64-bit product, that is hi(p) + [lo(p) >= 2^31]. Its magnitude is at most |acc|, since m < 2^31.
 *   RoundingDivideByPOT(h, e), ties away from zero, = floor((h + 2^(e-1) - [h < 0]) / 2^e) for e >= 1 (for h >= 0
 *   round half up; for h < 0 the -1 moves a tie's floor away from zero and leaves the other cases alone); adding
 *   output_offset * 2^e inside the floor adds output_offset outside it. |h + radd - 1| < 2^31 by the bound above.
 * A channel with a constant output v (no weights, or B < 2^(e-1)) comes as bias' 0, mult 0, e 1, radd 2v: then h = 0
 * and the result is v (its accumulator, at most 128 * sum|w| <= B in magnitude, is multiplied by 0).
 */
#ifndef TINYAOT_FOLD_SUPPORT_H
#define TINYAOT_FOLD_SUPPORT_H

#include "tinyaot_nn_support.h"

/* TINYAOT_FOLD_ASM: the fold kernels' inner blocks in inline assembly. The assembly needs r7, so GCC must not keep
   a frame pointer there: the functions that hold it ask for none, which GCC honours at -O1..-O3 and -Og even under
   -fno-omit-frame-pointer, but not at -Os (so no assembly there); the one function GCC could not give its 14
   registers at -Og with -fno-omit-frame-pointer is written out whole (naked). -DTINYAOT_FOLD_NO_ASM still selects
   the C, and so does an aligned-only build (its LDRs read the input at any byte address). */
#if TINYAOT_USE_DSP && TINYAOT_GCC && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__) && \
    !TINYAOT_ALIGNED_ONLY && !defined(TINYAOT_FOLD_NO_ASM)
#define TINYAOT_FOLD_ASM 1
#else
#define TINYAOT_FOLD_ASM 0
#endif

#if TINYAOT_FOLD_ASM
/* The body of a naked 4x2 core (fold_mac_4x2_s8 in tinyaot_fold_conv.h, tinyaot_block_mac_4x2 in
   tinyaot_block_support.h): the eight accumulators loaded from acc (the fifth argument, on the stack) into r4..r11,
   `end` (an instruction setting r12 to where the walk ends, from r0..r3) kept at [sp], then `step` once for an odd
   count r3 and twice per loop pass until the pointer register `ptr` reaches the end; the accumulators stored back.
   r7 is saved and restored like the other callee-saved registers. */
#define TINYAOT_NAKED_4X2_ASM(end, step, ptr)                                                                         \
    "push {r4-r11, lr}\n\t"                                                                                           \
    "ldr r12, [sp, #36]\n\t"                                                                                          \
    "ldm r12, {r4-r11}\n\t"                                                                                           \
    "sub sp, sp, #8\n\t"                                                                                              \
    "str r12, [sp, #4]\n\t" end                                                                                       \
    "str r12, [sp]\n\t"                                                                                               \
    "tst r3, #1\n\t"                                                                                                  \
    "beq 2f\n\t" step                                                                                                 \
    "2:\n\t"                                                                                                          \
    "ldr r3, [sp]\n\t"                                                                                                \
    "cmp " ptr ", r3\n\t"                                                                                             \
    "beq 3f\n\t"                                                                                                      \
    "1:\n\t" step step                                                                                                \
    "ldr r3, [sp]\n\t"                                                                                                \
    "cmp " ptr ", r3\n\t"                                                                                             \
    "bne 1b\n\t"                                                                                                      \
    "3:\n\t"                                                                                                          \
    "ldr r12, [sp, #4]\n\t"                                                                                           \
    "stm r12, {r4-r11}\n\t"                                                                                           \
    "add sp, sp, #8\n\t"                                                                                              \
    "pop {r4-r11, pc}\n\t"
#endif

/* The right shift e of channel o (see above). */
static inline int32_t tinyaot_fold_e(const int32_t *ew, int32_t o)
{
    return (int32_t)(((uint32_t)ew[o >> 2] >> (8 * (o & 3))) & 0xFFu);
}

/* floor((2acc*m + 2^31) / 2^32), |acc| < 2^30 (see above). */
static inline int32_t tinyaot_fold_high_mul(int32_t acc, int32_t mult)
{
#if TINYAOT_USE_DSP && TINYAOT_GNU
    int32_t h;
    __asm__("smmulr %0, %1, %2" : "=r"(h) : "r"(acc * 2), "r"(mult));
    return h;
#else
    const int64_t p = (int64_t)(acc * 2) * (int64_t)mult;
    return (int32_t)(p >> 32) + (int32_t)((uint32_t)p >> 31);
#endif
}

/* RoundingDivideByPOT(SRDHM(acc, mult), e) + output_offset, before the clamp (see above). */
static inline int32_t tinyaot_fold_scale(int32_t acc, int32_t mult, int32_t radd, int32_t e)
{
    const int32_t h = tinyaot_fold_high_mul(acc, mult);
    return (h + radd + (h >> 31)) >> e;
}

/* r clamped to [-128, 127]: one SSAT where the core has it. */
static inline int32_t tinyaot_fold_sat8(int32_t r)
{
#if defined(__ARM_FEATURE_SAT) && TINYAOT_GNU
    int32_t v;
    __asm__("ssat %0, #8, %1" : "=r"(v) : "r"(r));
    return v;
#else
    return r < -128 ? -128 : (r > 127 ? 127 : r);
#endif
}

/* out = clamp(RoundingDivideByPOT(SRDHM(acc, mult), e) + output_offset), with mr = {mult, radd} (see above). */
static inline int8_t tinyaot_fold_rq(int32_t acc, const int32_t *mr, int32_t e, int32_t act_min, int32_t act_max)
{
    const int32_t h = tinyaot_fold_high_mul(acc, mr[0]);
    int32_t r = (h + mr[1] + (h >> 31)) >> e;
    r = r < act_min ? act_min : r;
    return (int8_t)(r > act_max ? act_max : r);
}

#endif /* TINYAOT_FOLD_SUPPORT_H */
