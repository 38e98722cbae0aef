"""tinyaot_elementwise_add_s8_mve (Helium residual add) == the numpy reference (ops/add.py elementwise_add_s8) bit
for bit under QEMU on mps3-an547: lengths 1..17 and longer (the four-lane loop and every predicated tail), inputs
at -128/127, input offsets -128, 0, 127, 128, output offsets -128/127, scales giving every specialised loop (each
input halved or shifted right) and the general one (a positive output shift; an input at shift 0 not halved),
activation clamps, in place over either input, bytes past the end untouched; CMSIS-NN's add vector
(tests/fixtures) too; and the file's plain C path on the host under ASan/UBSan."""
from __future__ import annotations

import numpy as np

from tinyaot.core import fixedpoint as fp
from tinyaot.ops.add import add_params, elementwise_add_s8

from mve.mve_harness import c_array, needs_arm, run_program
from mve.mve_host import run_host
from ops.test_cmsis_nn_vectors import _add_kwargs, _arrays, _cases

GUARD = 8
KEYS = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift", "left_shift",
        "output_offset", "output_mult", "output_shift", "act_min", "act_max")


def make_case(rng, n, s1, s2, so, in_place=0, extreme=False, offs=None):
    if extreme:
        a = rng.choice(np.array([-128, 127], np.int8), n)
        b = rng.choice(np.array([-128, 127], np.int8), n)
    else:
        a = rng.integers(-128, 128, n).astype(np.int8)
        b = rng.integers(-128, 128, n).astype(np.int8)
    p = add_params(s1, s2, so)
    o1, o2 = offs if offs is not None else (int(rng.integers(-128, 129)), int(rng.integers(-128, 129)))
    act = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
    kw = dict(input1_offset=o1, input2_offset=o2, output_offset=int(rng.choice([-128, 127, 3])), act_min=act[0],
              act_max=act[1], **p)
    return dict(a=a, b=b, kw=kw, in_place=in_place, want=elementwise_add_s8(a, b, **kw))


def cases() -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    scales = [(0.05, 0.02, 0.06), (0.02, 0.05, 0.06), (0.03, 0.03, 0.05), (0.5, 0.25, 1e-6), (0.1, 0.0999, 0.2)]
    # (TFLite's preparation: the larger-scale input at multiplier 1/2 shift 0, i.e. halved; equal scales: both)
    for n in list(range(1, 18)) + [64, 101]:
        s = scales[n % len(scales)]
        out.append(make_case(rng, n, *s, in_place=n % 3, extreme=n % 4 == 0,
                             offs=[(-128, 128), (128, -128), (127, 0), (0, 127), (-128, -128)][n % 5]))
    for s in scales:
        out.append(make_case(rng, 37, *s))
    # both inputs shifted right (TFLite's preparation always leaves one at multiplier 1/2, shift 0; the kernel
    # takes any parameters)
    for n in (5, 40):
        c = make_case(rng, n, 0.05, 0.02, 0.06)
        for k, v in (("input1", 0.3), ("input2", 0.2)):
            c["kw"][k + "_mult"], c["kw"][k + "_shift"] = fp.quantize_multiplier(v)
        c["want"] = elementwise_add_s8(c["a"], c["b"], **c["kw"])
        out.append(c)
    # an input with shift 0 but a multiplier other than 1/2: the general loop
    c = make_case(rng, 23, 0.05, 0.02, 0.06)
    c["kw"]["input2_mult"], c["kw"]["input2_shift"] = fp.quantize_multiplier(0.75)
    c["want"] = elementwise_add_s8(c["a"], c["b"], **c["kw"])
    out.append(c)
    # CMSIS-NN's add vector: its own parameters, run as given
    for c in _cases(("add",)):
        arr = _arrays(c)
        kw = _add_kwargs(c["params"])
        out.append(dict(a=arr["input1"], b=arr["input2"], kw=kw, in_place=0, want=arr["expected"]))
        assert np.array_equal(elementwise_add_s8(arr["input1"], arr["input2"], **kw), arr["expected"])
    return out


def program(cs) -> str:
    parts = ['#include <string.h>\n#include "tinyaot_hal.h"\n#include "tinyaot_nn.h"\n',
             f"static int8_t buf[{max(c['want'].size for c in cs) + GUARD}];\n"]
    calls = []
    for i, c in enumerate(cs):
        p = f"c{i}_"
        n = c["want"].size
        k = c["kw"]
        parts += [c_array(p + "a", c["a"], "int8_t"), c_array(p + "b", c["b"], "int8_t"),
                  c_array(p + "want", c["want"], "int8_t")]
        # in_place 1: the output over input 1 (buf holds a copy of it), 2: over input 2
        src = {0: "", 1: f"memcpy(buf, {p}a, {n});", 2: f"memcpy(buf, {p}b, {n});"}[c["in_place"]]
        in1 = "buf" if c["in_place"] == 1 else p + "a"
        in2 = "buf" if c["in_place"] == 2 else p + "b"
        args = ", ".join(str(k[key]) for key in KEYS[:7])
        parts.append(
            f"static int case_{i}(void)\n{{\n    int i, bad = 0;\n    memset(buf, 0x5A, sizeof buf);\n    {src}\n"
            f"    __asm__ volatile(\"\" : : \"r\"(buf) : \"memory\");\n"
            f"    if (tinyaot_elementwise_add_s8_mve({in1}, {in2}, {args}, buf, {k['output_offset']}, "
            f"{k['output_mult']}, {k['output_shift']}, {k['act_min']}, {k['act_max']}, {n}) != 0) return 1000;\n"
            f"    for (i = 0; i < {n}; i++) bad += buf[i] != {p}want[i];\n"
            f"    for (i = {n}; i < {n + GUARD}; i++) bad += buf[i] != 0x5A;\n    return bad;\n}}\n")
        calls.append(f"    if (case_{i}()) {{ tinyaot_hal_puts(\"FAIL case \"); tinyaot_hal_put_uint({i}); "
                     f"tinyaot_hal_puts(\"\\n\"); fails++; }}\n")
    parts.append("int main(void)\n{\n    int fails = 0;\n" + "".join(calls) +
                 '    tinyaot_hal_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


def _paths_covered(cs):
    """Which loop each case runs (as the kernel decides): 'general' or the specialised (mode1, mode2) one."""
    kinds = set()
    for c in cs:
        k = c["kw"]
        modes = ["half" if (k[f"input{j}_mult"], k[f"input{j}_shift"]) == (1 << 30, 0) and k["left_shift"] >= 1
                 else "shifted" if k[f"input{j}_shift"] < 0 else None for j in (1, 2)]
        kinds.add(tuple(modes) if None not in modes and k["output_shift"] < 0 else "general")
    return kinds


@needs_arm
def test_mve_add_matches_reference_under_qemu(tmp_path):
    cs = cases()
    assert _paths_covered(cs) == {"general", ("half", "shifted"), ("shifted", "half"), ("half", "half"),
                                  ("shifted", "shifted")}
    res = run_program(tmp_path, program(cs), ["tinyaot_elementwise_add_s8_mve.c"])
    assert res.exit_code == 0 and "ALL PASSED" in res.stderr, (res.exit_code, res.stderr[-2000:])


def test_plain_c_path_matches_reference_on_the_host_under_sanitizers(tmp_path):
    res = run_host(tmp_path, program(cases()), ["tinyaot_elementwise_add_s8_mve.c"])
    assert res.returncode == 0 and "ALL PASSED" in res.stderr, res.stderr[-2000:]
