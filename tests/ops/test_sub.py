"""Sub (TFLite SUB: ADD with the second term subtracted): a per-channel constant after a Conv (NHWC), a constant
minus an activation, two activations; deploys verified under QEMU and against onnxruntime, broadcasting checked on
the host over many samples, and the order of the operands matters (a - b is not b - a)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model
from tinyaot.api import compile_model
from tinyaot.oracle.reference import run_reference

C, H, W = 3, 4, 5


def test_sub_per_channel_constant_after_conv(tmp_path):
    conv, inits = conv_node("x", "c", "w", 2, C)
    m = save_model(tmp_path / "conv_sub.onnx", [conv, helper.make_node("Sub", ["c", "m"], ["y"])], [1, 2, H, W],
                   [1, C, H, W], inits + [const("m", np.array([0.2, -0.7, 1.5]).reshape(C, 1, 1))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, H, W]), tmp_path / "out")
    assert ("Sub", "tinyaot_elementwise_binary_s8") in layer_ops(r)


def test_constant_minus_activation_and_activation_minus_activation(tmp_path):
    nodes = [helper.make_node("Sub", ["one", "x"], ["a"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Sub", ["a", "r"], ["y"])]
    m = save_model(tmp_path / "sub2.onnx", nodes, [1, 12], [1, 12], [const("one", np.array([1.0]))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 12]), tmp_path / "out")
    assert [op for op, _ in layer_ops(r)] == ["Sub", "Relu", "Sub"]


def test_sub_is_not_commutative(tmp_path):
    """x - 3 and 3 - x on the same inputs: the int8 results are (nearly) negatives of each other in real terms."""
    ab = save_model(tmp_path / "ab.onnx", [helper.make_node("Sub", ["x", "k"], ["y"])], [1, 8], [1, 8],
                    [const("k", 3.0)])
    ba = save_model(tmp_path / "ba.onnx", [helper.make_node("Sub", ["k", "x"], ["y"])], [1, 8], [1, 8],
                    [const("k", 3.0)])
    cal = calibration(tmp_path / "cal.npz", [1, 8])
    x = np.load(cal)["x"][0]
    reals = []
    for model in (ab, ba):
        c = compile_model(model, cal)
        q = run_reference(c.graph, {c.input: c.quantize_input(x)})[c.output]
        reals.append(c.dequantize_output(q))
    np.testing.assert_allclose(reals[0], x - 3.0, atol=0.1)
    np.testing.assert_allclose(reals[1], 3.0 - x, atol=0.1)


@pytest.mark.parametrize("case", ["nchw_channel", "row", "pooled"])
def test_sub_broadcasting_reference_matches_onnxruntime(tmp_path, case):
    if case == "nchw_channel":
        nodes, shape, inits = [helper.make_node("Sub", ["x", "m"], ["y"])], [1, C, H, W], [
            const("m", np.array([1.0, 0.0, -2.0]).reshape(C, 1, 1))]
    elif case == "row":
        nodes, shape, inits = [helper.make_node("Sub", ["v", "x"], ["y"])], [3, 7], [const("v", np.arange(7) - 3.0)]
    else:  # an activation minus its own channel means (a centring step)
        nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Sub", ["x", "g"], ["y"])]
        shape, inits = [1, C, H, W], []
    m = save_model(tmp_path / f"{case}.onnx", nodes, shape, shape, inits)
    cal = calibration(tmp_path / "cal.npz", shape, n=40, seed=4)
    worst = host_layer_diffs(m, cal, np.load(cal)["x"])
    assert worst["Sub"][0] <= 1, worst
