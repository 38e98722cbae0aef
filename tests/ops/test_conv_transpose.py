"""ConvTranspose end to end: tiny float models deployed for mps2-an386 (C under QEMU == numpy reference, the layer
within 1 LSB of onnxruntime's QDQ ConvTranspose on the same int8 input), the padding rules (explicit pads,
output_padding, auto_pad SAME_UPPER / SAME_LOWER / VALID, output_shape) against the float model in onnxruntime, and
the refusals. The kernel itself is matched to CMSIS-NN's vectors in test_transpose_conv_vectors.py."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError

from op_models import calibration, const, conv_node, deploy_verified, save_model
from spatial_models import float_model_gap, layer_diff

# Input rounding plus per-channel int8 weights: measured 1.3-1.6 output LSB on these layers. A pad on the wrong side
# moves whole rows and costs tens of LSB, so 3 separates the two.
FLOAT_GAP_LSB = 3.0


def _convt(tmp_path, name, attrs, in_shape, out_shape, c_in=3, c_out=4, k=3, seed=0, relu=False):
    rng = np.random.default_rng(seed)
    inits = [const("w", rng.standard_normal((c_in, c_out, k, k)) * 0.3), const("b", rng.standard_normal(c_out) * 0.1)]
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t" if relu else "y"], name="up", **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    return save_model(tmp_path / f"{name}.onnx", nodes, in_shape, out_shape, inits)


def test_strided_padded_with_output_padding_and_relu(tmp_path):
    m = _convt(tmp_path, "convt", dict(strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 1]), [1, 3, 5, 4],
               [1, 4, 11, 9], relu=True)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 5, 4])
    report = deploy_verified(m, cal, tmp_path / "out")
    assert layer_diff(report, "ConvTranspose") <= 1
    (layer,) = [l for l in report["layers"] if l["op"] == "ConvTranspose"]
    assert layer["kernel"] == "tinyaot_transpose_conv_s8" and layer["output_shape"] == [1, 11, 9, 4]
    # the Relu fused into the kernel's clamp: no separate layer
    assert [l["op"] for l in report["layers"]].count("Relu") == 0
    # MACs counted: per axis, the (input, tap) pairs landing inside the output, times C_in * C_out
    pairs_h = sum(0 <= iy * 2 + ky - 1 < 11 for iy in range(5) for ky in range(3))
    pairs_w = sum(0 <= ix * 2 + kx - 0 < 9 for ix in range(4) for kx in range(3))
    assert layer["macs"] == pairs_h * pairs_w * 3 * 4
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


def test_decoder_between_convs_stays_nhwc(tmp_path):
    """Conv -> ConvTranspose (stride 2, 2x2 kernel: a learned 2x upsampling) -> Conv: one layout change in, one out."""
    rng = np.random.default_rng(3)
    c1, i1 = conv_node("x", "a", "w1", 2, 4)
    c2, i2 = conv_node("u", "y", "w2", 3, 2, seed=4)
    up = helper.make_node("ConvTranspose", ["a", "wt", "bt"], ["u"], strides=[2, 2], kernel_shape=[2, 2])
    inits = i1 + i2 + [const("wt", rng.standard_normal((4, 3, 2, 2)) * 0.4), const("bt", rng.standard_normal(3) * 0.1)]
    m = save_model(tmp_path / "decoder.onnx", [c1, up, c2], [1, 2, 4, 3], [1, 2, 8, 6], inits)
    report = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, 4, 3]), tmp_path / "out")
    assert layer_diff(report, "ConvTranspose") <= 1
    assert [l["op"] for l in report["layers"]] == ["Transpose", "Conv", "ConvTranspose", "Conv", "Transpose"]


@pytest.mark.parametrize("attrs, out_hw", [
    (dict(strides=[2, 2], auto_pad="SAME_UPPER"), [10, 8]),   # odd total padding: the extra pad at the end
    (dict(strides=[2, 2], auto_pad="SAME_LOWER"), [10, 8]),   # ... at the beginning
    (dict(strides=[2, 3], auto_pad="VALID"), [11, 12]),
    (dict(strides=[2, 2], output_shape=[10, 9]), [10, 9]),    # pads derived from output_shape, extra at the start
    (dict(strides=[3, 2], pads=[2, 0, 1, 2], output_padding=[2, 1]), [14, 8]),
    (dict(strides=[2, 2], output_shape=[12, 9]), [12, 9]),    # one row past the full 11: it gets the bias alone
], ids=["same_upper", "same_lower", "valid", "output_shape", "pads_output_padding", "output_shape_past_full"])
def test_padding_rules_match_the_float_model(tmp_path, attrs, out_hw):
    m = _convt(tmp_path, "convt", attrs, [1, 3, 5, 4], [1, 4, *out_hw], seed=1)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 5, 4], n=6)
    compiled = compile_model(m, cal)
    (node,) = [n for n in compiled.graph.nodes if n.op == "ConvTranspose"]
    assert "auto_pad" not in node.attrs and "output_shape" not in node.attrs  # resolved to explicit pads
    assert compiled.graph.tensors[node.outputs[0]].shape == (1, *out_hw, 4)
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


@pytest.mark.parametrize("attrs, out_hw", [(dict(strides=[2, 2], auto_pad="SAME_UPPER"), [10, 8]),
                                           (dict(strides=[2, 2], output_shape=[12, 9]), [12, 9])],
                         ids=["same_upper", "output_shape_past_full"])
def test_resolved_padding_deploys(tmp_path, attrs, out_hw):
    m = _convt(tmp_path, "convt", attrs, [1, 3, 5, 4], [1, 4, *out_hw], seed=2)
    report = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 3, 5, 4]), tmp_path / "out")
    assert layer_diff(report, "ConvTranspose") <= 1


@pytest.mark.parametrize("attrs, c_out, words", [
    (dict(group=3), 3, "group=3"),
    (dict(dilations=[2, 2]), 4, "dilations [2, 2]"),
])
def test_refused_with_the_node_named(tmp_path, attrs, c_out, words):
    rng = np.random.default_rng(0)
    w_shape = (3, 1, 3, 3) if "group" in attrs else (3, c_out, 3, 3)
    out_hw = [7, 6] if "group" in attrs else [9, 8]
    m = save_model(tmp_path / "bad.onnx", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", **attrs)],
                   [1, 3, 5, 4], [1, c_out, *out_hw], [const("w", rng.standard_normal(w_shape))])
    with pytest.raises(TinyaotError) as err:
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 3, 5, 4], n=2))
    msg = str(err.value)
    assert "ConvTranspose node 'up'" in msg and words in msg and "\n" not in msg

