"""Abs: every int8 input against onnxruntime's QDQ Abs (within 1 LSB), the numpy reference against the same C
compiled for the host (bit for bit, all 256 inputs), and a small model deploying under QEMU (C == reference,
each layer within 1 LSB of onnxruntime)."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import ALL_INT8, deploy_after_conv, layer_ops, lut_exhaustive
from tinyaot.oracle.reference import run_reference
from tinyaot.toolchain.hostjit import HostModel


def test_abs_on_every_int8_input_matches_onnxruntime_and_the_host_c(tmp_path):
    worst, compiled = lut_exhaustive(tmp_path, helper.make_node("Abs", ["x"], ["y"]), cal_scale=3.0)
    assert worst <= 1
    g = compiled.graph
    qi, qo = g.tensors[compiled.input].quant, g.tensors[compiled.output].quant
    assert qi.zp != 0  # an asymmetric input range, so |x - zp| is not |q|: the offset matters
    ref = run_reference(g, {compiled.input: ALL_INT8})[compiled.output].reshape(-1)
    # the real values |x| on the output grid (half a step, plus float slack, away)
    x = (np.arange(-128, 128) - qi.zp) * qi.s
    lo, hi = (-128 - qo.zp) * qo.s, (127 - qo.zp) * qo.s
    np.testing.assert_allclose((ref.astype(float) - qo.zp) * qo.s, np.clip(np.abs(x), lo, hi), atol=qo.s / 2 + 1e-6)
    host = HostModel(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound)
    np.testing.assert_array_equal(host(ALL_INT8).reshape(-1), ref)


def test_abs_deploys_after_conv_under_qemu(tmp_path):
    assert ("Abs", "tinyaot_abs_s8") in layer_ops(deploy_after_conv(tmp_path, "Abs"))
