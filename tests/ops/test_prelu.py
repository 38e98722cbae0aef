"""PRelu with a constant slope: per channel after a Conv (NHWC, slope [C, 1, 1] with negative, zero and > 1
values), per feature on [1, N] (slope [N]), a scalar slope on every int8 input; deploys verified under QEMU and
against onnxruntime, and the parameter cost (8 bytes per slope value plus the shared positive multiplier)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import (ALL_INT8, calibration, const, conv_node, deploy_verified, host_layer_diffs,
                       int8_layer_diffs, layer_ops, save_model)
from tinyaot.errors import TinyaotError
from tinyaot.api import compile_model

C, H, W = 4, 3, 5
SLOPES = np.array([0.1, -0.5, 0.0, 1.7]).reshape(C, 1, 1)


def test_prelu_per_channel_after_conv(tmp_path):
    conv, inits = conv_node("x", "c", "w", 2, C)
    m = save_model(tmp_path / "prelu.onnx", [conv, helper.make_node("PRelu", ["c", "a"], ["y"])], [1, 2, H, W],
                   [1, C, H, W], inits + [const("a", SLOPES)])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, H, W]), tmp_path / "out")
    (layer,) = [l for l in r["layers"] if l["op"] == "PRelu"]
    assert layer["kernel"] == "tinyaot_prelu_s8" and layer["params_bytes"] == 8 * C + 8


def test_prelu_per_feature_2d(tmp_path):
    m = save_model(tmp_path / "prelu2d.onnx", [helper.make_node("PRelu", ["x", "a"], ["y"])], [1, 6], [1, 6],
                   [const("a", np.array([0.25, -0.25, 0.5, 2.0, 0.0, 0.01]))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 6]), tmp_path / "out")
    assert layer_ops(r) == [("PRelu", "tinyaot_prelu_s8")]


@pytest.mark.parametrize("slope", [0.2, -0.3, 1.5])
def test_prelu_scalar_slope_on_every_int8_input(tmp_path, slope):
    m = save_model(tmp_path / "p.onnx", [helper.make_node("PRelu", ["x", "a"], ["y"])], [1, 256], [1, 256],
                   [const("a", np.array([slope]))])
    worst, compiled = int8_layer_diffs(m, calibration(tmp_path / "cal.npz", [1, 256]), [ALL_INT8])
    assert worst["PRelu"] <= 1
    assert compiled.graph.nodes[0].attrs["count"] == 1


def test_prelu_nchw_layout_blocks_and_host_check(tmp_path):
    """On the NCHW graph input the slope varies along axis 1 with H*W elements after it: count C, inner H*W."""
    m = save_model(tmp_path / "pn.onnx", [helper.make_node("PRelu", ["x", "a"], ["y"])], [1, C, H, W],
                   [1, C, H, W], [const("a", SLOPES)])
    cal = calibration(tmp_path / "cal.npz", [1, C, H, W], n=40, seed=7)
    node = compile_model(m, cal).graph.nodes[0]
    assert (node.attrs["outer"], node.attrs["count"], node.attrs["inner"]) == (1, C, H * W)
    assert host_layer_diffs(m, cal, np.load(cal)["x"])["PRelu"][0] <= 1


def test_prelu_slope_must_be_constant(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("PRelu", ["x", "r"], ["y"])]
    m = save_model(tmp_path / "pv.onnx", nodes, [1, 4], [1, 4])
    with pytest.raises(TinyaotError, match="slope must be a constant"):
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 4]))
