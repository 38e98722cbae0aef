"""Softmax over a non-innermost axis: templates/kernels/tinyaot_softmax_strided_s8.c on the host == the numpy
reference (ops/softmax.py, rows gathered along the axis) on random shapes and axes, in place too, and row for row
== the contiguous kernel's reference on the transposed tensor (the two kernels are the same arithmetic)."""
from __future__ import annotations

import ctypes

import numpy as np

from spatial_models import host_kernels
from tinyaot.core import fixedpoint as fp
from tinyaot.ops.softmax import softmax_s8


def _reference(x, axis, q):
    moved = np.moveaxis(x, axis, -1)
    y = softmax_s8(moved.reshape(-1, moved.shape[-1]), input_mult=q[0], input_left_shift=q[1], diff_min=q[2])
    return np.moveaxis(y.reshape(moved.shape), -1, axis)


def test_strided_softmax_host_c_matches_reference():
    lib = host_kernels("tinyaot_softmax_strided_s8.c")
    fn = lib.tinyaot_softmax_strided_s8
    fn.restype, fn.argtypes = None, [ctypes.c_void_p] + [ctypes.c_int32] * 6 + [ctypes.c_void_p]
    rng = np.random.default_rng(21)
    for k in range(30):
        shape = tuple(int(v) for v in rng.integers(1, 7, int(rng.integers(2, 5))))
        axis = int(rng.integers(0, len(shape)))
        x = rng.integers(-128, 128, shape).astype(np.int8)
        q = fp.softmax_params(float(rng.uniform(0.01, 0.5)))
        want = _reference(x, axis, q)
        outer, n, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
        out = np.full(shape, 99, np.int8)
        fn(x.ctypes.data, outer, n, inner, *q, out.ctypes.data)
        np.testing.assert_array_equal(out, want, err_msg=f"shape {shape} axis {axis}")
        if k % 3 == 0:  # in place: the output buffer is the input
            y = x.copy()
            fn(y.ctypes.data, outer, n, inner, *q, y.ctypes.data)
            np.testing.assert_array_equal(y, want)
