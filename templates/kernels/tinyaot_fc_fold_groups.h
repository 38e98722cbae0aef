/*
 * The group loop and the store shared by the mask-unpacking fully connected kernels, tinyaot_fully_connected_s4_fold.c
 * (int4: groups of 8 inputs, 4 words per block of four channels) and tinyaot_fully_connected_s5_fold.c (int5: groups
 * of 12 inputs, 8 words); those files say how a group is laid out and unpacked, and own the group itself (its C form
 * and its inline assembly). Not a header of functions to call: each of the two kernel files includes it once, after
 * defining these, and it defines the two static functions of that file under the names given:
 *   TINYAOT_FCF_GROUPS     name of the group loop  (s4_groups / s5_groups)
 *   TINYAOT_FCF_STORE      name of the store       (s4_store / s5_store)
 *   TINYAOT_FCF_INPUTS     inputs per group        (8 / 12)
 *   TINYAOT_FCF_WORDS      words per group of a block of four channels (4 / 8)
 *   TINYAOT_FCF_GROUP      the C group: (x, w, acc) -> acc[0..3] += one group
 *   TINYAOT_FCF_MASK       the AND mask of a lane pair's two fields (0x000F000Fu / 0x001F001Fu), and
 *   TINYAOT_FCF_GROUP_ASM  one group in assembly, x advanced by TINYAOT_FCF_INPUTS and w by 4 * TINYAOT_FCF_WORDS
 *                          bytes, with the operands named below (both only under TINYAOT_FOLD_ASM).
 * Plain macros of compile-time constants, so each kernel compiles to the code it compiled to when these functions
 * were written out in it (the same instructions at every optimisation level).
 */
#include "tinyaot_nn.h"
#include "tinyaot_fold_support.h"

/* acc[0..3] += n >= 1 whole groups of inputs at x against the block's words at *w (advanced). With the assembly, 13
   registers: 4 accumulators, 2 pointers, 4 lane pairs, the mask, 2 temporaries (the group bodies say what each
   costs); when n is odd the first group runs alone, then two per iteration of the loop. */
#if TINYAOT_FOLD_ASM
TINYAOT_NOINLINE TINYAOT_OMIT_FRAME_POINTER
#endif
static void TINYAOT_FCF_GROUPS(const int8_t *x, const uint32_t **pw, int32_t n, int32_t acc[4])
{
    const uint32_t *w = *pw;
#if TINYAOT_FOLD_ASM
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    const int8_t *const end = x + TINYAOT_FCF_INPUTS * n; /* (when n is odd, the first group runs alone before the
                                                               loop) */
    int32_t p0, p1, p2, p3, t, u;
    const uint32_t m = TINYAOT_FCF_MASK;
    if (n & 1) {
        __asm__(TINYAOT_FCF_GROUP_ASM
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [x] "+r"(x), [w] "+r"(w),
                  [p0] "=&r"(p0), [p1] "=&r"(p1), [p2] "=&r"(p2), [p3] "=&r"(p3), [t] "=&r"(t), [u] "=&r"(u)
                : [m] "r"(m)
                : "memory");
    }
    if (n >= 2) {
        __asm__("1:\n\t" TINYAOT_FCF_GROUP_ASM TINYAOT_FCF_GROUP_ASM
                "ldr %[t], %[end]\n\t"
                "cmp %[x], %[t]\n\t"
                "bne 1b\n\t"
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [x] "+r"(x), [w] "+r"(w),
                  [p0] "=&r"(p0), [p1] "=&r"(p1), [p2] "=&r"(p2), [p3] "=&r"(p3), [t] "=&r"(t), [u] "=&r"(u)
                : [m] "r"(m), [end] "m"(end)
                : "cc", "memory");
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
#else
    for (; n > 0; n--, x += TINYAOT_FCF_INPUTS, w += TINYAOT_FCF_WORDS) {
        TINYAOT_FCF_GROUP(x, w, acc);
    }
#endif
    *pw = w;
}

/* The block's results (channels o .. o+nc-1): the fold table, its four shifts one word, or multipliers and shifts. */
static void TINYAOT_FCF_STORE(const int32_t acc[4], const int32_t *mult, const int32_t *shift, int fold_table,
                              int32_t o, int32_t nc, int32_t out_offset, int32_t act_min, int32_t act_max, int8_t *out)
{
    int32_t c;
    if (fold_table) {
        const uint32_t ew = (uint32_t)shift[o >> 2]; /* o is a multiple of 4: the block's four shifts */
        for (c = 0; c < nc; c++) {
            const int32_t r = tinyaot_fold_scale(acc[c], mult[2 * (o + c)], mult[2 * (o + c) + 1],
                                                 (int32_t)((ew >> (8 * c)) & 0xFFu));
            out[o + c] = (int8_t)(r < act_min ? act_min : (r > act_max ? act_max : r));
        }
        return;
    }
    for (c = 0; c < nc; c++) {
        out[o + c] = tinyaot_requantize_s8(acc[c], mult[o + c], shift[o + c], out_offset, act_min, act_max);
    }
}
