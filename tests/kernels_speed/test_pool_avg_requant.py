"""tinyaot_avgpool_requant_s8's DSP path (eight channels per pass summed in 16-bit lanes with SXTAB16, windows of
up to 256 taps) == the numpy reference avgpool_requant_s8, on Cortex-M4 under QEMU, and its plain C path on
Cortex-M3 under QEMU and on the host:
windows of 1..256 taps (256 of all -128 is the lane's extreme, -2^15), 257 and more taps (the int32 path), all
-128 / all 127 inputs, offsets -127 and 128, channel counts 1..19 (tails of 8 and of 4), strides 1..3, global
pools like kws_dscnn's 25x5 and clamped activation ranges; output shifts right and zero (the short exact
requantizations) and left (the general one).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np
import pytest

from tinyaot.core import fixedpoint as fp
from tinyaot.ops.pool import avgpool_requant_s8
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.host import compile_shared

KERNELS = TEMPLATES / "kernels"
SOURCE = KERNELS / "tinyaot_avgpool_requant_s8.c"
# (h, w, kh, kw, stride): global 16x16 = 256 taps, 257 and 300 taps (int32 path), kws' 25x5 global pool, small
# windows
SHAPES = [(16, 16, 16, 16, 1), (1, 257, 1, 257, 1), (1, 300, 1, 300, 1), (25, 5, 25, 5, 1), (5, 7, 2, 3, 1),
          (7, 9, 3, 3, 2),
          (4, 4, 1, 1, 3), (9, 3, 3, 3, 3)]


def cases(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i, (h, w, kh, kw, st) in enumerate(SHAPES * 3):
        c = int(rng.integers(1, 20)) if i % 4 else 16
        fill = i // len(SHAPES)  # 0 random, 1 all -128, 2 all 127
        x = (rng.integers(-128, 128, (1, h, w, c)) if fill == 0 else np.full((1, h, w, c), (-128, 127)[fill - 1]))
        x = x.astype(np.int8)
        off = int(rng.choice([-127, 128, int(rng.integers(-127, 129))]))
        ooff = int(rng.integers(-128, 128))
        m, s = fp.quantize_multiplier(float(rng.uniform(0.05, 2.0)) / (kh * kw))
        if i % 5 == 1:
            m, s = fp.quantize_multiplier(float(rng.uniform(0.5, 0.99)))  # shift 0 (vww_mobilenetv1_025's pool)
        lo, hi = (-128, 127) if i % 3 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
        oh, ow = (h - kh) // st + 1, (w - kw) // st + 1
        exp = avgpool_requant_s8(x, kernel_hw=(kh, kw), stride_hw=(st, st), output_hw=(oh, ow), input_offset=off,
                                 output_offset=ooff, mult=m, shift=s, act_min=lo, act_max=hi)
        out.append(dict(x=x, exp=exp, geo=[st, st, lo, hi], dims=[(1, h, w, c), (1, kh, kw, 1), (1, oh, ow, c)],
                        q=[off, ooff, m, s]))
    return out


class _Dims(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int32), ("h", ctypes.c_int32), ("w", ctypes.c_int32), ("c", ctypes.c_int32)]


class _Pool(ctypes.Structure):  # tinyaot_pool_params: stride, padding, activation
    _fields_ = [(n, ctypes.c_int32) for n in ("sh", "sw", "ph", "pw", "lo", "hi")]


@lru_cache(maxsize=1)
def _host():
    f = ctypes.CDLL(str(compile_shared([SOURCE], [KERNELS], extra_flags=["-Werror"]))).tinyaot_avgpool_requant_s8
    f.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int32] * 4 + [ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


def test_host_matches_reference():
    f = _host()
    for i, c in enumerate(cases(0)):
        st, _, lo, hi = c["geo"]
        out = np.full(c["exp"].shape, 99, np.int8)
        dims = [_Dims(*d) for d in c["dims"]]
        prm = _Pool(st, st, 0, 0, lo, hi)
        rc = f(ctypes.addressof(prm), ctypes.addressof(dims[0]), c["x"].ctypes.data, ctypes.addressof(dims[1]),
               ctypes.addressof(dims[2]), *c["q"], out.ctypes.data)
        assert rc == 0 and np.array_equal(out, c["exp"]), f"case {i}"


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m3"])
def test_dsp_and_plain_paths_under_qemu(tmp_path, cpu):
    from tests.ops.conftest import ARM_GCC, QEMU, ArmRunner

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    cs = cases(1)

    def arr(ctype: str, name: str, values) -> str:
        body = ", ".join(str(int(a)) for a in np.ravel(values))
        return f"static const {ctype} {name}[{np.size(values)}] = {{{body}}};\n"

    parts = ['#include <string.h>\n#include "tinyaot_nn.h"\n', "void harness_puts(const char *s);\n",
             f"static int8_t out_buf[{max(c['exp'].size for c in cs)}];\n"]
    body = ["int main(void)\n{\n    int bad = 0;\n    int i;\n"]
    for k, c in enumerate(cs):
        st, _, lo, hi = c["geo"]
        (n, h, w, ch), (_, kh, kw, _), (_, oh, ow, _) = c["dims"]
        parts += [arr("int8_t", f"x{k}", c["x"]), arr("int8_t", f"e{k}", c["exp"])]
        body.append(f"    {{\n        const tinyaot_pool_params p = {{{{{st}, {st}}}, {{0, 0}}, {{{lo}, {hi}}}}};\n"
                    f"        const tinyaot_dims di = {{{n}, {h}, {w}, {ch}}}, df = {{1, {kh}, {kw}, 1}}, "
                    f"do_ = {{1, {oh}, {ow}, {ch}}};\n        memset(out_buf, 99, sizeof out_buf);\n"
                    f"        bad += tinyaot_avgpool_requant_s8(&p, &di, x{k}, &df, &do_, "
                    f"{', '.join(map(str, c['q']))}, out_buf) != 0;\n"
                    f"        for (i = 0; i < {c['exp'].size}; i++) bad += out_buf[i] != e{k}[i];\n"
                    "    }\n")
    body.append('    harness_puts(bad ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return bad != 0;\n}\n')
    runner = ArmRunner(tmp_path)
    elf = runner.build(cpu, "avgpool", "".join(parts + body), [SOURCE], [KERNELS], ("-Wall", "-Wextra", "-Werror"))
    rc, out = runner.run(cpu, elf)
    assert rc == 0 and "ALL PASSED" in out, out[-2000:]
