"""Pad, mode constant: pads as an input (opset 13) before a Conv in NHWC (the pads follow the layout), a non-zero
constant quantized to the input's grid, the opset-2 attribute form, opset 18's axes; reflect/edge refused by name;
deploys verified under QEMU and against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from op_models import calibration, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model
from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError

C, H, W = 3, 4, 5


def _pads(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def test_pad_then_conv_in_nhwc(tmp_path):
    conv, inits = conv_node("xp", "y", "w", C, 2, k=3)
    conv.attribute.pop()  # no padding in the Conv itself: the Pad does it (asymmetric: 1 top, 2 bottom, 0/1 sides)
    pads = [0, 0, 1, 0, 0, 0, 2, 1]
    nodes = [helper.make_node("Pad", ["x", "p"], ["xp"], mode="constant"), conv]
    m = save_model(tmp_path / "padconv.onnx", nodes, [1, C, H, W], [1, 2, H + 1, W - 1],
                   inits + [_pads("p", pads)])
    # the Pad kernel itself: by default fold_pad moves a zero Pad into the Conv's own padding
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, C, H, W]), tmp_path / "out",
                        disable_passes=("fold_pad",))
    assert ("Pad", "tinyaot_pad_s8") in layer_ops(r)
    (layer,) = [l for l in r["layers"] if l["op"] == "Pad"]
    assert layer["output_shape"] == [1, H + 3, W + 1, C]


def test_pad_nonzero_constant_2d(tmp_path):
    value = numpy_helper.from_array(np.asarray(0.75, np.float32), "v")
    m = save_model(tmp_path / "pad2d.onnx", [helper.make_node("Pad", ["x", "p", "v"], ["y"])], [2, 5], [3, 9],
                   [_pads("p", [1, 3, 0, 1]), value])
    cal = calibration(tmp_path / "cal.npz", [2, 5])
    g = compile_model(m, cal).graph
    q = g.tensors["x"].quant
    assert g.nodes[0].attrs["pad_value"] == int(np.clip(np.rint(np.float32(0.75) / np.float32(q.s)) + q.zp, -128, 127))
    deploy_verified(m, cal, tmp_path / "out")


def test_pad_attribute_form_opset_10(tmp_path):
    node = helper.make_node("Pad", ["x"], ["y"], mode="constant", pads=[0, 0, 1, 1, 0, 0, 1, 2], value=-0.5)
    m = save_model(tmp_path / "pad10.onnx", [node], [1, C, H, W], [1, C, H + 2, W + 3], opset=10)
    cal = calibration(tmp_path / "cal.npz", [1, C, H, W], n=30, seed=9)
    assert host_layer_diffs(m, cal, np.load(cal)["x"])["Pad"][0] == 0


def test_pad_axes_input_opset_18(tmp_path):
    node = helper.make_node("Pad", ["x", "p", "", "ax"], ["y"])
    axes = numpy_helper.from_array(np.asarray([-1], np.int64), "ax")
    m = save_model(tmp_path / "pad18.onnx", [node], [1, C, H, W], [1, C, H, W + 3], [_pads("p", [2, 1]), axes],
                   opset=18)
    cal = calibration(tmp_path / "cal.npz", [1, C, H, W], n=10)
    g = compile_model(m, cal).graph
    (pad,) = [n for n in g.nodes if n.op == "Pad"]
    # only the last axis (axes = [-1]) is padded, 2 before and 1 after; no conv follows, so the layout stays ONNX's
    assert pad.attrs["pads"] == [0, 0, 0, 2, 0, 0, 0, 1] and g.tensors[pad.outputs[0]].shape == (1, C, H, W + 3)
    assert host_layer_diffs(m, cal, np.load(cal)["x"])["Pad"][0] == 0


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_other_modes_are_refused_by_name(tmp_path, mode):
    m = save_model(tmp_path / "padr.onnx", [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [1, 6], [1, 8],
                   [_pads("p", [0, 1, 0, 1])])
    with pytest.raises(TinyaotError, match=f"mode '{mode}' is not supported"):
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 6]))


def test_negative_pads_are_refused(tmp_path):
    m = save_model(tmp_path / "padn.onnx", [helper.make_node("Pad", ["x", "p"], ["y"])], [1, 6], [1, 5],
                   [_pads("p", [0, -1, 0, 0])])
    with pytest.raises(TinyaotError, match="negative pads"):
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 6]))

