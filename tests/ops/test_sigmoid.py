"""Sigmoid as a 256-entry table with TFLite's fixed output parameters (scale 1/256, zero point -128): every table
entry against onnxruntime's QDQ Sigmoid, a deploy after a Conv and x * sigmoid(x) (SiLU), verified under QEMU."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import calibration, deploy_after_conv, deploy_verified, layer_ops, lut_exhaustive, save_model


def test_sigmoid_table_against_onnxruntime_on_every_input(tmp_path):
    worst, compiled = lut_exhaustive(tmp_path, helper.make_node("Sigmoid", ["x"], ["y"]))
    assert worst <= 1
    out = compiled.graph.tensors[compiled.output].quant
    assert (out.s, out.zp) == (1.0 / 256, -128)
    table = compiled.graph.nodes[0].attrs["table"].astype(int)
    assert np.all(np.diff(table) >= 0)  # monotonic, as sigmoid is


def test_sigmoid_deploys_after_conv(tmp_path):
    r = deploy_after_conv(tmp_path, "Sigmoid")
    assert ("Sigmoid", "tinyaot_lut_s8") in layer_ops(r)
    assert r["quantization"]["output"] == {"scale": 1.0 / 256, "zero_point": -128}


def test_silu(tmp_path):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    m = save_model(tmp_path / "silu.onnx", nodes, [1, 20], [1, 20])
    cal = calibration(tmp_path / "cal.npz", [1, 20])
    # the Sigmoid table and the Mul kernel themselves; by default fuse_swish makes the pair one Swish table
    r = deploy_verified(m, cal, tmp_path / "out", disable_passes=("fuse_swish",))
    assert [op for op, _ in layer_ops(r)] == ["Sigmoid", "Mul"]
    assert [op for op, _ in layer_ops(deploy_verified(m, cal, tmp_path / "fused"))] == ["Swish"]
