"""The "fast" variant of the residual Add (templates/kernels/tinyaot_elementwise_add_s8_fast.c, ops/add.py
add_fast_params): TFLite's int8 ADD arithmetic bit for bit, offered only for the parameters it computes exactly.

(a) host C (plain path) == elementwise_add_s8 (the numpy reference) for parameters from add_params over random
    scales (equal scales too: both inputs at multiplier 1/2), random and extreme inputs (-128/127), offsets at
    -127/128 and -128/127, clamped and full activation ranges, odd lengths, output in place over either input;
(b) the same on Cortex-M4 (SMMULR, SSAT) and Cortex-M3 (plain C, SSAT) under QEMU;
(c) not offered without TFLite's left shift 20, without an input at exactly 1/2, or with an output shift the
    rounding add cannot take. (A tiny residual model deployed on mps2-an386 runs it and verifies: the deploy test
    of tests/kernels_speed/test_dw_3x3.py.)
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np
import pytest

from tinyaot.ops.add import add_fast_params, add_params, elementwise_add_s8
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.host import compile_shared

KERNELS = TEMPLATES / "kernels"
SOURCE = KERNELS / "tinyaot_elementwise_add_s8_fast.c"
ARGS = ("o1_20", "o2_21", "m2", "e2", "half2", "mo", "eo", "radd", "act_min", "act_max", "in2_half")


def cases(count: int, seed: int, max_len: int = 40) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        s1, s2, so = (float(v) for v in np.exp(rng.uniform(-8, 1, 3)))
        if len(out) % 5 == 0:
            s2 = s1
        a = dict(add_params(s1, s2, so), input1_offset=int(rng.choice([-127, 128, int(rng.integers(-127, 129))])),
                 input2_offset=int(rng.choice([-127, 128, int(rng.integers(-127, 129))])),
                 output_offset=int(rng.choice([-128, 127, int(rng.integers(-128, 128))])))
        lo, hi = (-128, 127) if rng.random() < 0.5 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
        a.update(act_min=lo, act_max=hi)
        f = add_fast_params(a)
        if f is None:
            continue
        n = int(rng.integers(1, max_len))
        draw = (lambda: rng.choice(np.array([-128, 127]), n)) if len(out) % 3 == 0 else \
            (lambda: rng.integers(-128, 128, n))
        x1, x2 = draw().astype(np.int8), draw().astype(np.int8)
        ins = (x2, x1) if f["swap"] else (x1, x2)
        out.append(dict(ins=ins, args=[n] + [f[k] for k in ARGS], exp=elementwise_add_s8(x1, x2, **a)))
    return out


@lru_cache(maxsize=1)
def _host_kernel():
    f = ctypes.CDLL(str(compile_shared([SOURCE], [KERNELS], extra_flags=["-Werror"]))).tinyaot_elementwise_add_s8_fast
    f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 12
    f.restype = ctypes.c_int
    return f


def test_host_kernel_matches_reference_also_in_place():
    f = _host_kernel()
    for i, c in enumerate(cases(600, seed=0)):
        a, b = (np.array(v) for v in c["ins"])
        out = np.full(c["exp"].shape, 99, np.int8)
        assert f(a.ctypes.data, b.ctypes.data, out.ctypes.data, *c["args"]) == 0
        assert np.array_equal(out, c["exp"]), f"case {i}: {c['args']}"
        target = a if i % 2 else b  # in place over either input
        assert f(a.ctypes.data, b.ctypes.data, target.ctypes.data, *c["args"]) == 0
        assert np.array_equal(target, c["exp"]), f"case {i} in place: {c['args']}"


def _arr(ctype: str, name: str, values) -> str:
    v = np.asarray(values).reshape(-1)
    return f"static const {ctype} {name}[{v.size}] = {{{', '.join(str(int(t)) for t in v)}}};\n"


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m3"])
def test_kernel_under_qemu_matches_reference(tmp_path, cpu):
    from tests.ops.conftest import ARM_GCC, QEMU, ArmRunner

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    cs = cases(80, seed=5, max_len=70)
    parts = ['#include <string.h>\n#include "tinyaot_nn.h"\n', "void harness_puts(const char *s);\n",
             "int tinyaot_elementwise_add_s8_fast(const int8_t *, const int8_t *, int8_t *, int32_t, int32_t,"
             " int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);\n",
             f"static int8_t out_buf[{max(c['exp'].size for c in cs)}];\n"]
    body = ["int main(void)\n{\n    int bad = 0;\n    int i;\n"]
    for k, c in enumerate(cs):
        parts += [_arr("int8_t", f"a{k}", c["ins"][0]), _arr("int8_t", f"b{k}", c["ins"][1]),
                  _arr("int8_t", f"e{k}", c["exp"])]
        body.append(f"    memset(out_buf, 99, sizeof out_buf);\n"
                    f"    bad += tinyaot_elementwise_add_s8_fast(a{k}, b{k}, out_buf, "
                    f"{', '.join(str(int(v)) for v in c['args'])}) != 0;\n"
                    f"    for (i = 0; i < {c['exp'].size}; i++) bad += out_buf[i] != e{k}[i];\n")
    body.append('    harness_puts(bad ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return bad != 0;\n}\n')
    runner = ArmRunner(tmp_path)
    elf = runner.build(cpu, "addfast", "".join(parts + body), [SOURCE], [KERNELS], ("-Wall", "-Wextra", "-Werror"))
    rc, out = runner.run(cpu, elf)
    assert rc == 0 and "ALL PASSED" in out, f"{cpu}: exit {rc}:\n{out[-2000:]}"


def test_offered_only_where_exact():
    base = dict(add_params(0.02, 0.01, 0.03), input1_offset=3, input2_offset=-7, output_offset=-128, act_min=-128,
                act_max=127)
    f = add_fast_params(base)
    assert f is not None and not f["swap"] and not f["in2_half"]
    assert add_fast_params(dict(base, **add_params(0.01, 0.02, 0.03)))["swap"]  # input 2 has the larger scale
    assert add_fast_params(dict(base, **add_params(0.01, 0.01, 0.03)))["in2_half"]
    assert add_fast_params(dict(base, left_shift=19)) is None
    assert add_fast_params(dict(base, input1_mult=1 << 30, input1_shift=-1)) is None  # no input at exactly 1/2
    assert add_fast_params(dict(base, output_shift=0)) is None
    assert add_fast_params(dict(base, output_shift=-23)) is not None
    assert add_fast_params(dict(base, output_shift=-24)) is None  # 2^28 + 2^23 + 128 * 2^24 would leave int32
