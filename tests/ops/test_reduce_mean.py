"""ReduceMean over H and W end to end (TFLite MEAN style: its own output parameters, one requantization whose
multiplier includes 1/(H*W)): deployed for mps2-an386 with keepdims 1 and 0, axes as an attribute (opset 13) and as
an input (opset 18), each layer within 1 LSB of onnxruntime's QDQ ReduceMean; other reductions refused."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError
from tinyaot.core.fixedpoint import quantize_multiplier

from op_models import calibration, conv_node, deploy_verified, save_model
from spatial_models import float_model_gap, layer_diff

# input rounding averaged over H*W plus the output rounding; in output LSB the first scales with s_in / s_out
MARGIN_LSB = 0.6
# ReduceMean's own kernel: by default mean_to_pool turns a spatial mean into GlobalAveragePool
OWN = ("mean_to_pool",)


def _mean_model(tmp_path, keepdims, opset=13, axes=(2, 3), in_shape=(1, 4, 5, 6), name="mean"):
    c = in_shape[1]
    out_shape = [1, c, 1, 1] if keepdims else [1, c]
    if opset >= 18:  # axes moved from an attribute to an int64 input
        inits = [numpy_helper.from_array(np.asarray(axes, np.int64), "axes")]
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name=name, keepdims=keepdims)
    else:
        inits = []
        node = helper.make_node("ReduceMean", ["x"], ["y"], name=name, axes=list(axes), keepdims=keepdims)
    return save_model(tmp_path / "mean.onnx", [node], list(in_shape), out_shape, inits, opset=opset)


@pytest.mark.parametrize("keepdims, opset, axes", [(1, 13, (2, 3)), (0, 13, (-1, -2)), (0, 18, (3, 2))],
                         ids=["keepdims_opset13", "no_keepdims_negative_axes", "axes_input_opset18"])
def test_spatial_mean_deploys(tmp_path, keepdims, opset, axes):
    m = _mean_model(tmp_path, keepdims, opset, axes)
    cal = calibration(tmp_path / "cal.npz", [1, 4, 5, 6])
    report = deploy_verified(m, cal, tmp_path / "out", disable_passes=OWN)
    assert layer_diff(report, "ReduceMean") <= 1
    (layer,) = [l for l in report["layers"] if l["op"] == "ReduceMean"]
    assert layer["kernel"] == "tinyaot_avgpool_requant_s8"
    assert layer["output_shape"] == ([1, 1, 1, 4] if keepdims else [1, 4])
    g = compile_model(m, cal, disable_passes=OWN).graph
    (node,) = [n for n in g.nodes if n.op == "ReduceMean"]
    q_in, q_out = g.tensors[node.inputs[0]].quant, g.tensors[node.outputs[0]].quant
    # its own calibrated output parameters (a mean of 30 values spans far less than its input) ...
    assert q_out.s < 0.5 * q_in.s
    # ... reached by one multiplier that folds in the 1/(H*W)
    assert (node.attrs["output_mult"], node.attrs["output_shift"]) == quantize_multiplier(q_in.s / (q_out.s * 30))
    assert float_model_gap(m, cal) <= 0.5 * q_in.s / q_out.s + MARGIN_LSB


def test_mean_after_conv_with_relu_fused(tmp_path):
    """Conv -> ReduceMean -> Relu (a classifier head): NHWC straight into the mean, the Relu fused as its clamp."""
    conv, inits = conv_node("x", "c", "w", 2, 5)
    nodes = [conv, helper.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Relu", ["m"], ["y"])]
    m = save_model(tmp_path / "head.onnx", nodes, [1, 2, 6, 6], [1, 5], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 2, 6, 6])
    report = deploy_verified(m, cal, tmp_path / "out", disable_passes=OWN)
    assert [l["op"] for l in report["layers"]] == ["Transpose", "Conv", "ReduceMean"]
    assert layer_diff(report, "ReduceMean") <= 1


@pytest.mark.parametrize("axes, in_shape, out_shape", [
    ((1,), (1, 4, 5, 6), [1, 1, 5, 6]),
    ((1, 2, 3), (1, 4, 5, 6), [1, 1, 1, 1]),
    ((3,), (1, 4, 5, 6), [1, 4, 5, 1]),
    ((1, 2), (1, 4, 5), [1, 1, 1]),
], ids=["channels", "all_but_batch", "width_only", "3d"])
def test_other_reductions_are_refused(tmp_path, axes, in_shape, out_shape):
    node = helper.make_node("ReduceMean", ["x"], ["y"], name="reduce", axes=list(axes), keepdims=1)
    m = save_model(tmp_path / "bad.onnx", [node], list(in_shape), out_shape)
    with pytest.raises(TinyaotError) as err:
        compile_model(m, calibration(tmp_path / "cal.npz", list(in_shape), n=2))
    msg = str(err.value)
    assert "ReduceMean node 'reduce'" in msg and "axes [2, 3]" in msg and "\n" not in msg
