"""1-D layers over [N, C, L] (passes/lower_1d.py): each becomes its 2-D layer over [N, C, 1, L]. Every variant is
checked layer by layer against onnxruntime's QDQ layer fed the same int8 input (within the layer's tolerance); a
Conv-BN-Relu-MaxPool-Conv chain deploys and verifies under QEMU with no data movement between its layers."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from op_models import calibration, const, deploy_verified, host_layer_diffs, layer_ops, save_model
from tinyaot.api import compile_model

C, L = 4, 16
rng = np.random.default_rng(7)


def _w(name, shape):
    return const(name, rng.standard_normal(shape) * 0.4)


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _case(kind):
    """(nodes, initializers, output shape) of one 1-D layer reading x [1, C, L]."""
    if kind.startswith("conv_") and kind != "conv_transpose":
        attrs = {"standard": {}, "depthwise": {"group": C}, "grouped": {"group": 2}, "strided": {"strides": [2]},
                 "dilated": {"dilations": [2]}}[kind.split("_")[1]]
        group, stride, dil = attrs.get("group", 1), attrs.get("strides", [1])[0], attrs.get("dilations", [1])[0]
        c_out = C if group == C else 6
        pad = dil  # k = 3
        out_l = (L + 2 * pad - dil * 2 - 1) // stride + 1
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3], pads=[pad, pad], **attrs)
        return [node], [_w("w", (c_out, C // group, 3)), _w("b", (c_out,))], [1, c_out, out_l]
    if kind == "conv_transpose":
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2], pads=[1, 0])
        return [node], [_w("w", (C, 3, 3)), _w("b", (3,))], [1, 3, (L - 1) * 2 + 3 - 1]
    if kind == "maxpool":
        return [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], strides=[2])], [], [1, C, L // 2]
    if kind == "avgpool":
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], pads=[1, 1], count_include_pad=0)
        return [node], [], [1, C, L]
    if kind == "global_avgpool":
        return [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [], [1, C, 1]
    if kind == "batchnorm":
        inits = [const("g", rng.uniform(0.5, 1.5, C)), const("be", rng.normal(0, 0.2, C)),
                 const("m", rng.normal(0, 0.3, C)), const("v", rng.uniform(0.5, 2, C))]
        return [helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["y"])], inits, [1, C, L]
    if kind == "pad":
        return [helper.make_node("Pad", ["x", "p"], ["y"])], [_i64("p", [0, 0, 1, 0, 0, 2])], [1, C, L + 3]
    if kind == "resize":
        node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
        return [node], [const("s", [1, 1, 2])], [1, C, 2 * L]
    raise AssertionError(kind)


KINDS = ["conv_standard", "conv_depthwise", "conv_grouped", "conv_strided", "conv_dilated", "conv_transpose",
         "maxpool", "avgpool", "global_avgpool", "batchnorm", "pad", "resize"]


@pytest.mark.parametrize("kind", KINDS)
def test_1d_layer_lowers_to_2d(tmp_path, kind):
    nodes, inits, y_shape = _case(kind)
    m = save_model(tmp_path / f"{kind}.onnx", nodes, [1, C, L], y_shape, inits)
    cal = calibration(tmp_path / "cal.npz", [1, C, L], n=8)
    compiled = compile_model(m, cal)
    # every layer runs on 2-D data: 4-D activations (NHWC [N, 1, L, C]), or the [N, C] of a global pool
    layers = [n for n in compiled.graph.nodes if n.op not in ("Reshape", "Transpose")]
    assert layers and all(len(compiled.graph.tensors[n.inputs[0]].shape) == 4 for n in layers)
    samples = np.load(cal)["x"][:4]
    diffs = host_layer_diffs(m, cal, samples)
    bad = {op: d for op, d in diffs.items() if d[0] > d[1]}
    assert not bad, bad


def test_1d_chain_has_no_data_movement_and_verifies_under_qemu(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[5], pads=[2, 2]),
             helper.make_node("BatchNormalization", ["c1", "g", "be", "m", "v"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3], pads=[1, 1], group=6),
             helper.make_node("Relu", ["c2"], ["y"])]
    inits = [_w("w1", (6, C, 5)), _w("b1", (6,)), const("g", rng.uniform(0.5, 1.5, 6)),
             const("be", rng.normal(0, 0.2, 6)), const("m", rng.normal(0, 0.3, 6)), const("v", rng.uniform(0.5, 2, 6)),
             _w("w2", (6, 1, 3)), _w("b2", (6,))]
    m = save_model(tmp_path / "chain1d.onnx", nodes, [1, C, L], [1, 6, L // 2], inits)
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, C, L]), tmp_path / "out")
    ops = layer_ops(r)
    assert [op for op, _ in ops if op not in ("Reshape", "Transpose")] == ["Conv", "MaxPool", "Conv"], ops
    # only the graph input and output change layout ([1, C, L] <-> NHWC [1, 1, L, C]): no move inside the chain
    assert sum(op == "Transpose" for op, _ in ops) <= 2, ops
