"""Concat: channel concat of two Conv branches in NHWC (the ONNX axis 1 becomes physical axis 3; the branches'
parameters differ from the output's, so they are requantized), [1, N] with a sigmoid branch, a constant part, the H
axis, equal parameters as a plain copy; deploys verified under QEMU and against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model
from tinyaot.api import compile_model

H, W = 4, 5


def test_channel_concat_of_two_branches(tmp_path):
    a, ia = conv_node("x", "a", "wa", 2, 3, k=3, seed=1)
    b, ib = conv_node("x", "b", "wb", 2, 5, k=1, seed=2)
    nodes = [a, b, helper.make_node("Relu", ["b"], ["br"]), helper.make_node("Concat", ["a", "br"], ["y"], axis=1)]
    m = save_model(tmp_path / "cat.onnx", nodes, [1, 2, H, W], [1, 8, H, W], ia + ib)
    cal = calibration(tmp_path / "cal.npz", [1, 2, H, W])
    r = deploy_verified(m, cal, tmp_path / "out")
    (layer,) = [l for l in r["layers"] if l["op"] == "Concat"]
    assert layer["kernel"] == "tinyaot_concat_s8" and layer["output_shape"] == [1, H, W, 8]
    graph = compile_model(m, cal).graph
    node = [n for n in graph.nodes if n.op == "Concat"][0]
    assert node.attrs["axis"] == 3
    # an input is copied exactly when its parameters are the output's; the ReLU branch (range from 0) cannot be
    out = graph.tensors[node.outputs[0]].quant
    same = [(graph.tensors[i].quant.s, graph.tensors[i].quant.zp) == (out.s, out.zp) for i in node.inputs]
    assert [p["requantize"] for p in node.attrs["parts"]] == [int(not s) for s in same] and not same[1]


def test_concat_2d_with_sigmoid_branch_and_constant(tmp_path):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Concat", ["x", "k", "s"], ["y"], axis=-1)]
    m = save_model(tmp_path / "cat2.onnx", nodes, [1, 6], [1, 15], [const("k", np.linspace(-1, 1, 3).reshape(1, 3))])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 6]), tmp_path / "out")
    assert [op for op, _ in layer_ops(r)] == ["Sigmoid", "Concat"]
    assert r["layers"][1]["params_bytes"] == 3


def test_concat_of_equal_parameters_is_a_copy(tmp_path):
    m = save_model(tmp_path / "same.onnx", [helper.make_node("Concat", ["x", "x"], ["y"], axis=0)], [2, 3], [4, 3])
    cal = calibration(tmp_path / "cal.npz", [2, 3])
    node = compile_model(m, cal).graph.nodes[0]
    assert [p["requantize"] for p in node.attrs["parts"]] == [0, 0]
    deploy_verified(m, cal, tmp_path / "out")


@pytest.mark.parametrize("axis", [2, 3])
def test_spatial_axis_concat_reference_matches_onnxruntime(tmp_path, axis):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["r", "x"], ["y"], axis=axis)]
    out = [1, 3, H * (2 if axis == 2 else 1), W * (2 if axis == 3 else 1)]
    m = save_model(tmp_path / "cat_hw.onnx", nodes, [1, 3, H, W], out)
    cal = calibration(tmp_path / "cal.npz", [1, 3, H, W], n=30, seed=8)
    assert host_layer_diffs(m, cal, np.load(cal)["x"])["Concat"][0] <= 1
