"""Sigmoid and Tanh at 16 bits (tinyaot/ops/s16_lut.py, a 513-entry table with linear interpolation): for all 65,536
int16 inputs at input ranges from tiny to saturating, the numpy reference is within 1 LSB of the float function
followed by QuantizeLinear's float32 rounding (onnxruntime's int16 QDQ) and within 0.5 + 0.25 LSB of the exact
value (the interpolation's error bound), and the host-compiled C kernel equals it bit for bit (table position
scales 0, small, typical and at the saturation cap)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from spatial_models import host_kernels
from tinyaot.core.quant16 import activation_qparams16
from tinyaot.ops.s16_lut import K_CAP, lut_interp_s16, make_table, position_scale

ALL16 = np.arange(-32768, 32768, dtype=np.int64)
RANGES = (1e-4, 0.5, 3.0, 8.0, 12.0, 40.0, 1e5)


def _f(kind, x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x)) if kind == "sigmoid" else np.tanh(x)


@pytest.mark.parametrize("kind", ["sigmoid", "tanh"])
def test_all_inputs_within_one_lsb_of_float_qdq(kind):
    table = make_table(kind)
    for r in RANGES:
        s = activation_qparams16(-r, r).s
        ours = lut_interp_s16(ALL16, table, position_scale(kind, s), kind == "tanh").astype(np.int64)
        x32 = ALL16.astype(np.float32) * np.float32(s)  # DequantizeLinear in float32
        y32 = _f(kind, x32.astype(np.float64)).astype(np.float32)
        qdq = np.clip(np.rint(y32 / np.float32(1.0 / 32768)), -32768, 32767)
        assert np.abs(ours - qdq).max() <= 1, (kind, r)
        exact = np.clip(_f(kind, ALL16 * s) * 32768, -32768, 32767)
        assert np.abs(ours - exact).max() < 0.75, (kind, r, float(np.abs(ours - exact).max()))
    assert lut_interp_s16(np.array([0]), table, 1, kind == "tanh")[0] == (16384 if kind == "sigmoid" else 0)


def test_host_c_equals_numpy_for_all_inputs():
    lib = host_kernels("tinyaot_lut_interp_s16.c")
    fn = lib.tinyaot_lut_interp_s16
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    x16 = np.ascontiguousarray(ALL16.astype(np.int16))
    for kind in ("sigmoid", "tanh"):
        table = np.ascontiguousarray(make_table(kind))
        for k in (0, 1, position_scale(kind, 3.0 / 32767), position_scale(kind, 40.0 / 32767), K_CAP):
            p = np.array([k, int(kind == "tanh")], np.int64)
            out = np.zeros(ALL16.size, np.int16)
            assert fn(x16.ctypes.data, ALL16.size, table.ctypes.data, p.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, lut_interp_s16(ALL16, table, k, kind == "tanh"), err_msg=f"{kind} {k}")
