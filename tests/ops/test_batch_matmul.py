"""BatchMatMul (ONNX MatMul of two activations) against CMSIS-NN's 5 batch_matmul vectors (the manner of
test_cmsis_nn_vectors.py, which lists this kind as adopted here): the numpy reference and the C kernel compiled for
the host, each == expected; random shapes (broadcast batches, adj flags, clamps, positive shifts) check reference ==
host C; and a model with a MatMul of two activations followed by a Softmax over a middle axis deploys under QEMU (C ==
reference, each layer within its tolerance of onnxruntime)."""
from __future__ import annotations

import ctypes
import json
from functools import lru_cache

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, deploy_verified, layer_ops, save_model
from shared_data import CMSIS_NN
from spatial_models import host_kernels
from tinyaot.core import fixedpoint as fp
from tinyaot.ops.batch_matmul import batch_matmul_s8, geometry

SENTINEL = 99


@lru_cache(maxsize=1)
def _cases() -> list[dict]:
    index = json.loads((CMSIS_NN / "index.json").read_text())
    return [c for c in index["cases"] if c["kind"] == "batch_matmul"]


def _arrays(case):
    with np.load(CMSIS_NN / case["npz"]) as z:
        return {k: z[k] for k in z.files}


def _quant(p):
    return dict(lhs_offset=p["lhs_offset"], rhs_offset=p["rhs_offset"], output_offset=p["output_offset"],
                output_mult=p["output_mult"], output_shift=p["output_shift"], act_min=p["activation_min"],
                act_max=p["activation_max"])


@pytest.fixture(scope="module")
def lib():
    dll = host_kernels("tinyaot_batch_matmul_s8.c")
    dll.tinyaot_batch_matmul_s8.restype = None
    dll.tinyaot_batch_matmul_s8.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 20
    return dll


def run_c(lib, lhs, rhs, p) -> np.ndarray:
    lhs, rhs = np.array(lhs, np.int8), np.array(rhs, np.int8)
    g = geometry(lhs.shape, rhs.shape, p["adj_x"], p["adj_y"])
    batch = np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    out = np.full((*batch, g[2], g[3]), SENTINEL, np.int8)
    q = _quant(p)
    lib.tinyaot_batch_matmul_s8(lhs.ctypes.data, rhs.ctypes.data, out.ctypes.data, *g, q["lhs_offset"],
                                q["rhs_offset"], q["output_offset"], q["output_mult"], q["output_shift"],
                                q["act_min"], q["act_max"])
    return out


def test_all_five_vectors_are_here():
    assert len(_cases()) == 5
    assert {(c["params"]["adj_x"], c["params"]["adj_y"]) for c in _cases()} == {(0, 0), (0, 1), (1, 0), (1, 1)}


@pytest.mark.parametrize("case", _cases(), ids=[c["id"] for c in _cases()])
def test_reference_and_host_c_match_vector(lib, case):
    a, p = _arrays(case), case["params"]
    want = a["expected"]
    got = batch_matmul_s8(a["lhs"], a["rhs"], adj_x=p["adj_x"], adj_y=p["adj_y"], **_quant(p))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_c(lib, a["lhs"], a["rhs"], p), want)


def test_host_c_matches_reference_on_random_shapes(lib):
    rng = np.random.default_rng(13)
    for _ in range(40):
        m, n, k = (int(v) for v in rng.integers(1, 9, 3))
        b0, b1 = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        adj_x, adj_y = (int(v) for v in rng.integers(0, 2, 2))
        lb = [b if rng.random() < 0.7 else 1 for b in (b0, b1)]
        rb = [b if rng.random() < 0.7 else 1 for b in (b0, b1)]
        rank_l, rank_r = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        ls = (lb + ([k, m] if adj_x else [m, k]))[4 - rank_l:]
        rs = (rb + ([n, k] if adj_y else [k, n]))[4 - rank_r:]
        lhs, rhs = rng.integers(-128, 128, ls).astype(np.int8), rng.integers(-128, 128, rs).astype(np.int8)
        mult, shift = fp.quantize_multiplier(float(rng.choice([rng.uniform(1e-5, 1e-2), rng.uniform(0.5, 3.0)])))
        lo = int(rng.integers(-128, 0)) if rng.random() < 0.3 else -128
        p = dict(adj_x=adj_x, adj_y=adj_y, lhs_offset=int(rng.integers(-127, 129)),
                 rhs_offset=int(rng.integers(-127, 129)), output_offset=int(rng.integers(-128, 128)),
                 output_mult=mult, output_shift=shift, activation_min=lo, activation_max=127)
        want = batch_matmul_s8(lhs, rhs, adj_x=adj_x, adj_y=adj_y, **_quant(p))
        np.testing.assert_array_equal(run_c(lib, lhs, rhs, p), want)


def test_matmul_of_activations_then_softmax_over_a_middle_axis_deploys_under_qemu(tmp_path):
    """x [2, 4, 6]: Tanh(x) @ Transpose(x) -> [2, 4, 4], Softmax over axis 1 (strided, not the innermost)."""
    nodes = [helper.make_node("Tanh", ["x"], ["a"]),
             helper.make_node("Transpose", ["x"], ["b"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["a", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=1)]
    m = save_model(tmp_path / "bmm.onnx", nodes, [2, 4, 6], [2, 4, 4])
    report = deploy_verified(m, calibration(tmp_path / "cal.npz", [2, 4, 6], scale=1.0), tmp_path / "out")
    ops = layer_ops(report)
    assert ("BatchMatMul", "tinyaot_batch_matmul_s8") in ops
    assert ("Softmax", "tinyaot_softmax_strided_s8") in ops
