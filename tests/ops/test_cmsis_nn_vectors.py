"""The int8 kernels against the CMSIS-NN conformance vectors, in all their implementations.

For every case of the implemented kinds in tests/fixtures/cmsis_nn (CMSIS-NN's unit-test vectors):
  (a) the numpy reference (tinyaot.ops.*) == expected, bit for bit;
  (b) the C kernel (templates/kernels) compiled for the host with compile_shared, called through ctypes, == expected
      (and, for add and softmax, also when run in place);
  (c) the same C compiled for Cortex-M cores and run under qemu-system-arm == expected: the plain C path on M0
      and the SXTB16/SMLAD DSP path on M4 and M55; conv both without scratch and with its im2col scratch.
Randomised layers beyond the vectors (odd channel counts, groups, every clipping case, nonzero filter offsets,
positive shifts) check the three implementations against each other. Kinds not implemented yet are listed as
skips with the reason. The fixed-point helpers, the parameter preparation (quantize_multiplier, softmax_params,
add_params) and the host compiler cache have their own tests at the end.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from kernel_structs import (VP, Activation, Context, ConvParams, Dims, DwConvParams, FcParams, PoolParams, Tile,
                            i32)

from tinyaot.toolchain.host import compile_shared
from tinyaot.errors import TinyaotError
from tinyaot.core import fixedpoint as fp
from tinyaot.ops.add import add_params, elementwise_add_s8
from tinyaot.ops.conv import conv2d_s8, conv2d_scratch_bytes, depthwise_conv2d_s8
from tinyaot.ops.fully_connected import fully_connected_s8
from tinyaot.ops.pool import avgpool_s8, maxpool_s8
from tinyaot.ops.softmax import softmax_s8
from tinyaot.paths import TEMPLATES

from shared_data import CMSIS_NN

VECTORS_DIR = CMSIS_NN
KERNELS_DIR = TEMPLATES / "kernels"
# The kernels these tests cover (other kernels in the folder have their own tests; all must build warning-free).
KERNEL_SOURCES = [KERNELS_DIR / name for name in (
    "tinyaot_convolve_s8.c", "tinyaot_depthwise_conv_s8.c", "tinyaot_fully_connected_s8.c", "tinyaot_avgpool_s8.c",
    "tinyaot_max_pool_s8.c", "tinyaot_elementwise_add_s8.c", "tinyaot_softmax_s8.c")]
ALL_KERNEL_SOURCES = sorted(KERNELS_DIR.glob("*.c"))

IMPLEMENTED_KINDS = ("conv2d", "depthwise_conv2d", "fully_connected", "avgpool", "maxpool", "add", "softmax")
NOT_IMPLEMENTED = {
    "mul": "checked in tests/ops/test_elementwise_kernels.py (reference and host C of tinyaot_elementwise_binary_s8)",
    "pad": "checked in tests/ops/test_elementwise_kernels.py (reference and host C of tinyaot_pad_s8)",
    "transpose": "transpose: the issue-2 models stay NHWC after import, no layout change at run time; issue 3",
    "maximum_minimum": "elementwise maximum/minimum is not used by the issue-2 models; arrives with issue 3",
    "softmax_s8_s16": "softmax with int16 output: tinyaot emits the int8 softmax (scale 1/256, zp -128) only; issue 3",
}


# ====================================================================================================================
# The vector suite
# ====================================================================================================================
@lru_cache(maxsize=1)
def _index() -> dict:
    path = VECTORS_DIR / "index.json"
    if not path.is_file():
        return {"cases": []}
    return json.loads(path.read_text())


def _cases(kinds) -> list[dict]:
    return [c for c in _index()["cases"] if c["kind"] in kinds]


def _arrays(case: dict) -> dict[str, np.ndarray]:
    if "arrays_inline" in case:  # randomised cases carry their arrays
        return case["arrays_inline"]
    with np.load(VECTORS_DIR / case["npz"]) as z:
        return {k: z[k] for k in z.files}


IMPLEMENTED_CASES = _cases(IMPLEMENTED_KINDS)
# Kinds another file adopts in this file's manner (reference, host C and Cortex-M C under QEMU, all ==).
TESTED_ELSEWHERE = {"transpose_conv2d": "tests/ops/test_transpose_conv_vectors.py",
                    "batch_matmul": "tests/ops/test_batch_matmul.py"}
UNIMPLEMENTED_CASES = [c for c in _index()["cases"] if c["kind"] not in (*IMPLEMENTED_KINDS, *TESTED_ELSEWHERE)]


def test_vector_suite_is_present_and_fully_classified():
    assert (VECTORS_DIR / "index.json").is_file(), f"conformance vectors missing at {VECTORS_DIR}"
    index = _index()
    assert len(index["cases"]) == index["n_cases"] == 108
    kinds = {c["kind"] for c in index["cases"]}
    assert kinds == set(IMPLEMENTED_KINDS) | set(NOT_IMPLEMENTED) | set(TESTED_ELSEWHERE), \
        "a kind is neither implemented nor skipped"
    assert len(IMPLEMENTED_CASES) == 67


def _fc_quant(case: dict, a: dict):
    """Per-tensor FC cases store their one multiplier repeated per channel: pass one value (the per-tensor path)."""
    if case["params"]["per_channel"]:
        return a["output_mult"], a["output_shift"]
    assert np.all(a["output_mult"] == a["output_mult"][0]) and np.all(a["output_shift"] == a["output_shift"][0])
    return a["output_mult"][:1], a["output_shift"][:1]


def _bias(case: dict, a: dict):
    """Cases flagged bias_is_null_or_zero ran with a NULL bias in CMSIS-NN; pass None (NULL) to cover that path."""
    if case["params"].get("bias_is_null_or_zero"):
        assert not np.any(a["bias"])
        return None
    return a["bias"]


def _add_kwargs(p: dict) -> dict:
    return dict(input1_offset=p["input1_offset"], input1_mult=p["input1_mult"], input1_shift=p["input1_shift"],
                input2_offset=p["input2_offset"], input2_mult=p["input2_mult"], input2_shift=p["input2_shift"],
                left_shift=p["left_shift"], output_offset=p["output_offset"], output_mult=p["output_mult"],
                output_shift=p["output_shift"], act_min=p["activation_min"], act_max=p["activation_max"])


def run_reference(case: dict, a: dict) -> np.ndarray:
    k, p = case["kind"], case["params"]
    if k == "conv2d":
        return conv2d_s8(a["input"], a["weights"], _bias(case, a), a["output_mult"], a["output_shift"],
                         input_offset=p["input_offset"], output_offset=p["output_offset"], stride_hw=p["stride_hw"],
                         pad_top_left=p["pad_top_left"], dilation_hw=p["dilation_hw"],
                         output_hw=p["output_hwc"][:2], act_min=p["activation_min"], act_max=p["activation_max"],
                         groups=p["groups"])
    if k == "depthwise_conv2d":
        return depthwise_conv2d_s8(a["input"], a["weights"], _bias(case, a), a["output_mult"], a["output_shift"],
                                   input_offset=p["input_offset"], output_offset=p["output_offset"],
                                   ch_mult=p["ch_mult"], stride_hw=p["stride_hw"], pad_top_left=p["pad_top_left"],
                                   dilation_hw=p["dilation_hw"], output_hw=p["output_hwc"][:2],
                                   act_min=p["activation_min"], act_max=p["activation_max"])
    if k == "fully_connected":
        m, s = _fc_quant(case, a)
        return fully_connected_s8(a["input"], a["weights"], _bias(case, a), m, s, input_offset=p["input_offset"],
                                  filter_offset=p["filter_offset"], output_offset=p["output_offset"],
                                  act_min=p["activation_min"], act_max=p["activation_max"])
    if k in ("avgpool", "maxpool"):
        fn = avgpool_s8 if k == "avgpool" else maxpool_s8
        return fn(a["input"], kernel_hw=p["kernel_hw"], stride_hw=p["stride_hw"], pad_top_left=p["pad_top_left"],
                  output_hw=p["output_hwc"][:2], act_min=p["activation_min"], act_max=p["activation_max"])
    if k == "add":
        return elementwise_add_s8(a["input1"], a["input2"], **_add_kwargs(p))
    if k == "softmax":
        return softmax_s8(a["input"], input_mult=p["input_mult"], input_left_shift=p["input_left_shift"],
                          diff_min=p["diff_min"])
    raise NotImplementedError(k)


# ====================================================================================================================
# The C kernels on the host, through ctypes (Structure twins of templates/kernels/tinyaot_nn_types.h)
# ====================================================================================================================
class PerChannelQuant(ctypes.Structure):
    _fields_ = [("multiplier", ctypes.POINTER(i32)), ("shift", ctypes.POINTER(i32))]



SIGNATURES = {
    "tinyaot_convolve_s8_get_buffer_size": (i32, [VP, VP]),
    "tinyaot_convolve_s8": (ctypes.c_int, [VP] * 11),
    "tinyaot_depthwise_conv_s8_get_buffer_size": (i32, [VP, VP]),
    "tinyaot_depthwise_conv_s8": (ctypes.c_int, [VP] * 11),
    "tinyaot_fully_connected_s8_get_buffer_size": (i32, [VP]),
    "tinyaot_fully_connected_s8": (ctypes.c_int, [VP, VP, VP, i32] + [VP] * 8),
    "tinyaot_avgpool_s8_get_buffer_size": (i32, [i32, i32]),
    "tinyaot_avgpool_s8": (ctypes.c_int, [VP] * 7),
    "tinyaot_max_pool_s8_get_buffer_size": (i32, [i32, i32]),
    "tinyaot_max_pool_s8": (ctypes.c_int, [VP] * 7),
    "tinyaot_elementwise_add_s8": (ctypes.c_int, [VP, VP] + [i32] * 7 + [VP] + [i32] * 6),
    "tinyaot_softmax_s8": (None, [VP, i32, i32, i32, i32, i32, VP]),
}


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    path = compile_shared(KERNEL_SOURCES, [KERNELS_DIR], extra_flags=("-Wpedantic", "-Werror"))
    dll = ctypes.CDLL(str(path))
    for name, (res, args) in SIGNATURES.items():
        fn = getattr(dll, name)
        fn.restype, fn.argtypes = res, args
    return dll


def _p(arr) -> VP:
    return None if arr is None else VP(arr.ctypes.data)


def _r(obj) -> VP:
    return ctypes.cast(ctypes.byref(obj), VP)


def _i8(x) -> np.ndarray:
    return np.array(x, dtype=np.int8, order="C")  # always a private copy


def _i32(x) -> np.ndarray:
    return np.array(x, dtype=np.int32, order="C")


SENTINEL = 99  # outputs start as this, so a store the kernel skipped is caught (99 is rarely a right answer)


def run_c(lib: ctypes.CDLL, case: dict, a: dict, *, in_place: bool = False, scratch: bool = False,
          scratch_misalign: int = 0, scratch_short: int = 0) -> np.ndarray:
    """The case's C kernel on the host. in_place (add, softmax): the output buffer is the (first) input buffer.
    scratch (conv): hand the kernel the buffer its _get_buffer_size asks for (the im2col path), else none;
    scratch_misalign / scratch_short move the buffer off 4-byte alignment / make it smaller (the kernel must then
    fall back to its in-place path)."""
    k, p = case["kind"], case["params"]
    ctx = Context(None, 0)
    scratch_buf = None
    if k in ("conv2d", "depthwise_conv2d"):
        x, w = _i8(a["input"]), _i8(a["weights"])
        bias = _bias(case, a)
        b = None if bias is None else _i32(bias)
        mult, shift = _i32(a["output_mult"]), _i32(a["output_shift"])
        n, h, wd, c = x.shape
        oh, ow, oc = p["output_hwc"]
        out = np.full((n, oh, ow, oc), SENTINEL, dtype=np.int8)
        common = dict(input_offset=p["input_offset"], output_offset=p["output_offset"], stride=Tile(*p["stride_hw"]),
                      padding=Tile(*p["pad_top_left"]), dilation=Tile(*p["dilation_hw"]),
                      activation=Activation(p["activation_min"], p["activation_max"]))
        q = PerChannelQuant(mult.ctypes.data_as(ctypes.POINTER(i32)), shift.ctypes.data_as(ctypes.POINTER(i32)))
        in_dims, f_dims, out_dims, b_dims = Dims(n, h, wd, c), Dims(*w.shape), Dims(n, oh, ow, oc), Dims(1, 1, 1, oc)
        if k == "conv2d":
            params = ConvParams(**common)
            size = lib.tinyaot_convolve_s8_get_buffer_size(_r(in_dims), _r(f_dims))
            assert size == conv2d_scratch_bytes(w.shape[1:3], w.shape[3])  # the planner's Python twin agrees
            if scratch:
                # 0x55 fill: stale scratch contents must not leak into results
                scratch_buf = np.full(size // 4 + 2, 0x55555555, dtype=np.uint32)
                ctx = Context(scratch_buf.ctypes.data + scratch_misalign, size - scratch_short)
            fn = lib.tinyaot_convolve_s8
        else:
            params = DwConvParams(**common, ch_mult=p["ch_mult"])
            assert lib.tinyaot_depthwise_conv_s8_get_buffer_size(_r(in_dims), _r(f_dims)) == 0
            fn = lib.tinyaot_depthwise_conv_s8
        rc = fn(_r(ctx), _r(params), _r(q), _r(in_dims), _p(x), _r(f_dims), _p(w), _r(b_dims), _p(b), _r(out_dims),
                _p(out))
        assert rc == 0
        return out
    if k == "fully_connected":
        x, w = _i8(a["input"]), _i8(a["weights"])
        bias = _bias(case, a)
        b = None if bias is None else _i32(bias)
        m, s = _fc_quant(case, a)
        mult, shift = _i32(m), _i32(s)
        batches, depth = x.shape
        out_ch = w.shape[0]
        out = np.full((batches, out_ch), SENTINEL, dtype=np.int8)
        params = FcParams(p["input_offset"], p["filter_offset"], p["output_offset"],
                          Activation(p["activation_min"], p["activation_max"]))
        q = PerChannelQuant(mult.ctypes.data_as(ctypes.POINTER(i32)), shift.ctypes.data_as(ctypes.POINTER(i32)))
        in_dims, f_dims = Dims(batches, 1, 1, depth), Dims(depth, 1, 1, out_ch)
        b_dims, out_dims = Dims(1, 1, 1, out_ch), Dims(batches, 1, 1, out_ch)
        assert lib.tinyaot_fully_connected_s8_get_buffer_size(_r(f_dims)) == 0
        rc = lib.tinyaot_fully_connected_s8(_r(ctx), _r(params), _r(q), int(p["per_channel"]), _r(in_dims), _p(x),
                                            _r(f_dims), _p(w), _r(b_dims), _p(b), _r(out_dims), _p(out))
        assert rc == 0
        return out
    if k in ("avgpool", "maxpool"):
        x = _i8(a["input"])
        n, h, wd, c = x.shape
        oh, ow, oc = p["output_hwc"]
        out = np.full((n, oh, ow, oc), SENTINEL, dtype=np.int8)
        params = PoolParams(Tile(*p["stride_hw"]), Tile(*p["pad_top_left"]),
                            Activation(p["activation_min"], p["activation_max"]))
        in_dims, f_dims, out_dims = Dims(n, h, wd, c), Dims(1, *p["kernel_hw"], 1), Dims(n, oh, ow, oc)
        name = "tinyaot_avgpool_s8" if k == "avgpool" else "tinyaot_max_pool_s8"
        assert getattr(lib, name + "_get_buffer_size")(ow, c) == 0
        rc = getattr(lib, name)(_r(ctx), _r(params), _r(in_dims), _p(x), _r(f_dims), _r(out_dims), _p(out))
        assert rc == 0
        return out
    if k == "add":
        x1, x2 = _i8(a["input1"]), _i8(a["input2"])
        out = x1 if in_place else np.full(x1.shape, SENTINEL, dtype=np.int8)
        rc = lib.tinyaot_elementwise_add_s8(_p(x1), _p(x2), p["input1_offset"], p["input1_mult"], p["input1_shift"],
                                            p["input2_offset"], p["input2_mult"], p["input2_shift"], p["left_shift"],
                                            _p(out), p["output_offset"], p["output_mult"], p["output_shift"],
                                            p["activation_min"], p["activation_max"], x1.size)
        assert rc == 0
        return out
    if k == "softmax":
        x = _i8(a["input"])
        out = x if in_place else np.full(x.shape, SENTINEL, dtype=np.int8)
        rows, row_size = x.shape
        lib.tinyaot_softmax_s8(_p(x), rows, row_size, p["input_mult"], p["input_left_shift"], p["diff_min"], _p(out))
        return out
    raise NotImplementedError(k)


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if not np.array_equal(got, want):
        diff = got.astype(np.int32) - want.astype(np.int32)
        bad = np.argwhere(diff != 0)
        raise AssertionError(f"{what}: {len(bad)} of {diff.size} elements differ (max |diff| {np.abs(diff).max()});"
                             f" first at {tuple(bad[0])}: got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}")


# ====================================================================================================================
# (a) reference and (b) host C against every implemented vector case; skips for the others
# ====================================================================================================================
_ids = [c["id"] for c in IMPLEMENTED_CASES]


@pytest.mark.parametrize("case", IMPLEMENTED_CASES, ids=_ids)
def test_reference_matches_vector(case):
    a = _arrays(case)
    _assert_same(run_reference(case, a), a["expected"], f"numpy reference, {case['id']}")


@pytest.mark.parametrize("case", IMPLEMENTED_CASES, ids=_ids)
def test_host_c_kernel_matches_vector(lib, case):
    a = _arrays(case)
    _assert_same(run_c(lib, case, a), a["expected"], f"host C kernel, {case['id']}")
    if case["kind"] == "conv2d":
        _assert_same(run_c(lib, case, a, scratch=True), a["expected"], f"host C kernel with im2col, {case['id']}")
    if case["kind"] in ("add", "softmax"):
        _assert_same(run_c(lib, case, a, in_place=True), a["expected"], f"host C kernel in place, {case['id']}")


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.skip(reason=NOT_IMPLEMENTED[c["kind"]])) for c in UNIMPLEMENTED_CASES],
    ids=[c["id"] for c in UNIMPLEMENTED_CASES],
)
def test_unimplemented_kind(case):  # pragma: no cover - always skipped, lists what is not implemented and why
    raise AssertionError("unreachable")


# ====================================================================================================================
# Randomised layers: numpy reference == host C (and == Cortex-M C below) beyond the vectors' shapes
# ====================================================================================================================
def _rand_quant(rng, n):
    scales = rng.uniform(2e-4, 2e-2, n)
    scales[rng.random(n) < 0.15] = rng.uniform(0.5, 3.0)  # now and then a scale >= 1/2: positive shift path
    return fp.quantize_multiplier_array(scales)


def _out_size(size, k, stride, dil, pad_lo, pad_hi):
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def _random_case(kind: str, rng: np.random.Generator, idx: int) -> dict:
    p: dict = {"activation_min": -128, "activation_max": 127}
    if rng.random() < 0.3:
        lo = int(rng.integers(-128, 0))
        p.update(activation_min=lo, activation_max=int(rng.integers(lo + 1, 128)))
    a: dict = {}
    i8 = lambda shape: rng.integers(-128, 128, shape, dtype=np.int8)  # noqa: E731
    if kind in ("conv2d", "depthwise_conv2d"):
        while True:
            n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
            kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
            sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            dh, dw = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if rng.random() < 0.3 else (1, 1)
            pt, pl, pb, pr = (int(rng.integers(0, 3)) for _ in range(4))
            oh, ow = _out_size(h, kh, sh, dh, pt, pb), _out_size(w, kw, sw, dw, pl, pr)
            if oh >= 1 and ow >= 1:
                break
        if kind == "conv2d":
            groups = int(rng.choice([1, 1, 1, 2, 3]))
            cin = groups * int(rng.integers(1, 7))
            cout = groups * int(rng.integers(1, 6))
            a["weights"] = i8((cout, kh, kw, cin // groups))
            p["groups"] = groups
        else:
            cin = int(rng.integers(1, 10))
            ch_mult = int(rng.choice([1, 1, 2, 3, 4, 8]))
            cout = cin * ch_mult
            a["weights"] = i8((1, kh, kw, cout))
            p["ch_mult"] = ch_mult
        a["input"] = i8((n, h, w, cin))
        a["bias"] = rng.integers(-5000, 5000, cout).astype(np.int32)
        a["output_mult"], a["output_shift"] = _rand_quant(rng, cout)
        p.update(input_offset=int(rng.integers(-127, 129)), output_offset=int(rng.integers(-128, 128)),
                 stride_hw=[sh, sw], dilation_hw=[dh, dw], pad_top_left=[pt, pl], output_hwc=[oh, ow, cout],
                 bias_is_null_or_zero=bool(rng.random() < 0.25))
        if p["bias_is_null_or_zero"]:
            a["bias"][:] = 0
    elif kind == "fully_connected":
        batches, depth, out_ch = int(rng.integers(1, 4)), int(rng.integers(1, 41)), int(rng.integers(1, 10))
        a["input"], a["weights"] = i8((batches, depth)), i8((out_ch, depth))
        a["bias"] = rng.integers(-5000, 5000, out_ch).astype(np.int32)
        per_channel = bool(rng.random() < 0.5)
        m, s = _rand_quant(rng, out_ch if per_channel else 1)
        a["output_mult"], a["output_shift"] = np.resize(m, out_ch), np.resize(s, out_ch)
        p.update(input_offset=int(rng.integers(-127, 129)), output_offset=int(rng.integers(-128, 128)),
                 filter_offset=int(rng.choice([0, int(rng.integers(-127, 129))])), per_channel=per_channel,
                 bias_is_null_or_zero=bool(rng.random() < 0.25))
        if p["bias_is_null_or_zero"]:
            a["bias"][:] = 0
    elif kind in ("avgpool", "maxpool"):
        n = int(rng.integers(1, 3))
        h, w, c = int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
        kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        # pads smaller than the window keep every window overlapping the input
        pt, pb, pl, pr = (int(rng.integers(0, kh)), int(rng.integers(0, kh)), int(rng.integers(0, kw)),
                          int(rng.integers(0, kw)))
        oh, ow = _out_size(h, kh, sh, 1, pt, pb), _out_size(w, kw, sw, 1, pl, pr)
        oh, ow = max(oh, 1), max(ow, 1)
        a["input"] = i8((n, h, w, c))
        p.update(kernel_hw=[kh, kw], stride_hw=[sh, sw], pad_top_left=[pt, pl], output_hwc=[oh, ow, c])
    elif kind == "add":
        size = int(rng.integers(1, 70))
        s1, s2, so = (float(v) for v in rng.uniform(0.01, 0.2, 3))
        p.update(add_params(s1, s2, so))
        p.update(input1_offset=int(rng.integers(-127, 129)), input2_offset=int(rng.integers(-127, 129)),
                 output_offset=int(rng.integers(-128, 128)))
        a["input1"], a["input2"] = i8(size), i8(size)
    elif kind == "softmax":
        rows, row_size = int(rng.integers(1, 4)), int(rng.integers(1, 40))
        mult, shift, diff_min = fp.softmax_params(float(rng.uniform(0.01, 0.3)), beta=float(rng.uniform(0.5, 2.0)))
        p.update(input_mult=mult, input_left_shift=shift, diff_min=diff_min)
        a["input"] = i8((rows, row_size))
    case = {"id": f"random_{kind}_{idx}", "kind": kind, "params": p, "arrays_inline": a}
    a["expected"] = run_reference(case, a)
    return case


@lru_cache(maxsize=None)
def _random_cases(kind: str, count: int = 40) -> tuple:
    rng = np.random.default_rng(sum(map(ord, kind)))  # fixed per kind: reproducible failures
    return tuple(_random_case(kind, rng, i) for i in range(count))


@pytest.mark.parametrize("kind", IMPLEMENTED_KINDS)
def test_host_c_kernel_matches_reference_on_random_layers(lib, kind):
    for case in _random_cases(kind):
        a = _arrays(case)
        _assert_same(run_c(lib, case, a), a["expected"], f"{case['id']} params={case['params']}")
        if kind == "conv2d":
            _assert_same(run_c(lib, case, a, scratch=True), a["expected"], f"{case['id']} im2col")


def test_conv_with_unusable_scratch_falls_back(lib):
    """Scratch that is misaligned or one byte short is ignored (same results by the in-place path), not misused."""
    for case in [c for c in IMPLEMENTED_CASES if c["kind"] == "conv2d"][:10]:
        a = _arrays(case)
        for kw in (dict(scratch_misalign=1), dict(scratch_misalign=2), dict(scratch_short=1)):
            _assert_same(run_c(lib, case, a, scratch=True, **kw), a["expected"], f"{case['id']} {kw}")


def test_reference_and_c_handle_saturating_extremes(lib):
    """Accumulators near the int32 limits and multipliers at their extremes: the saturating paths agree."""
    rng = np.random.default_rng(7)
    depth = 4000  # 4000 * 255 * 127 ~ 1.3e8 per product sum; with a large positive shift the requantize saturates
    x = np.full((2, depth), 127, dtype=np.int8)
    w = rng.choice(np.array([-128, 127], dtype=np.int8), (5, depth))
    mult = np.array([2**31 - 1, 2**30, 1, 2**31 - 1, 1518500250], dtype=np.int32)
    shift = np.array([30, 8, -31, -31, 0], dtype=np.int32)
    case = {"kind": "fully_connected", "params": dict(per_channel=True, input_offset=128, filter_offset=0,
                                                      output_offset=0, activation_min=-128, activation_max=127)}
    a = {"input": x, "weights": w, "bias": np.array([2**30, -(2**30), 0, 5, -5], dtype=np.int32),
         "output_mult": mult, "output_shift": shift}
    ref = run_reference(case, a)
    _assert_same(run_c(lib, case, a), ref, "fc extremes")


# ====================================================================================================================
# (c) the same C on Cortex-M cores under QEMU: plain path (M0) and DSP path (M4, M55)
# ====================================================================================================================
def _c_array(name: str, arr: np.ndarray, ctype: str, const: bool = True) -> str:
    vals = ",".join(str(int(v)) for v in np.asarray(arr).ravel())
    return f"static {'const ' if const else ''}{ctype} {name}[{max(arr.size, 1)}] = {{{vals or '0'}}};\n"


def _c_case(i: int, case: dict) -> tuple[str, str]:
    """C declarations and a function `int case_<i>(void)` returning the number of mismatching outputs."""
    a, p, k = _arrays(case), case["params"], case["kind"]
    exp = a["expected"]
    pre = f"c{i}_"
    decl = _c_array(pre + "exp", exp, "int8_t")
    body = [f"static int case_{i}(void)\n{{\n", "    int rc;\n"]
    act = f"{{{p.get('activation_min', -128)}, {p.get('activation_max', 127)}}}"
    if k in ("conv2d", "depthwise_conv2d", "fully_connected"):
        bias = _bias(case, a)
        m, s = (_fc_quant(case, a) if k == "fully_connected" else (a["output_mult"], a["output_shift"]))
        decl += _c_array(pre + "in", a["input"], "int8_t") + _c_array(pre + "w", a["weights"], "int8_t")
        decl += _c_array(pre + "mult", m, "int32_t") + _c_array(pre + "shift", s, "int32_t")
        bias_ptr = "NULL"
        if bias is not None:
            decl += _c_array(pre + "bias", bias, "int32_t")
            bias_ptr = pre + "bias"
        body.append(f"    const tinyaot_per_channel_quant_params q = {{{pre}mult, {pre}shift}};\n")
        body.append("    const tinyaot_context ctx = {NULL, 0};\n")
    if k in ("conv2d", "depthwise_conv2d"):
        n, h, w, c = a["input"].shape
        oh, ow, oc = p["output_hwc"]
        fd = ", ".join(map(str, a["weights"].shape))
        geo = (f"{p['input_offset']}, {p['output_offset']}, {{{p['stride_hw'][0]}, {p['stride_hw'][1]}}}, "
               f"{{{p['pad_top_left'][0]}, {p['pad_top_left'][1]}}}, "
               f"{{{p['dilation_hw'][0]}, {p['dilation_hw'][1]}}}, {act}")
        body.append(f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {c}}}, f_d = {{{fd}}}, "
                    f"b_d = {{1, 1, 1, {oc}}}, o_d = {{{n}, {oh}, {ow}, {oc}}};\n")
        if k == "conv2d":
            # both paths: without scratch (ctx.buf NULL), then im2col in scratch
            body.append(f"    const tinyaot_conv_params prm = {{{geo}}};\n")
            body.append(f"    rc = tinyaot_convolve_s8(&ctx, &prm, &q, &in_d, {pre}in, &f_d, {pre}w, &b_d, {bias_ptr}, "
                        f"&o_d, out_buf);\n")
            body.append(f"    if (rc != 0 || count_mismatches(out_buf, {pre}exp, {exp.size}) != 0) return -2;\n")
            body.append("    memset(out_buf, 99, sizeof out_buf);\n")
            body.append("    const int32_t need = tinyaot_convolve_s8_get_buffer_size(&in_d, &f_d);\n")
            body.append("    if (need > (int32_t)sizeof scratch_buf) return -3;\n")
            body.append("    const tinyaot_context ctx2 = {scratch_buf, need};\n")
            body.append(f"    rc = tinyaot_convolve_s8(&ctx2, &prm, &q, &in_d, {pre}in, &f_d, {pre}w, &b_d, "
                        f"{bias_ptr}, &o_d, out_buf);\n")
        else:
            body.append(f"    const tinyaot_dw_conv_params prm = {{{geo}, {p['ch_mult']}}};\n")
            body.append(f"    rc = tinyaot_depthwise_conv_s8(&ctx, &prm, &q, &in_d, {pre}in, &f_d, {pre}w, &b_d, "
                        f"{bias_ptr}, &o_d, out_buf);\n")
    elif k == "fully_connected":
        batches, depth = a["input"].shape
        oc = a["weights"].shape[0]
        body.append(f"    const tinyaot_dims in_d = {{{batches}, 1, 1, {depth}}}, f_d = {{{depth}, 1, 1, {oc}}}, "
                    f"b_d = {{1, 1, 1, {oc}}}, o_d = {{{batches}, 1, 1, {oc}}};\n")
        body.append(f"    const tinyaot_fc_params prm = {{{p['input_offset']}, {p['filter_offset']}, "
                    f"{p['output_offset']}, {act}}};\n")
        body.append(f"    rc = tinyaot_fully_connected_s8(&ctx, &prm, &q, {int(p['per_channel'])}, &in_d, {pre}in, "
                    f"&f_d, {pre}w, &b_d, {bias_ptr}, &o_d, out_buf);\n")
    elif k in ("avgpool", "maxpool"):
        n, h, w, c = a["input"].shape
        oh, ow, oc = p["output_hwc"]
        decl += _c_array(pre + "in", a["input"], "int8_t")
        fn = "tinyaot_avgpool_s8" if k == "avgpool" else "tinyaot_max_pool_s8"
        body.append("    const tinyaot_context ctx = {NULL, 0};\n")
        body.append(f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {c}}}, f_d = {{1, {p['kernel_hw'][0]}, "
                    f"{p['kernel_hw'][1]}, 1}}, o_d = {{{n}, {oh}, {ow}, {oc}}};\n")
        body.append(f"    const tinyaot_pool_params prm = {{{{{p['stride_hw'][0]}, {p['stride_hw'][1]}}}, "
                    f"{{{p['pad_top_left'][0]}, {p['pad_top_left'][1]}}}, {act}}};\n")
        body.append(f"    rc = {fn}(&ctx, &prm, &in_d, {pre}in, &f_d, &o_d, out_buf);\n")
    elif k == "add":
        decl += _c_array(pre + "in1", a["input1"], "int8_t") + _c_array(pre + "in2", a["input2"], "int8_t")
        # in place: the output overwrites a RAM copy of input 1
        body.append(f"    memcpy(out_buf, {pre}in1, {a['input1'].size});\n")
        body.append(f"    rc = tinyaot_elementwise_add_s8(out_buf, {pre}in2, {p['input1_offset']}, {p['input1_mult']}, "
                    f"{p['input1_shift']}, {p['input2_offset']}, {p['input2_mult']}, {p['input2_shift']}, "
                    f"{p['left_shift']}, out_buf, {p['output_offset']}, {p['output_mult']}, {p['output_shift']}, "
                    f"{p['activation_min']}, {p['activation_max']}, {a['input1'].size});\n")
    elif k == "softmax":
        rows, row_size = a["input"].shape
        decl += _c_array(pre + "in", a["input"], "int8_t")
        body.append(f"    memcpy(out_buf, {pre}in, {a['input'].size});\n    rc = 0;\n")
        body.append(f"    tinyaot_softmax_s8(out_buf, {rows}, {row_size}, {p['input_mult']}, {p['input_left_shift']}, "
                    f"{p['diff_min']}, out_buf);\n")
    body.append(f"    return rc != 0 ? -1 : count_mismatches(out_buf, {pre}exp, {exp.size});\n}}\n")
    return decl, "".join(body)


def _firmware_source(cases: list[dict]) -> str:
    out_size = max(_arrays(c)["expected"].size for c in cases)
    scratch_words = max((_conv_k(c) + 1) // 2 * 2 for c in cases if c["kind"] == "conv2d")  # 2 columns of int16
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn.h"\n',
             "void harness_puts(const char *s);\n",
             f"static int8_t out_buf[{out_size}];\n",
             f"static uint32_t scratch_buf[{scratch_words}];\n",
             "static int count_mismatches(const int8_t *got, const int8_t *want, int n)\n"
             "{\n    int bad = 0, i;\n    for (i = 0; i < n; i++) bad += got[i] != want[i];\n    return bad;\n}\n"]
    calls = []
    for i, case in enumerate(cases):
        decl, fn = _c_case(i, case)
        parts += [decl, fn]
        calls.append(f'    if (case_{i}() != 0) {{ harness_puts("FAIL {case["id"]}\\n"); fails++; }}\n')
    parts.append("int main(void)\n{\n    int fails = 0;\n    memset(out_buf, 99, sizeof out_buf);\n")
    parts += calls
    parts.append('    harness_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


def _conv_k(case: dict) -> int:
    return int(np.prod(_arrays(case)["weights"].shape[1:]))


def _qemu_cases(cpu: str) -> list[dict]:
    cases = list(IMPLEMENTED_CASES)
    for kind in IMPLEMENTED_KINDS:
        cases += list(_random_cases(kind))[:15]
    if cpu == "cortex-m0":  # 16 KiB of RAM on the micro:bit: leave out the three layers with the largest outputs
        cases = sorted(cases, key=lambda c: _arrays(c)["expected"].size)[:-3]
    return cases


# M0 (Armv6-M) runs the plain C path, M4 and M55 (Armv7E-M, Armv8.1-M) the DSP path; M3 and M7 would compile to
# the same two paths again, so they are covered by the warning-free builds below instead of a QEMU run.
@pytest.mark.parametrize("cpu", ["cortex-m0", "cortex-m4", "cortex-m55"])
def test_cortex_m_kernels_match_vectors_under_qemu(arm_runner, cpu):
    cases = _qemu_cases(cpu)
    elf = arm_runner.build(cpu, "vectors", _firmware_source(cases), KERNEL_SOURCES, [KERNELS_DIR],
                           ("-Wall", "-Wextra", "-Werror"))
    rc, out = arm_runner.run(cpu, elf)
    assert "ALL PASSED" in out and rc == 0, f"{cpu}: {len(cases)} cases, exit {rc}:\n{out[-3000:]}"


def test_dsp_path_is_really_compiled_for_dsp_cores():
    """The M4 build must contain SMLAD (else the QEMU test above would only re-test the plain path) and M0 none."""
    if not _which("arm-none-eabi-objdump"):
        pytest.skip("arm-none-eabi-objdump not installed")
    src = KERNELS_DIR / "tinyaot_convolve_s8.c"
    for cpu, want in (("cortex-m4", True), ("cortex-m55", True), ("cortex-m3", False), ("cortex-m0", False)):
        dis = _arm_disassemble(src, cpu)
        assert ("smlad" in dis) is want, f"{cpu}: smlad {'missing' if want else 'present'}"


def _which(tool: str):
    return shutil.which(tool)


def _arm_disassemble(src: Path, cpu: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        obj = Path(d) / "k.o"
        subprocess.run(["arm-none-eabi-gcc", f"-mcpu={cpu}", "-mthumb", "-O2", "-std=c99", f"-I{KERNELS_DIR}", "-c",
                        str(src), "-o", str(obj)], check=True, capture_output=True)
        return subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)], check=True, capture_output=True,
                              text=True).stdout


# ====================================================================================================================
# Warning-free builds: every kernel on the host, -Wall -Wextra -Wpedantic -Wshadow -Werror (arm-none-eabi-gcc builds
# them for every core and optimisation level in tests/sanitize/test_kernel_build_matrix.py)
# ====================================================================================================================
def test_kernel_files_exist():
    for path in KERNEL_SOURCES:
        assert path.is_file(), path
    for hdr in ("tinyaot_nn.h", "tinyaot_nn_types.h", "tinyaot_nn_support.h"):
        assert (KERNELS_DIR / hdr).is_file()


def test_kernels_compile_warning_free_on_host(tmp_path):
    proc = subprocess.run(["cc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wshadow",
                           f"-I{KERNELS_DIR}", "-c", *map(str, ALL_KERNEL_SOURCES)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(list(tmp_path.glob("*.o"))) == len(ALL_KERNEL_SOURCES)


# ====================================================================================================================
# Fixed-point helpers: Python against exact integer maths, and C (tinyaot_nn_support.h) against Python
# ====================================================================================================================
def _exact_round_half_away(num: int, den: int) -> int:
    q, r = divmod(abs(num), den)
    if 2 * r >= den:
        q += 1
    return q if num >= 0 else -q


def _exact_round_half_up(num: int, den: int) -> int:
    return (2 * num + den) // (2 * den)  # floor(num/den + 1/2)


INT32_EDGES = np.array([-(2**31), -(2**31) + 1, -(2**30), -65537, -256, -3, -2, -1, 0, 1, 2, 3, 255, 65536,
                        2**30, 2**31 - 2, 2**31 - 1], dtype=np.int64)


def _int32_samples(rng, n=4000):
    vals = np.concatenate([INT32_EDGES, rng.integers(-(2**31), 2**31, n),
                           rng.integers(-(2**16), 2**16, n // 4)])
    return vals.astype(np.int64)


def test_srdhm_and_rdbpot_against_exact_arithmetic():
    rng = np.random.default_rng(1)
    a = _int32_samples(rng)
    b = np.roll(_int32_samples(rng), 3)
    got = fp.saturating_rounding_doubling_high_mul(a, b)
    for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
        # gemmlowp's nudge of 1 - 2^30 for negative products makes ties round up (toward +inf), not away from 0
        want = 2**31 - 1 if x == y == -(2**31) else _exact_round_half_up(x * y, 2**31)
        assert g == want, (x, y)
    e = rng.integers(0, 32, a.size)
    got = fp.rounding_divide_by_pot(a, e)
    for x, k, g in zip(a.tolist(), e.tolist(), got.tolist()):
        assert g == _exact_round_half_away(x, 2**k), (x, k)


def test_exact_matmul_equals_python_integers_inside_and_past_the_float_bound():
    """The references' integer matmul goes through float64 BLAS when its sums stay within 2^53 (exact there), and
    through int64 otherwise: both equal Python's unbounded integers, at the extremes of int8/int16 operands, long
    rows, batch dimensions, and operands just past the bound (where float64 would round: 2^53 + 1 is not a
    float64)."""
    rng = np.random.default_rng(3)
    cases = [(rng.integers(-255, 256, (2, 7, 300)), rng.integers(-128, 128, (2, 300, 5))),
             (np.full((3, 4096), -255), np.full((4096, 2), -128)),  # every product the largest, one sign
             (rng.integers(-32768, 32768, (5, 33)), rng.integers(-128, 128, (33, 4))),
             (np.array([[2**27 + 1, 1]]), np.array([[2**27 + 1], [0]]))]  # 2^54 + 2^28 + 1: int64 path
    for a, b in cases:
        want = [[sum(int(x) * int(y) for x, y in zip(row, col)) for col in np.asarray(b).T.tolist()]
                for row in np.asarray(a).reshape(-1, a.shape[-1]).tolist()] if a.ndim == 2 else None
        got = fp.exact_matmul(a, b)
        plain = np.matmul(np.asarray(a, np.int64), np.asarray(b, np.int64))
        assert got.dtype == np.int64 and np.array_equal(got, plain)
        if want is not None:
            assert got.tolist() == want
    big = fp.exact_matmul(*cases[3])
    assert int(big[0, 0]) == 2**54 + 2**28 + 1 != int(float(2**54 + 2**28 + 1))  # float64 would round it


def test_multiply_by_quantized_multiplier_is_close_to_the_real_scale():
    rng = np.random.default_rng(2)
    for real in list(rng.uniform(1e-6, 0.99, 200)) + [0.5, 1.0, 1.5, 2.0**-31, 7.25]:
        m, s = fp.quantize_multiplier(real)
        acc = rng.integers(-(2**20), 2**20, 50)
        got = fp.multiply_by_quantized_multiplier(acc, m, s)
        # two roundings: within one step of the exact product with the quantized scale, which is within 2^-31 rel.
        assert np.all(np.abs(got - acc * real) <= 1.0 + np.abs(acc) * real * 2.0**-30)


SUPPORT_WRAPPER_C = r"""
#include "tinyaot_nn.h"
int32_t w_srdhm(int32_t a, int32_t b) { return tinyaot_srdhm(a, b); }
int32_t w_rdbpot(int32_t x, int32_t e) { return tinyaot_rdbpot(x, e); }
int32_t w_requantize(int32_t x, int32_t m, int32_t s) { return tinyaot_requantize(x, m, s); }
int32_t w_sat_shl(int32_t x, int32_t e) { return tinyaot_sat_shl(x, e); }
int32_t w_exp(int32_t a) { return tinyaot_exp_on_negative_values(a); }
int32_t w_recip(int32_t a) { return tinyaot_one_over_one_plus_x(a); }
void w_taps(int32_t base, int32_t k, int32_t d, int32_t size, int32_t *b, int32_t *e)
{ tinyaot_valid_taps(base, k, d, size, b, e); }
"""


@pytest.fixture(scope="module")
def support(tmp_path_factory):
    src = tmp_path_factory.mktemp("support") / "support_wrappers.c"
    src.write_text(SUPPORT_WRAPPER_C)
    dll = ctypes.CDLL(str(compile_shared([src], [KERNELS_DIR], extra_flags=("-Wpedantic", "-Werror"))))
    for name in ("w_srdhm", "w_rdbpot", "w_requantize", "w_sat_shl", "w_exp", "w_recip"):
        getattr(dll, name).restype = i32
        getattr(dll, name).argtypes = [i32] * {"w_exp": 1, "w_recip": 1, "w_requantize": 3}.get(name, 2)
    dll.w_taps.argtypes = [i32] * 4 + [ctypes.POINTER(i32)] * 2
    return dll


def test_c_fixed_point_helpers_match_python(support):
    rng = np.random.default_rng(3)
    a = _int32_samples(rng, 3000)
    b = np.roll(a, 7)
    e = rng.integers(0, 32, a.size)
    assert ([support.w_srdhm(int(x), int(y)) for x, y in zip(a, b)]
            == fp.saturating_rounding_doubling_high_mul(a, b).tolist())
    assert [support.w_rdbpot(int(x), int(k)) for x, k in zip(a, e)] == fp.rounding_divide_by_pot(a, e).tolist()
    assert [support.w_sat_shl(int(x), int(k)) for x, k in zip(a, e)] == fp.saturating_left_shift(a, e).tolist()
    mult = np.abs(np.roll(a, 11)) | (1 << 30)  # valid multipliers in [2^30, 2^31) ...
    mult = np.minimum(mult, 2**31 - 1)
    mult[::3] *= -1  # ... and negated ones (PRelu's negative slopes)
    shift = rng.integers(-31, 31, a.size)
    assert ([support.w_requantize(int(x), int(m), int(s)) for x, m, s in zip(a, mult, shift)]
            == fp.multiply_by_quantized_multiplier(a, mult, shift).tolist())
    q526 = np.concatenate([np.array([0, -1, -(2**24), -(2**26), -(31 << 26), -(2**31)]),
                           rng.integers(-(2**31), 1, 3000)])
    assert [support.w_exp(int(x)) for x in q526] == fp.exp_on_negative_values(q526).tolist()
    q031 = np.concatenate([np.array([0, 1, 2**30, 2**31 - 1]), rng.integers(0, 2**31, 3000)])
    assert [support.w_recip(int(x)) for x in q031] == fp.one_over_one_plus_x_for_x_in_0_1(q031).tolist()


def test_valid_taps_matches_brute_force(support):
    b, e = i32(), i32()
    for base in range(-9, 12):
        for k in range(1, 6):
            for d in (1, 2, 3):
                for size in (1, 2, 5, 8):
                    support.w_taps(base, k, d, size, ctypes.byref(b), ctypes.byref(e))
                    valid = [t for t in range(k) if 0 <= base + t * d < size]
                    if valid:
                        assert (b.value, e.value) == (valid[0], valid[-1] + 1), (base, k, d, size)
                    else:
                        assert b.value == e.value, (base, k, d, size)


def test_fixed_point_exp_and_reciprocal_accuracy():
    a = np.linspace(-(31 << 26), 0, 20001).astype(np.int64)
    assert np.max(np.abs(fp.exp_on_negative_values(a) / 2**31 - np.exp(a / 2**26))) < 2.5e-7
    x = np.linspace(0, 2**31 - 1, 20001).astype(np.int64)
    assert np.max(np.abs(fp.one_over_one_plus_x_for_x_in_0_1(x) / 2**31 - 1 / (1 + x / 2**31))) < 1e-8


def test_softmax_within_one_step_of_float_softmax():
    """The bound softmax.py states: against float softmax on the same int8 input, at most one 1/256 step."""
    rng = np.random.default_rng(8)
    worst = 0
    for _ in range(200):
        scale, beta = float(rng.uniform(0.005, 0.5)), float(rng.uniform(0.5, 2.0))
        x = rng.integers(-128, 128, (1, int(rng.integers(1, 60))), dtype=np.int8)
        mult, shift, diff_min = fp.softmax_params(scale, beta)
        got = softmax_s8(x, input_mult=mult, input_left_shift=shift, diff_min=diff_min).astype(int)
        z = beta * scale * x.astype(float)
        prob = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        want = np.clip(np.round(prob * 256) - 128, -128, 127)
        worst = max(worst, int(np.abs(got - want).max()))
    assert worst <= 1


def test_softmax_long_rows_and_uniform_rows():
    """Rows of equal values (sum of exps far above one) and rows longer than 512 (output shift beyond 31)."""
    mult, shift, diff_min = fp.softmax_params(1 / 16)
    for row_size in (1, 2, 255, 256, 600, 4095):
        x = np.zeros((1, row_size), dtype=np.int8)
        out = softmax_s8(x, input_mult=mult, input_left_shift=shift, diff_min=diff_min).astype(int) + 128
        assert np.all(np.abs(out - 256 / row_size) <= 1), row_size
    with pytest.raises(ValueError):
        softmax_s8(np.zeros((1, 4096), dtype=np.int8), input_mult=mult, input_left_shift=shift, diff_min=diff_min)


def test_c_softmax_long_rows(lib):
    mult, shift, diff_min = fp.softmax_params(0.05)
    rng = np.random.default_rng(5)
    for row_size in (513, 1000, 4095):
        x = rng.integers(100, 128, (2, row_size), dtype=np.int8)
        x[1] = 3
        case = {"kind": "softmax", "params": {"input_mult": mult, "input_left_shift": shift, "diff_min": diff_min}}
        want = softmax_s8(x, input_mult=mult, input_left_shift=shift, diff_min=diff_min)
        _assert_same(run_c(lib, case, {"input": x}), want, f"softmax row {row_size}")


# ====================================================================================================================
# Parameter preparation
# ====================================================================================================================
def test_quantize_multiplier_edge_cases():
    assert fp.quantize_multiplier(0.0) == (0, 0)
    assert fp.quantize_multiplier(0.5) == (2**30, 0)
    assert fp.quantize_multiplier(1.0) == (2**30, 1)
    assert fp.quantize_multiplier(3.0) == (3 * 2**29, 2)
    assert fp.quantize_multiplier(0.25) == (2**30, -1)
    # a mantissa that rounds up to 2^31 is renormalised (mult stays an int32, shift grows by one)
    assert fp.quantize_multiplier(1.0 - 2.0**-40) == (2**30, 1)
    # ties round away from zero: mantissa exactly halfway between two Q31 values
    assert fp.quantize_multiplier((2**30 + 0.5) / 2**31) == (2**30 + 1, 0)
    # smallest encodable scale and the flush to zero below it
    assert fp.quantize_multiplier(2.0**-32) == (2**30, -31)
    assert fp.quantize_multiplier(2.0**-33) == (0, 0)
    assert fp.quantize_multiplier(1e-30) == (0, 0)
    for bad in (-0.1, float("nan"), float("inf"), 2.0**31):
        with pytest.raises(ValueError):
            fp.quantize_multiplier(bad)
    rng = np.random.default_rng(4)
    for real in rng.uniform(1e-8, 100.0, 500):
        m, s = fp.quantize_multiplier(real)
        assert 2**30 <= m < 2**31
        assert abs(m * 2.0 ** (s - 31) - real) <= 2.0 ** (s - 32)


def test_quantize_multiplier_reproduces_every_vector_multiplier():
    """index.json states each layer's effective scales; quantizing them must give the case's mults and shifts."""
    checked = 0
    for case in (c for c in _index()["cases"] if "effective_scale" in c["params"]):
        a = _arrays(case)
        for scale, m, s in zip(case["params"]["effective_scale"], a["output_mult"], a["output_shift"]):
            assert fp.quantize_multiplier(scale) == (int(m), int(s)), case["id"]
            checked += 1
    assert checked == 547


def test_softmax_params_match_vectors():
    for case in _cases(("softmax", "softmax_s8_s16")):
        p = case["params"]
        assert fp.softmax_params(p["beta_times_input_scale"]) == (p["input_mult"], p["input_left_shift"],
                                                                   p["diff_min"])
        # the documented relation: beta * input_scale = mult * 2^(shift - 31) / 2^26
        m, s = p["input_mult"], p["input_left_shift"]
        assert math.isclose(m * 2.0 ** (s - 31) / 2**26, p["beta_times_input_scale"], rel_tol=1e-9)


def test_softmax_params_edge_cases():
    # beta scales like the input scale
    assert fp.softmax_params(0.01, beta=2.0) == fp.softmax_params(0.02)
    # scale exactly a power of two: mult 2^30; diff_min is the largest |d| whose d * 2^shift fits in int32
    mult, shift, diff_min = fp.softmax_params(1.0)
    assert (mult, shift) == (2**30, 27)
    assert diff_min == -math.floor(31 * 2**26 / 2**27)
    for scale in (1e-3, 1 / 255, 0.1, 1.0, 8.0):
        mult, shift, diff_min = fp.softmax_params(scale)
        # -diff_min is the largest |d| with |d| * 2^shift <= 31 * 2^26 (Q5.26 headroom), so the shift fits int32
        assert -diff_min * 2**shift <= 31 * 2**26 < (-diff_min + 1) * 2**shift
    # a rescale that would need a right shift (beta * scale < 2^-27) folds it into the multiplier: shift 0, the
    # same real factor to the multiplier's remaining precision, every int8 difference far inside diff_min
    mult, shift, diff_min = fp.softmax_params(1e-12)
    assert shift == 0 and diff_min == -math.floor(31 * 2**26)
    assert abs(mult * 2.0**-31 / 2**26 - 1e-12) <= 0.5 * 2.0**-31 / 2**26
    assert fp.softmax_params(1e-40)[:2] == (0, 0)  # rounds to 0: every exp is exactly 1, a uniform row
    # beyond the Q5.26 multiplier's range TFLite saturates to (INT32_MAX, 30): only the row maximum survives
    assert fp.softmax_params(64.0) == fp.softmax_params(1e6) == (2**31 - 1, 30, -1)


def test_add_params_match_the_vector():
    case = _cases(("add",))[0]
    p = case["params"]
    # the vector's inputs share one scale s (each input multiplier is 1/2); its output multiplier
    # 2s / (2^20 s_out) = 2^-20 means s_out = 2s
    got = add_params(1.0, 1.0, 2.0)
    assert got["input1_mult"] == p["input1_mult"] and got["input1_shift"] == p["input1_shift"]
    assert got["input2_mult"] == p["input2_mult"] and got["input2_shift"] == p["input2_shift"]
    assert got["left_shift"] == p["left_shift"] == 20
    assert (got["output_mult"], got["output_shift"]) == (p["output_mult"], p["output_shift"])


def test_add_params_scales():
    got = add_params(0.1, 0.05, 0.2)
    assert got["input1_mult"] * 2.0 ** (got["input1_shift"] - 31) == pytest.approx(0.5)
    assert got["input2_mult"] * 2.0 ** (got["input2_shift"] - 31) == pytest.approx(0.25)
    assert got["output_mult"] * 2.0 ** (got["output_shift"] - 31) == pytest.approx(0.2 / (2**20 * 0.2))
    assert max(got["input1_shift"], got["input2_shift"], got["output_shift"]) <= 0
    # real-valued check: x1*s1 + x2*s2 = y*s_out within one output step
    rng = np.random.default_rng(6)
    x1, x2 = rng.integers(-128, 128, 500, dtype=np.int8), rng.integers(-128, 128, 500, dtype=np.int8)
    y = elementwise_add_s8(x1, x2, input1_offset=-3, input1_mult=got["input1_mult"], input1_shift=got["input1_shift"],
                           input2_offset=10, input2_mult=got["input2_mult"], input2_shift=got["input2_shift"],
                           left_shift=20, output_offset=5, output_mult=got["output_mult"],
                           output_shift=got["output_shift"])
    real = ((x1.astype(float) - 3) * 0.1 + (x2.astype(float) + 10) * 0.05) / 0.2 + 5  # offset = -zero point
    inside = (real > -127.5) & (real < 126.5)
    assert np.all(np.abs(y[inside] - real[inside]) <= 1.0)


# ====================================================================================================================
# Host compiler cache (tinyaot.toolchain.host.compile_shared)
# ====================================================================================================================
def test_compile_shared_caches_by_content_and_evicts_lru(tmp_path):
    cache = tmp_path / "cache"
    src = tmp_path / "f.c"
    src.write_text("int f(void) { return 41; }\n")
    first = compile_shared([src], [], cache_dir=cache)
    assert ctypes.CDLL(str(first)).f() == 41
    mtime = first.stat().st_mtime_ns
    again = compile_shared([src], [], cache_dir=cache)
    assert again == first and again.stat().st_ino == first.stat().st_ino  # no rebuild
    assert again.stat().st_mtime_ns >= mtime
    # different flags or text -> different entry
    assert compile_shared([src], [], extra_flags=("-DX=1",), cache_dir=cache) != first
    src.write_text("int f(void) { return 42; }\n")
    changed = compile_shared([src], [], cache_dir=cache)
    assert changed != first and ctypes.CDLL(str(changed)).f() == 42
    # a header in an include dir is part of the key
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "v.h").write_text("#define V 1\n")
    src.write_text('#include "v.h"\nint f(void) { return V; }\n')
    one = compile_shared([src], [inc], cache_dir=cache)
    (inc / "v.h").write_text("#define V 2\n")
    two = compile_shared([src], [inc], cache_dir=cache)
    assert one != two and ctypes.CDLL(str(two)).f() == 2
    # LRU: with room for 2 entries, touching `two` keeps it while older ones go
    os.utime(one, ns=(1, 1))
    compile_shared([src], [inc], cache_dir=cache)  # hit on `two`, refreshes it
    src.write_text("int f(void) { return 7; }\n")
    newest = compile_shared([src], [], cache_dir=cache, max_entries=2)
    left = set(cache.glob("*.so"))
    assert left == {two, newest}
    assert not list(cache.glob("*.tmp"))


def test_compile_shared_hits_for_the_same_c_in_another_folder(tmp_path):
    """The host JIT emits into a fresh temporary folder each time: the key must not contain folder locations."""
    cache = tmp_path / "cache"
    paths = []
    for folder in ("a", "b"):
        d = tmp_path / folder
        d.mkdir()
        (d / "k.h").write_text("#define K 5\n")
        (d / "m.c").write_text('#include "k.h"\nint m(void) { return K; }\n')
        paths.append(compile_shared([d / "m.c"], [d], cache_dir=cache))
    assert paths[0] == paths[1]
    # ... but header texts are, also of headers found only beside the source (no include dir given)
    beside = compile_shared([tmp_path / "b" / "m.c"], [], cache_dir=cache)
    (tmp_path / "b" / "k.h").write_text("#define K 6\n")
    changed = compile_shared([tmp_path / "b" / "m.c"], [tmp_path / "b"], cache_dir=cache)
    assert changed != paths[0] and ctypes.CDLL(str(changed)).m() == 6
    changed_beside = compile_shared([tmp_path / "b" / "m.c"], [], cache_dir=cache)
    assert changed_beside != beside and ctypes.CDLL(str(changed_beside)).m() == 6


def test_compile_shared_env_override_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYAOT_CACHE", str(tmp_path / "envcache"))
    src = tmp_path / "bad.c"
    src.write_text("int f(void) { return 1 }\n")
    with pytest.raises(TinyaotError) as err:
        compile_shared([src], [])
    assert "error" in str(err.value) and "bad.c" in str(err.value)
    assert not list((tmp_path / "envcache").rglob("*.so*"))  # nothing half-written left behind
    src.write_text("int f(void) { return 1; }\n")
    (tmp_path / "envcache").mkdir(exist_ok=True)
    other_tool = tmp_path / "envcache" / "insn_plugin-0.so"  # another tool's library in the cache root
    other_tool.write_bytes(b"x")
    os.utime(other_tool, ns=(1, 1))
    path = compile_shared([src], [], max_entries=1)  # evicts everything it owns but the new entry
    assert path.parent == tmp_path / "envcache" / "host" and path.exists()
    assert other_tool.exists()  # eviction never reaches outside host/
    with pytest.raises(TinyaotError):
        compile_shared([tmp_path / "missing.c"], [])


# ====================================================================================================================
# The kernel variants (issue 10) meet the same vectors: each conv / depthwise / fully connected vector becomes a
# one-layer quantized graph, compiled for each core's target with the layer forced onto each variant it lists there
# (fold, dw3x3, dw3x3_fold, mve_conv, mve_1x1, mve_dw, mve_fc), its C (the variants' portable paths) built for the
# host under ASan + UBSan and run on the vector's input (each batch item one sample) == the vector's expected output.
# The same graphs under QEMU (DSP and Helium paths): ci/cmsis_nn_vectors_variants.py.
# ====================================================================================================================
VARIANT_KINDS = ("conv2d", "depthwise_conv2d", "fully_connected")
VARIANT_BOARDS = ("mps2-an385", "mps2-an386", "mps3-an547")  # M3 (plain-C twins), M4 (DSP), M55 (Helium)


def vector_graph(case: dict, a: dict):
    """The vector's layer as a one-layer quantized NHWC graph (the attributes quantize_graph would have set; the
    scales are placeholders: the vectors give the multipliers and shifts). None for shapes a graph cannot hold
    (grouped convolutions)."""
    from tinyaot.core.quant import QuantParams
    from tinyaot.ir.graph import Graph, Node, Tensor

    k, p = case["kind"], case["params"]
    if k == "conv2d" and p.get("groups", 1) != 1:
        return None

    def qp(zp, n=None, axis=None):
        return QuantParams(scale=np.ones(n) if n else np.array(1.0), zero_point=np.zeros(n, int) if n else np.array(zp),
                           axis=axis, bits=8)

    x, w = a["input"], a["weights"]
    oc = w.shape[3] if k == "depthwise_conv2d" else w.shape[0]
    out_shape = (1, *p["output_hwc"]) if k != "fully_connected" else (1, oc)
    b = _bias(case, a)
    t = {"x": Tensor("x", (1, *x.shape[1:]), "int8", quant=qp(-p["input_offset"])),
         "y": Tensor("y", out_shape, "int8", quant=qp(p["output_offset"])),
         "w": Tensor("w", w.shape, "int8", data=w, quant=qp(0, oc, 3 if k == "depthwise_conv2d" else 0)),
         "b": Tensor("b", (oc,), "int32", data=np.zeros(oc, np.int32) if b is None else b.astype(np.int32),
                     quant=qp(0, oc, 0))}
    common = {"input_offset": p["input_offset"], "output_offset": p["output_offset"],
              "act_min": p["activation_min"], "act_max": p["activation_max"]}
    if k == "fully_connected":
        # one multiplier per output channel, as quantize gives every layer (a per-tensor scale repeated; the vectors
        # store per-tensor cases repeated too)
        node = Node("FullyConnected", "layer", ["x", "w", "b"], ["y"],
                    {"output_mult": np.asarray(a["output_mult"], np.int32).reshape(-1),
                     "output_shift": np.asarray(a["output_shift"], np.int32).reshape(-1),
                     "filter_offset": p["filter_offset"], **common})
    else:
        kh, kw = w.shape[1:3]
        (sh, sw), (dh, dw), (pt, pl) = p["stride_hw"], p["dilation_hw"], p["pad_top_left"]
        oh, ow = p["output_hwc"][:2]
        # bottom / right pads: what the last output position reaches past the input (never negative)
        pb = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - x.shape[1] - pt)
        pr = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - x.shape[2] - pl)
        node = Node("Conv", "layer", ["x", "w", "b"], ["y"],
                    {"group": x.shape[3] if k == "depthwise_conv2d" else 1, "kernel_shape": [kh, kw],
                     "pads": [pt, pl, pb, pr], "strides": [sh, sw], "dilations": [dh, dw],
                     "depthwise": k == "depthwise_conv2d",
                     "output_mult": tuple(int(v) for v in a["output_mult"]),
                     "output_shift": tuple(int(v) for v in a["output_shift"]), **common})
    meta = {"inputs": [{"name": "x", "shape": list(t["x"].shape), "dtype": "float32"}],
            "outputs": [{"name": "y", "shape": list(out_shape), "dtype": "float32"}]}
    return Graph("vector", t, [node], ["x"], ["y"], layout="NHWC", quantized=True, meta=meta)


def vector_variant_builds(board_names=VARIANT_BOARDS):
    """(case, board, variant) for every vector of VARIANT_KINDS and every non-generic variant its layer lists on
    the board's target."""
    from tinyaot.boards import load_board
    from tinyaot.pipeline.variants import candidates

    out = []
    for case in _cases(VARIANT_KINDS):
        g = vector_graph(case, _arrays(case))
        if g is None:
            continue
        for board in board_names:
            for v in candidates(g.nodes[0], g, load_board(board).target()):
                if v.name != "generic":
                    out.append((case, board, v.name))
    return out


def planned_vector_graph(case: dict, board: str, variant: str):
    """(graph, offsets, arena_bytes, lower_bound) with the layer on `variant` for the board's target."""
    from tinyaot.boards import load_board
    from tinyaot.plan import lower_bound, plan
    from tinyaot.plan.liveness import graph_buffers
    from tinyaot.pipeline.variants import choose_variants

    g = vector_graph(case, _arrays(case))
    choose_variants(g, load_board(board).target(), {"layer": variant})
    assert g.nodes[0].attrs["variant"] == variant
    buffers = graph_buffers(g)
    p = plan(buffers)
    return g, p.offsets, p.arena_bytes, lower_bound(buffers).bytes


VARIANT_BUILDS = vector_variant_builds() if _index()["cases"] else []


def test_vectors_reach_every_variant_of_conv_depthwise_and_fc():
    names = {v for _, _, v in VARIANT_BUILDS}
    assert {"fold", "dw3x3", "dw3x3_fold", "mve_conv", "mve_1x1", "mve_dw", "mve_fc"} <= names, sorted(names)


def suite_variant_builds(builds=None) -> list:
    """One vector per (board, variant): the board's index into that pair's vectors (so the boards meet different
    vectors of a variant), a sanitized build each (~0.7 s); ci/cmsis_nn_vectors_variants.py runs every pair."""
    by_pair: dict = {}
    for case, board, variant in VARIANT_BUILDS if builds is None else builds:
        by_pair.setdefault((board, variant), []).append(case)
    return [(cases[VARIANT_BOARDS.index(board) % len(cases)], board, variant)
            for (board, variant), cases in sorted(by_pair.items())]


@pytest.mark.skipif(shutil.which("cc") is None, reason="no host C compiler")
@pytest.mark.parametrize("board", VARIANT_BOARDS)
def test_variant_kernels_match_vectors_on_host(board, tmp_path):
    """The board's (vector, variant) pairs of suite_variant_builds, each its own sanitized host build, == expected."""
    from tinyaot.toolchain.sanitize import build_sanitized

    ran = 0
    for k, (case, b, variant) in enumerate(suite_variant_builds()):
        if b != board:
            continue
        a = _arrays(case)
        g, offsets, arena, lb = planned_vector_graph(case, board, variant)
        host = build_sanitized(g, offsets, arena, lb, tmp_path / f"v{k}")
        got = host.run(a["input"]).reshape(a["expected"].shape)
        _assert_same(got, a["expected"], f"{variant} on {board}'s target (host C), {case['id']}")
        ran += 1
    assert ran
