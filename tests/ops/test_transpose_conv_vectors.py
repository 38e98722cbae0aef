"""The int8 transpose conv against CMSIS-NN's 8 transpose_conv vectors, in all its implementations (the manner of
test_cmsis_nn_vectors.py, which lists this kind as adopted here):
  (a) the numpy reference (tinyaot.ops.conv_transpose.transpose_conv2d_s8) == expected;
  (b) templates/kernels/tinyaot_transpose_conv_s8.c compiled for the host, through ctypes, == expected;
  (c) the same C on Cortex-M0 (plain path) and Cortex-M4 / M55 (SMLAD path) under qemu-system-arm == expected.
Randomised layers beyond the vectors (odd channel counts, batches, output padding rows, clamps, positive shifts)
check the reference and the host C against each other and go to QEMU too.

`pad_with_offset_hw` in index.json is TFLite's end padding (its pad plus the odd-padding offset): it only fixes the
output size, out = (in - 1) * stride + kernel - pad_top_left - pad_with_offset, except when the output is larger
than the full transpose conv, where TFLite clamps the negative padding to 0 and the extra rows get the bias only
(ONNX's output_padding). The kernel takes the top/left pads and the output size, so it needs nothing else.
"""
from __future__ import annotations

import ctypes
import json
from functools import lru_cache

import numpy as np
import pytest

from tinyaot.core import fixedpoint as fp
from tinyaot.ops.conv_transpose import transpose_conv2d_s8, transpose_conv_out_size

from shared_data import CMSIS_NN
from spatial_models import KERNELS_DIR, Activation, ConvParams, Dims, PerChannelQuant, Tile, host_kernels, ptr, ref

VECTORS_DIR = CMSIS_NN
KERNEL = KERNELS_DIR / "tinyaot_transpose_conv_s8.c"
SENTINEL = 99  # outputs start as this, so a store the kernel skipped is caught


@lru_cache(maxsize=1)
def _cases() -> list[dict]:
    index = json.loads((VECTORS_DIR / "index.json").read_text())
    return [c for c in index["cases"] if c["kind"] == "transpose_conv2d"]


def _arrays(case: dict) -> dict:
    if "arrays_inline" in case:
        return case["arrays_inline"]
    with np.load(VECTORS_DIR / case["npz"]) as z:
        return {k: z[k] for k in z.files}


def _bias(case, a):
    """bias_is_null_or_zero cases ran with a NULL bias in CMSIS-NN: pass None to cover that path."""
    if case["params"]["bias_is_null_or_zero"]:
        assert not np.any(a["bias"])
        return None
    return a["bias"]


def run_reference(case: dict, a: dict) -> np.ndarray:
    p = case["params"]
    return transpose_conv2d_s8(a["input"], a["weights"], _bias(case, a), a["output_mult"], a["output_shift"],
                               input_offset=p["input_offset"], output_offset=p["output_offset"],
                               stride_hw=p["stride_hw"], pad_top_left=p["pad_top_left"],
                               output_hw=p["output_hwc"][:2], act_min=p["activation_min"],
                               act_max=p["activation_max"])


@pytest.fixture(scope="module")
def lib():
    dll = host_kernels(KERNEL.name)
    dll.tinyaot_transpose_conv_s8.restype = ctypes.c_int
    dll.tinyaot_transpose_conv_s8.argtypes = [ctypes.c_void_p] * 11
    dll.tinyaot_transpose_conv_s8_get_buffer_size.restype = ctypes.c_int32
    dll.tinyaot_transpose_conv_s8_get_buffer_size.argtypes = [ctypes.c_void_p] * 2
    return dll


def run_c(lib, case: dict, a: dict) -> np.ndarray:
    p = case["params"]
    x = np.array(a["input"], np.int8)
    w = np.array(a["weights"], np.int8)
    bias = _bias(case, a)
    b = None if bias is None else np.array(bias, np.int32)
    mult, shift = np.array(a["output_mult"], np.int32), np.array(a["output_shift"], np.int32)
    n, h, wd, c = x.shape
    oh, ow, oc = p["output_hwc"]
    out = np.full((n, oh, ow, oc), SENTINEL, np.int8)
    params = ConvParams(p["input_offset"], p["output_offset"], Tile(*p["stride_hw"]), Tile(*p["pad_top_left"]),
                        Tile(1, 1), Activation(p["activation_min"], p["activation_max"]))
    q = PerChannelQuant(mult.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                        shift.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    in_d, f_d, b_d, o_d = Dims(n, h, wd, c), Dims(*w.shape), Dims(1, 1, 1, oc), Dims(n, oh, ow, oc)
    assert lib.tinyaot_transpose_conv_s8_get_buffer_size(ref(in_d), ref(f_d)) == 0
    rc = lib.tinyaot_transpose_conv_s8(None, ref(params), ref(q), ref(in_d), ptr(x), ref(f_d), ptr(w), ref(b_d), ptr(b),
                                       ref(o_d), ptr(out))
    assert rc == 0
    return out


def _assert_same(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{what}: {len(bad)} of {got.size} differ; first at {tuple(bad[0])}: got "
                           f"{got[tuple(bad[0])]}, want {want[tuple(bad[0])]}")


_ids = [c["id"] for c in _cases()]


def test_all_eight_vectors_are_here():
    assert len(_cases()) == 8


@pytest.mark.parametrize("case", _cases(), ids=_ids)
def test_reference_matches_vector(case):
    a = _arrays(case)
    _assert_same(run_reference(case, a), a["expected"], f"reference {case['id']}")


@pytest.mark.parametrize("case", _cases(), ids=_ids)
def test_host_c_kernel_matches_vector(lib, case):
    a = _arrays(case)
    _assert_same(run_c(lib, case, a), a["expected"], f"host C {case['id']}")


@pytest.mark.parametrize("case", _cases(), ids=_ids)
def test_pad_with_offset_is_the_end_padding(case):
    p = case["params"]
    for axis in range(2):
        full = (p["input_hwc"][axis] - 1) * p["stride_hw"][axis] + p["kernel_hw"][axis]
        end = full - p["pad_top_left"][axis] - p["output_hwc"][axis]
        if end >= 0:
            assert p["pad_with_offset_hw"][axis] == end
            assert transpose_conv_out_size(p["input_hwc"][axis], p["kernel_hw"][axis], p["stride_hw"][axis],
                                           p["pad_top_left"][axis], end) == p["output_hwc"][axis]
        else:  # output past the full transpose conv: TFLite's negative padding clamped to 0
            assert p["pad_with_offset_hw"][axis] == 0 and p["pad_top_left"][axis] == 0


def test_vectors_cover_output_rows_that_only_get_the_bias():
    """Two vectors (reverse_transpose_conv_2, transpose_conv_3) have outputs larger than the full transpose conv:
    the case ONNX calls output_padding. Their expected values there are requantized biases alone."""
    wider = [c["id"] for c in _cases() if any(
        c["params"]["output_hwc"][i] > (c["params"]["input_hwc"][i] - 1) * c["params"]["stride_hw"][i]
        + c["params"]["kernel_hw"][i] for i in range(2))]
    assert sorted(wider) == ["transpose_conv2d__reverse_transpose_conv_2", "transpose_conv2d__transpose_conv_3"]


def _random_case(rng, idx: int) -> dict:
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pt, pl = int(rng.integers(0, kh)), int(rng.integers(0, kw))
    cin, cout = int(rng.integers(1, 9)), int(rng.integers(1, 8))
    # the end pad may be negative by up to stride - 1 (ONNX output_padding rows that only get the bias)
    pb, pr = int(rng.integers(-(sh - 1), kh)), int(rng.integers(-(sw - 1), kw))
    oh = max(1, (h - 1) * sh + kh - pt - pb)
    ow = max(1, (w - 1) * sw + kw - pl - pr)
    scales = rng.uniform(2e-4, 2e-2, cout)
    scales[rng.random(cout) < 0.2] = rng.uniform(0.5, 3.0)  # now and then a positive shift
    mult, shift = fp.quantize_multiplier_array(scales)
    lo, hi = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
    a = {"input": rng.integers(-128, 128, (n, h, w, cin), dtype=np.int8),
         "weights": rng.integers(-127, 128, (cout, kh, kw, cin), dtype=np.int8),
         "bias": rng.integers(-4000, 4000, cout).astype(np.int32), "output_mult": mult, "output_shift": shift}
    null_bias = bool(rng.random() < 0.25)
    if null_bias:
        a["bias"][:] = 0
    p = {"input_offset": int(rng.integers(-127, 129)), "output_offset": int(rng.integers(-128, 128)),
         "stride_hw": [sh, sw], "pad_top_left": [pt, pl], "output_hwc": [oh, ow, cout], "activation_min": lo,
         "activation_max": hi, "bias_is_null_or_zero": null_bias, "input_hwc": [h, w, cin], "kernel_hw": [kh, kw]}
    case = {"id": f"random_transpose_conv_{idx}", "kind": "transpose_conv2d", "params": p, "arrays_inline": a}
    a["expected"] = run_reference(case, a)
    return case


@lru_cache(maxsize=1)
def _random_cases() -> tuple:
    rng = np.random.default_rng(2024)
    return tuple(_random_case(rng, i) for i in range(40))


def test_host_c_matches_reference_on_random_layers(lib):
    for case in _random_cases():
        _assert_same(run_c(lib, case, _arrays(case)), _arrays(case)["expected"], f"{case['id']} {case['params']}")


def test_reference_equals_a_direct_sum_of_contributions():
    """The scatter reference against the definition written out loop by loop, on small random layers."""
    for case in _random_cases()[:12]:
        a, p = _arrays(case), case["params"]
        x = a["input"].astype(np.int64) + p["input_offset"]
        w = a["weights"].astype(np.int64)
        n, h, wd, cin = x.shape
        oh, ow, cout = p["output_hwc"]
        acc = np.zeros((n, oh, ow, cout), np.int64) + a["bias"].astype(np.int64)
        for iy in range(h):
            for ix in range(wd):
                for ky in range(w.shape[1]):
                    for kx in range(w.shape[2]):
                        oy = iy * p["stride_hw"][0] + ky - p["pad_top_left"][0]
                        ox = ix * p["stride_hw"][1] + kx - p["pad_top_left"][1]
                        if 0 <= oy < oh and 0 <= ox < ow:
                            acc[:, oy, ox, :] += x[:, iy, ix, :] @ w[:, ky, kx, :].T
        want = fp.requantize_to_int8(acc, a["output_mult"], a["output_shift"], p["output_offset"],
                                     p["activation_min"], p["activation_max"])
        _assert_same(a["expected"], want, case["id"])


def _c_array(name, arr, ctype):
    vals = ",".join(str(int(v)) for v in np.asarray(arr).ravel()) or "0"
    return f"static const {ctype} {name}[{max(np.asarray(arr).size, 1)}] = {{{vals}}};\n"


def _firmware_source(cases) -> str:
    out_size = max(_arrays(c)["expected"].size for c in cases)
    parts = ['#include <stddef.h>\n#include "tinyaot_nn.h"\nvoid harness_puts(const char *s);\n',
             f"static int8_t out_buf[{out_size}];\n"]
    calls = []
    for i, case in enumerate(cases):
        a, p = _arrays(case), case["params"]
        pre = f"c{i}_"
        bias = _bias(case, a)
        parts += [_c_array(pre + "in", a["input"], "int8_t"), _c_array(pre + "w", a["weights"], "int8_t"),
                  _c_array(pre + "mult", a["output_mult"], "int32_t"),
                  _c_array(pre + "shift", a["output_shift"], "int32_t"), _c_array(pre + "exp", a["expected"], "int8_t")]
        if bias is not None:
            parts.append(_c_array(pre + "bias", bias, "int32_t"))
        n, h, w, c = a["input"].shape
        oh, ow, oc = p["output_hwc"]
        fd = ", ".join(map(str, a["weights"].shape))
        parts.append(
            f"static int case_{i}(void)\n{{\n    int i, bad = 0;\n"
            f"    const tinyaot_per_channel_quant_params q = {{{pre}mult, {pre}shift}};\n"
            f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {c}}}, f_d = {{{fd}}}, b_d = {{1, 1, 1, {oc}}}, "
            f"o_d = {{{n}, {oh}, {ow}, {oc}}};\n"
            f"    const tinyaot_conv_params prm = {{{p['input_offset']}, {p['output_offset']}, "
            f"{{{p['stride_hw'][0]}, {p['stride_hw'][1]}}}, {{{p['pad_top_left'][0]}, {p['pad_top_left'][1]}}}, "
            f"{{1, 1}}, {{{p['activation_min']}, {p['activation_max']}}}}};\n"
            f"    for (i = 0; i < {a['expected'].size}; i++) out_buf[i] = 99;\n"
            f"    if (tinyaot_transpose_conv_s8(NULL, &prm, &q, &in_d, {pre}in, &f_d, {pre}w, &b_d, "
            f"{pre + 'bias' if bias is not None else 'NULL'}, &o_d, out_buf) != 0) return -1;\n"
            f"    for (i = 0; i < {a['expected'].size}; i++) bad += out_buf[i] != {pre}exp[i];\n"
            f"    return bad;\n}}\n")
        calls.append(f'    if (case_{i}() != 0) {{ harness_puts("FAIL {case["id"]}\\n"); fails++; }}\n')
    parts.append("int main(void)\n{\n    int fails = 0;\n")
    parts += calls
    parts.append('    harness_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


@pytest.mark.parametrize("cpu", ["cortex-m0", "cortex-m4", "cortex-m55"])
def test_cortex_m_kernel_matches_vectors_under_qemu(arm_runner, cpu):
    cases = list(_cases()) + list(_random_cases()[:15])
    elf = arm_runner.build(cpu, "transpose_conv", _firmware_source(cases), [KERNEL], [KERNELS_DIR],
                           ("-Wall", "-Wextra", "-Werror"))
    rc, out = arm_runner.run(cpu, elf)
    assert "ALL PASSED" in out and rc == 0, f"{cpu}: {len(cases)} cases, exit {rc}:\n{out[-3000:]}"
