"""tinyaot_mve_support.h: the Helium requantization equals TFLite's double rounding (core/fixedpoint.py, and the
scalar tinyaot_requantize) lane for lane under QEMU on mps3-an547, over extreme accumulators, every shift in
[-31, 30], multipliers at both ends of [2^30, 2^31) (and 0, and negative ones), exact ties of both roundings; the
per-tensor form and the predicated epilogue (output offsets -128/127, clamping, tail stores of 1..4 lanes) too."""
from __future__ import annotations

import numpy as np

from tinyaot.core import fixedpoint as fp

from mve.mve_harness import c_array, needs_arm, run_program

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _cases(rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    extremes = [I32_MIN, I32_MIN + 1, -(1 << 30) - 1, -(1 << 30), -65537, -32769, -256, -129, -128, -3, -2, -1, 0,
                1, 2, 3, 127, 128, 255, 32767, (1 << 30) - 1, 1 << 30, I32_MAX - 1, I32_MAX]
    mults = [0, 1 << 30, (1 << 30) + 1, 1518500250, I32_MAX - 1, I32_MAX, -(1 << 30), -I32_MAX]
    acc, mult, shift = [], [], []
    for s in range(-31, 31):  # every shift with every extreme accumulator, multipliers cycling
        for i, a in enumerate(extremes):
            acc.append(a)
            mult.append(mults[(i + s) % len(mults)])
            shift.append(s)
    for e in range(1, 32):  # exact ties of RoundingDivideByPOT: mult 2^30 halves exactly, hi = +-(k 2^e + 2^(e-1))
        for k in (0, 1, 5):
            for sign in (1, -1):
                hi = k * (1 << e) + (1 << (e - 1))
                if 2 * hi <= I32_MAX:
                    acc.append(sign * 2 * hi)
                    mult.append(1 << 30)
                    shift.append(-e)
    for _ in range(600):  # ties of the high multiply (odd accumulators times 2^30) and random values
        acc.append(int(rng.integers(-(1 << 20), 1 << 20)) * 2 + 1)
        mult.append(1 << 30)
        shift.append(int(rng.integers(-3, 4)))
    n = 1600
    acc += [int(v) for v in rng.integers(I32_MIN, I32_MAX, n, endpoint=True)]
    mult += [int(v) for v in rng.integers(1 << 30, I32_MAX, n, endpoint=True)]
    shift += [int(v) for v in rng.integers(-31, 31, n)]
    pad = -len(acc) % 4
    acc, mult, shift = acc + [0] * pad, mult + [1 << 30] * pad, shift + [0] * pad
    return np.array(acc, np.int64), np.array(mult, np.int64), np.array(shift, np.int64)


PROGRAM = r"""
#include "tinyaot_hal.h"
#include "tinyaot_mve_support.h"
#if !TINYAOT_USE_MVE
#error "this test must exercise the Helium path"
#endif
%(arrays)s
static int report(const char *what, int i)
{
    tinyaot_hal_puts(what);
    tinyaot_hal_puts(" mismatch at ");
    tinyaot_hal_put_uint((uint32_t)i);
    tinyaot_hal_puts("\n");
    return 1;
}

int main(void)
{
    int bad = 0;
    int32_t got[4];
    int8_t out[8];
    int i, j;
    for (i = 0; i < N_CASES; i += 4) {
        /* per channel: four lanes with their own multiplier and shift */
        vst1q_s32(got, tinyaot_mve_requantize(vld1q_s32(acc + i), vld1q_s32(mult + i), vld1q_s32(shift + i)));
        for (j = 0; j < 4; j++) {
            if (got[j] != want[i + j]) bad += report("per-channel", i + j);
            if (tinyaot_requantize(acc[i + j], mult[i + j], shift[i + j]) != want[i + j])
                bad += report("scalar", i + j);
        }
        /* per tensor: the four accumulators with lane 0's multiplier and shift */
        vst1q_s32(got, tinyaot_mve_requantize_n(vld1q_s32(acc + i), mult[i], shift[i]));
        for (j = 0; j < 4; j++) {
            if (got[j] != want_n[i + j]) bad += report("per-tensor", i + j);
        }
        /* epilogue with a tail of 1..4 lanes: stored lanes == reference, lanes past the tail untouched */
        {
            const int32_t lanes = 1 + (i / 4) % 4;
            const int32_t out_off = (i / 16) % 2 ? 127 : -128;
            const mve_pred16_t p = vctp32q((uint32_t)lanes);
            for (j = 0; j < 8; j++) out[j] = 0x5A;
            /* GCC 12 treats a predicated store as writing all its bytes and would drop the fill above without
               this barrier (which makes `out` visible to unknown code); see tinyaot_mve_support.h */
            __asm__ volatile("" : : "r"(out) : "memory");
            vstrbq_p_s32(out, tinyaot_mve_requantize_s8x4(vld1q_s32(acc + i), mult + i, shift + i, p, out_off,
                                                          -128, 127), p);
            for (j = 0; j < 8; j++) {
                const int32_t w = j < lanes ? (int32_t)want_s8[2 * i + ((i / 16) % 2) * 4 + j] : 0x5A;
                if (out[j] != w) bad += report("epilogue", i + j);
            }
        }
        if (bad > 20) break;
    }
    tinyaot_hal_puts(bad ? "SOME FAILED\n" : "ALL PASSED\n");
    return bad != 0;
}
"""


@needs_arm
def test_mve_requantize_bit_exact_under_qemu(tmp_path):
    acc, mult, shift = _cases(np.random.default_rng(10))
    want = fp.multiply_by_quantized_multiplier(acc, mult, shift)
    grp = np.arange(len(acc)) // 4 * 4  # per tensor: lane 0's parameters for the whole group
    want_n = fp.multiply_by_quantized_multiplier(acc, mult[grp], shift[grp])
    # the epilogue's expected bytes for both output offsets, laid out [group][offset][lane]
    s8 = [fp.requantize_to_int8(acc, mult, shift, off, -128, 127).reshape(-1, 4) for off in (-128, 127)]
    want_s8 = np.stack(s8, axis=1).ravel()
    assert len(np.unique(want)) > 1000 and (want == I32_MAX).any() and want.min() < -(1 << 30)
    arrays = (f"#define N_CASES {len(acc)}\n" + c_array("acc", acc, "int32_t") + c_array("mult", mult, "int32_t")
              + c_array("shift", shift, "int32_t") + c_array("want", want, "int32_t")
              + c_array("want_n", want_n, "int32_t") + c_array("want_s8", want_s8, "int8_t"))
    res = run_program(tmp_path, PROGRAM.replace("%(arrays)s", arrays))
    assert res.exit_code == 0 and "ALL PASSED" in res.stderr, (res.exit_code, res.stderr[-2000:])
