"""The Helium pooling kernels == the numpy references (ops/pool.py) bit for bit under QEMU on mps3-an547:
tinyaot_max_pool_s8_mve (maxpool_s8) over channel counts 1..40 (16-lane blocks and predicated tails), padding on
each side, strides 1..3, clamps, inputs at -128/127, two batches, and CMSIS-NN's max pooling vectors
(tests/fixtures); tinyaot_avgpool_requant_s8_mve (avgpool_requant_s8) over channel counts 1..40, windows up to 256
taps (int16 sums) and past it (int32 sums), input offsets -128/128/127, output offsets -128/127, shifts of both
signs, inputs at -128/127 (the int16 extremes -32768 and 32512); and both files' plain C paths on the host under
ASan/UBSan. Bytes around each output are checked untouched."""
from __future__ import annotations

import numpy as np

from tinyaot.core import fixedpoint as fp
from tinyaot.ops.pool import avgpool_requant_s8, maxpool_s8

from mve.mve_harness import c_array, needs_arm, run_program
from mve.mve_host import run_host
from ops.test_cmsis_nn_vectors import _arrays, _cases

GUARD = 16
FILES = ["tinyaot_max_pool_s8_mve.c", "tinyaot_avgpool_s8_mve.c"]


def _out(size, k, s, lo, hi):
    return (size + lo + hi - k) // s + 1


def max_case(rng, c, k=(3, 3), s=(2, 2), pads=(1, 1, 1, 1), hw=(7, 6), n=1, extreme=False, act=(-128, 127)):
    x = (rng.choice(np.array([-128, 127], np.int8), (n, *hw, c)) if extreme
         else rng.integers(-128, 128, (n, *hw, c)).astype(np.int8))
    oh, ow = _out(hw[0], k[0], s[0], pads[0], pads[2]), _out(hw[1], k[1], s[1], pads[1], pads[3])
    want = maxpool_s8(x, kernel_hw=k, stride_hw=s, pad_top_left=pads[:2], output_hw=(oh, ow), act_min=act[0],
                      act_max=act[1])
    return dict(kind="max", x=x, k=k, s=s, pads=pads, act=act, want=want)


def avg_case(rng, c, k=(3, 3), s=(1, 1), hw=(5, 5), n=1, extreme=False, in_off=None, scale=None):
    x = (rng.choice(np.array([-128, 127], np.int8), (n, *hw, c)) if extreme
         else rng.integers(-128, 128, (n, *hw, c)).astype(np.int8))
    if extreme == "min":
        x[:] = -128
    elif extreme == "max":
        x[:] = 127
    oh, ow = _out(hw[0], k[0], s[0], 0, 0), _out(hw[1], k[1], s[1], 0, 0)
    in_off = int(rng.integers(-128, 129)) if in_off is None else in_off
    mult, shift = fp.quantize_multiplier(scale if scale is not None else rng.uniform(0.3, 2.0) / (k[0] * k[1]))
    out_off = int(rng.choice([-128, 127, 5]))
    act = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
    want = avgpool_requant_s8(x, kernel_hw=k, stride_hw=s, output_hw=(oh, ow), input_offset=in_off,
                              output_offset=out_off, mult=mult, shift=shift, act_min=act[0], act_max=act[1])
    return dict(kind="avg", x=x, k=k, s=s, pads=(0, 0, 0, 0), act=act, want=want, in_off=in_off, out_off=out_off,
                mult=mult, shift=shift)


def cases() -> list[dict]:
    rng = np.random.default_rng(99)
    out = []
    for c in list(range(1, 18)) + [31, 32, 33, 40]:
        out.append(max_case(rng, c, extreme=c % 3 == 0, act=(-128, 127) if c % 4 else (-20, 90)))
        out.append(avg_case(rng, c, extreme=c % 3 == 0, in_off=[-128, 128, 127, 0][c % 4]))
    for pads in [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (2, 2, 2, 2)]:
        out.append(max_case(rng, 20, k=(3, 3), s=(1, 1), pads=pads, hw=(5, 4)))
    out.append(max_case(rng, 24, k=(2, 3), s=(3, 2), pads=(0, 1, 1, 1), hw=(7, 7), n=2))
    # windows of 256 taps (the largest with int16 sums, at both extremes) and of 272 (int32 sums)
    for ext in ("min", "max"):
        out.append(avg_case(rng, 24, k=(16, 16), hw=(16, 16), extreme=ext, in_off=128 if ext == "min" else -128,
                            scale=1.0 / 256))
    out.append(avg_case(rng, 20, k=(17, 16), hw=(17, 16), extreme="min", in_off=128, scale=1.0 / 272))
    out.append(avg_case(rng, 8, k=(2, 2), s=(2, 2), hw=(6, 6), n=2, scale=3.0))  # a positive shift
    out.append(avg_case(rng, 64, k=(5, 25), hw=(5, 25), in_off=-127))  # kws_dscnn's global pool, smaller
    for c in _cases(("maxpool",)):
        p, arr = c["params"], _arrays(c)
        pads = (*p["pad_top_left"], *p["pad_bottom_right"])
        out.append(dict(kind="max", x=arr["input"], k=tuple(p["kernel_hw"]), s=tuple(p["stride_hw"]), pads=pads,
                        act=(p["activation_min"], p["activation_max"]), want=arr["expected"]))
    return out


PROTOS = """
int tinyaot_max_pool_s8_mve(const tinyaot_context *ctx, const tinyaot_pool_params *pool_params,
                            const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,
                            const tinyaot_dims *output_dims, int8_t *output);
int tinyaot_avgpool_requant_s8_mve(const tinyaot_pool_params *pool_params, const tinyaot_dims *input_dims,
                                   const int8_t *input, const tinyaot_dims *filter_dims,
                                   const tinyaot_dims *output_dims, int32_t input_offset, int32_t output_offset,
                                   int32_t mult, int32_t shift, int8_t *output);
"""


def program(cs) -> str:
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_hal.h"\n#include "tinyaot_nn.h"\n', PROTOS,
             f"static int8_t buf[{max(c['want'].size for c in cs) + 2 * GUARD}];\n"]
    calls = []
    for i, c in enumerate(cs):
        p = f"c{i}_"
        n, h, w, ch = c["x"].shape
        _, oh, ow, _ = c["want"].shape
        parts += [c_array(p + "x", c["x"], "int8_t"), c_array(p + "want", c["want"], "int8_t")]
        if c["kind"] == "max":
            call = (f"tinyaot_max_pool_s8_mve(NULL, &prm, &in_d, {p}x, &f_d, &o_d, buf + {GUARD})")
        else:
            call = (f"tinyaot_avgpool_requant_s8_mve(&prm, &in_d, {p}x, &f_d, &o_d, {c['in_off']}, {c['out_off']}, "
                    f"{c['mult']}, {c['shift']}, buf + {GUARD})")
        size = c["want"].size
        parts.append(
            f"static int case_{i}(void)\n{{\n"
            f"    static const tinyaot_pool_params prm = {{.stride = {{{c['s'][0]}, {c['s'][1]}}}, "
            f".padding = {{{c['pads'][0]}, {c['pads'][1]}}}, .activation = {{{c['act'][0]}, {c['act'][1]}}}}};\n"
            f"    static const tinyaot_dims in_d = {{{n}, {h}, {w}, {ch}}}, f_d = {{1, {c['k'][0]}, {c['k'][1]}, 1}}, "
            f"o_d = {{{n}, {oh}, {ow}, {ch}}};\n"
            f"    int i, bad = 0;\n    memset(buf, 0x5A, sizeof buf);\n"
            f"    __asm__ volatile(\"\" : : \"r\"(buf) : \"memory\");\n"
            f"    if ({call} != 0) return 1000;\n"
            f"    for (i = 0; i < {size}; i++) bad += buf[{GUARD} + i] != {p}want[i];\n"
            f"    for (i = 0; i < {GUARD}; i++) bad += (buf[i] != 0x5A) + (buf[{GUARD + size} + i] != 0x5A);\n"
            f"    return bad;\n}}\n")
        calls.append(f"    if (case_{i}()) {{ tinyaot_hal_puts(\"FAIL case \"); tinyaot_hal_put_uint({i}); "
                     f"tinyaot_hal_puts(\"\\n\"); fails++; }}\n")
    parts.append("int main(void)\n{\n    int fails = 0;\n" + "".join(calls) +
                 '    tinyaot_hal_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


@needs_arm
def test_mve_pooling_matches_reference_under_qemu(tmp_path):
    cs = cases()
    assert {c["x"].shape[3] % 16 for c in cs if c["kind"] == "max"} == set(range(16))
    assert any(c["k"][0] * c["k"][1] > 256 for c in cs) and any(c.get("shift", 0) > 0 for c in cs)
    res = run_program(tmp_path, program(cs), FILES)
    assert res.exit_code == 0 and "ALL PASSED" in res.stderr, (res.exit_code, res.stderr[-2000:])


def test_plain_c_paths_match_reference_on_the_host_under_sanitizers(tmp_path):
    res = run_host(tmp_path, program(cases()), FILES)
    assert res.returncode == 0 and "ALL PASSED" in res.stderr, res.stderr[-2000:]
