"""Add beyond the same-shape residual: a constant that fuse_bias_add cannot fold into a bias (its producer is not a
Conv), numpy broadcasting of two activations, a scalar; the same-shape residual keeps the flat kernel. Deploys are
verified under QEMU and against onnxruntime, broadcasting cases also on the host over many samples."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model

C, H, W = 4, 3, 5


def test_add_constant_after_relu_and_pooled_broadcast(tmp_path):
    conv, inits = conv_node("x", "c", "w", 2, C)
    nodes = [conv, helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["r", "b"], ["rb"]),
             helper.make_node("GlobalAveragePool", ["rb"], ["g"]), helper.make_node("Add", ["rb", "g"], ["y"])]
    m = save_model(tmp_path / "add_bc.onnx", nodes, [1, 2, H, W], [1, C, H, W],
                   inits + [const("b", np.linspace(-1, 1, C).reshape(C, 1, 1))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, H, W]), tmp_path / "out")
    adds = [k for op, k in layer_ops(r) if op == "Add"]
    assert adds == ["tinyaot_elementwise_binary_s8"] * 2


def test_same_shape_residual_keeps_the_flat_kernel(tmp_path):
    conv, inits = conv_node("x", "c", "w", C, C)
    m = save_model(tmp_path / "res.onnx", [conv, helper.make_node("Add", ["c", "x"], ["y"])], [1, C, H, W],
                   [1, C, H, W], inits)
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, C, H, W]), tmp_path / "out")
    # a flat kernel (the board's cost model picks the fast one where TFLite's parameters allow, ops/add.py)
    assert ("Add", "tinyaot_elementwise_add_s8_fast") in layer_ops(r)


def test_add_scalar_2d(tmp_path):
    m = save_model(tmp_path / "adds.onnx", [helper.make_node("Add", ["x", "k"], ["y"])], [1, 10], [1, 10],
                   [const("k", 0.75)])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 10]), tmp_path / "out")
    assert layer_ops(r) == [("Add", "tinyaot_elementwise_binary_s8")]


@pytest.mark.parametrize("case", ["column", "nchw_channel", "pooled"])
def test_add_broadcasting_reference_matches_onnxruntime(tmp_path, case):
    if case == "column":
        nodes, shape, inits = [helper.make_node("Add", ["x", "v"], ["y"])], [5, 6], [
            const("v", np.linspace(-4, 4, 5).reshape(5, 1))]
    elif case == "nchw_channel":
        nodes, shape, inits = [helper.make_node("Add", ["b", "x"], ["y"])], [1, C, H, W], [
            const("b", np.linspace(-2, 1, C).reshape(C, 1, 1))]
    else:
        nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Add", ["g", "x"], ["y"])]
        shape, inits = [1, C, H, W], []
    m = save_model(tmp_path / f"{case}.onnx", nodes, shape, shape, inits)
    cal = calibration(tmp_path / "cal.npz", shape, n=40, seed=5)
    worst = host_layer_diffs(m, cal, np.load(cal)["x"])
    assert worst["Add"][0] <= 1, worst
