"""Mul: a per-channel constant (NCHW input and, after a Conv, NHWC), squeeze-excitation (an activation times its
pooled, sigmoid-gated channel means), x * x, a fused ReLU; every deploy verified under QEMU against the numpy
reference and layer by layer against onnxruntime; broadcasting cases checked on the host over many samples."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model

C, H, W = 3, 4, 5
SCALE = np.array([0.5, -2.0, 3.0]).reshape(C, 1, 1)


def test_mul_per_channel_constant_on_the_input(tmp_path):
    m = save_model(tmp_path / "mul_c.onnx", [helper.make_node("Mul", ["x", "s"], ["y"])], [1, C, H, W],
                   [1, C, H, W], [const("s", SCALE)])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, C, H, W]), tmp_path / "out")
    assert layer_ops(r) == [("Mul", "tinyaot_elementwise_binary_s8")]
    assert r["layers"][0]["params_bytes"] == C  # the int8 constant in flash


def test_mul_per_channel_constant_after_conv_in_nhwc(tmp_path):
    conv, inits = conv_node("x", "c", "w", 2, C)
    m = save_model(tmp_path / "conv_mul.onnx", [conv, helper.make_node("Mul", ["c", "s"], ["y"])], [1, 2, H, W],
                   [1, C, H, W], inits + [const("s", SCALE)])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, H, W]), tmp_path / "out")
    # input -> NHWC, Conv, Mul, NHWC -> the NCHW graph output
    assert [op for op, _ in layer_ops(r)] == ["Transpose", "Conv", "Mul", "Transpose"]
    assert r["layers"][2]["output_shape"] == [1, H, W, C]  # the constant was transposed to [1, 1, 1, C]


def test_mul_squeeze_excitation(tmp_path):
    conv, inits = conv_node("x", "c", "w", 2, 4)
    nodes = [conv, helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Sigmoid", ["g"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    m = save_model(tmp_path / "se.onnx", nodes, [1, 2, H, W], [1, 4, H, W], inits)
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, H, W]), tmp_path / "out")
    assert ("Mul", "tinyaot_elementwise_binary_s8") in layer_ops(r)
    assert ("Sigmoid", "tinyaot_lut_s8") in layer_ops(r)


def test_mul_square_and_fused_relu(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Mul", ["sq", "k"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    m = save_model(tmp_path / "sq.onnx", nodes, [1, 16], [1, 16], [const("k", np.array(-0.5))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 16]), tmp_path / "out")
    # the ReLU clamps inside the second Mul: two layers, no standalone clamp
    assert [op for op, _ in layer_ops(r)] == ["Mul", "Mul"]


@pytest.mark.parametrize("case", ["row_times_vector", "scalar", "outer_product", "nchw_se"])
def test_mul_broadcasting_reference_matches_onnxruntime(tmp_path, case):
    """Host only: the numpy reference, layer by layer, against onnxruntime's QDQ Mul over 40 samples."""
    if case == "row_times_vector":
        nodes, shape, out, inits = [helper.make_node("Mul", ["x", "v"], ["y"])], [2, 8], [2, 8], [
            const("v", np.linspace(-3, 3, 8))]
    elif case == "scalar":
        nodes, shape, out, inits = [helper.make_node("Mul", ["k", "x"], ["y"])], [1, 6, 3], [1, 6, 3], [
            const("k", 0.37)]
    elif case == "outer_product":
        nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("Mul", ["xt", "x"], ["y"])]
        shape, out, inits = [1, 6], [6, 6], []
    else:
        nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Mul", ["x", "g"], ["y"])]
        shape, out, inits = [1, C, H, W], [1, C, H, W], []
    m = save_model(tmp_path / f"{case}.onnx", nodes, shape, out, inits)
    cal = calibration(tmp_path / "cal.npz", shape, n=40, seed=3)
    samples = np.load(cal)["x"]
    worst = host_layer_diffs(m, cal, samples)
    assert worst["Mul"][0] <= 1, worst
