"""Bias quantization that never saturates, and the compile-time bounds of the kernels' int32 intermediates
(tinyaot/compress/quantize.py fit_channel_scales, tinyaot/compress/bounds.py): hand cases with exact numbers,
then the shared model whose biases used to be clamped (vww_mobilenetv1_025)."""
from __future__ import annotations

import numpy as np
import pytest

from tinyaot.api import compile_model
from tinyaot.compress.bounds import (INT32_MAX, channel_bounds, input_magnitude, offset_input_max,
                                     requantized_max)
from tinyaot.core.quant import RAISED_TARGET, fit_channel_scales, quantize_bias
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier

from shared_data import MODELS, calibration_file

LAYERS = ("Conv", "FullyConnected", "ConvTranspose")


# ---- raising a channel's weight scale to fit its bias -----------------------------------------------------------

def test_a_channel_that_fits_keeps_its_natural_scale():
    # max|w| = 0.5 -> scale 0.5/127; bias 0.1 at s_in 0.5 is 0.1 / (0.5 * 0.5/127) = 50.8 -> 51 units
    q, wq, qb, raised = fit_channel_scales(np.array([[0.5, -0.25]]), np.array([0.1]), 0, 0.5, input_offset=0)
    assert wq.scale[0] == np.float64(np.float32(0.5 / 127))
    assert q.tolist() == [[127, -64]] and qb.tolist() == [51] and raised.size == 0


def test_an_overflowing_bias_raises_its_channel_scale_exactly():
    # Channel 0: w = 127 at scale 1 (s_in 1, input offset 0: 128 per weight unit), bias 2**32 units: its bound
    # 2**32 + 127 * 128 = 4,294,983,552 is past int32. The scale is raised by bound / RAISED_TARGET
    # = 4,294,983,552 / 2,113,929,216 = 2.0317537..., rounded up to the next float32, 0x1.041084p+1; at that scale
    # w = 127 / 2.031754 = 62.51 -> 63 and the bias 2**32 / 2.031754 = 2,113,920,907.9 -> 2,113,920,908.
    # Channel 1 (0.5, bias 0.25) fits and is left alone.
    assert RAISED_TARGET == 2_113_929_216
    q, wq, qb, raised = fit_channel_scales(np.array([[127.0], [0.5]]), np.array([2.0 ** 32, 0.25]), 0, 1.0, 0)
    assert raised.tolist() == [0]
    assert wq.scale[0] == float.fromhex("0x1.041084p+1")
    assert q[:, 0].tolist() == [63, 127]
    assert qb.tolist() == [2_113_920_908, 64]
    assert qb[0] + 63 * 128 <= INT32_MAX  # the whole accumulator now fits, not only the bias
    # the stored bias means the float bias to float32 precision of the scale
    assert abs(qb[0] * wq.scale[0] - 2.0 ** 32) / 2.0 ** 32 < 2 ** -24


def test_the_input_offset_counts_in_the_weights_share():
    # Same channel, input zero point -128 (offset 128): each weight unit can meet 256, so the bound before raising is
    # 2**32 + 127 * 256 and the raised scale differs from the zero-offset case.
    _, wq0, _, _ = fit_channel_scales(np.array([[127.0]]), np.array([2.0 ** 32]), 0, 1.0, 0)
    q, wq, qb, raised = fit_channel_scales(np.array([[127.0]]), np.array([2.0 ** 32]), 0, 1.0, 128)
    assert raised.tolist() == [0] and wq.scale[0] > wq0.scale[0]
    assert abs(int(qb[0])) + int(np.abs(q).sum()) * 256 <= INT32_MAX


def test_all_zero_channels_keep_their_bias_exact():
    # no weights: the scale is chosen so the bias is 2**30 units (0.3 / (0.02 * 2**30)); without bias, scale 1
    q, wq, qb, raised = fit_channel_scales(np.zeros((2, 3)), np.array([0.3, 0.0]), 0, 0.02, 0)
    assert q.tolist() == [[0, 0, 0], [0, 0, 0]] and raised.size == 0
    assert wq.scale[0] == np.float64(np.float32(0.3 / (0.02 * 2 ** 30))) and wq.scale[1] == 1.0
    assert qb.tolist() == [2 ** 30, 0]
    assert qb[0] * 0.02 * wq.scale[0] == pytest.approx(0.3, rel=2 ** -24)


def test_four_bit_channels_are_raised_the_same_way():
    q, wq, qb, raised = fit_channel_scales(np.array([[7.0, -3.5]]), np.array([2.0 ** 33]), 0, 1.0, 0, qmax=7)
    assert raised.tolist() == [0] and np.abs(q).max() <= 7
    assert abs(int(qb[0])) + int(np.abs(q).sum()) * 128 <= RAISED_TARGET


def test_weights_alone_past_int32_are_not_hidden_by_raising():
    # 70,000 weights at +-127 with input offset 128: 70,000 * 127 * 256 = 2,275,840,000 > int32 with no bias at all.
    # Raising the scale would lose precision silently; it is left for bounds.check_graph to refuse.
    w = np.ones((1, 70_000))
    q, wq, qb, raised = fit_channel_scales(w, np.array([1.0]), 0, 1.0 / 255, 128)
    assert raised.size == 0 and wq.scale[0] == np.float64(np.float32(1 / 127))
    assert int(channel_bounds(q, qb, 128)[0]) == int(qb[0]) + 2_275_840_000


def test_quantize_bias_never_clamps():
    # 1000 / (1e-2 * 1e-3) = 1e8 units
    assert quantize_bias(np.array([1e3, -1e3]), 1e-2, np.array([1e-3, 1e-3])).tolist() == [100_000_000,
                                                                                         -100_000_000]
    big = quantize_bias(np.array([1.0]), 1e-6, np.array([1e-6]))
    assert big.tolist() == [1_000_000_000_000]  # beyond int32, returned as it is for the caller to refuse


# ---- the bounds -------------------------------------------------------------------------------------------------

def test_input_magnitudes():
    # |x + io| for int8 x: zero point 0 -> 128; zero point -128 (offset 128) -> 255; zero point 127 -> 255;
    # offset 5: x + 5 in [-123, 132]
    assert [offset_input_max(io) for io in (0, 128, -127, 5)] == [128, 255, 255, 132]
    # what the folded kernels can multiply a weight by: 128 + |io|
    assert [input_magnitude(io) for io in (0, 128, -127, 5)] == [128, 256, 255, 133]


def test_channel_bounds_by_hand():
    rows = np.array([[1, -2, 3], [0, 0, 0]])
    # io = -3: 131 per weight unit. Channel 0: 10 + 6 * 131 = 796; channel 1: |-5| = 5
    assert channel_bounds(rows, [10, -5], -3).tolist() == [796, 5]
    # a filter offset of 2 adds 3 * 2 units per row: 10 + (6 + 6) * 131 = 1582; 5 + 6 * 131 = 791
    assert channel_bounds(rows, [10, -5], -3, filter_offset=2).tolist() == [1582, 791]


def test_requantized_max_by_hand():
    assert requantized_max(1000, 1 << 30, 0) == 500  # multiplier 1/2
    assert requantized_max(3, 1 << 30, -1) == 1  # 3/4 = 0.75 -> 1
    # a positive shift saturates at int32 before the high multiply, as the C does: 2**30 << 4 becomes 2**31 - 1
    # (high multiply: 2**31 - 2) and -2**30 << 4 becomes -2**31 (high multiply: -(2**31 - 1)), the larger magnitude
    assert requantized_max(2 ** 30, (1 << 31) - 1, 4) == 2 ** 31 - 1
    v = np.arange(-5000, 5001, 7)
    assert requantized_max(5000, 1_518_500_250, -3) == int(np.abs(multiply_by_quantized_multiplier(
        v, 1_518_500_250, -3)).max())


# ---- the shared model whose biases used to saturate -------------------------------------------------------------

def test_vww_has_no_saturated_bias_and_every_accumulator_fits(cal_dir):
    """vww_mobilenetv1_025 had 971 biases in nine layers clamped to INT32_MIN/MAX (channels whose folded weights are
    near zero). Now those channels' scales are raised: no bias is at an int32 limit, and recomputed here from the
    stored integers, every layer's |bias| + sum|w| * (128 + |io|) fits int32."""
    g = compile_model(MODELS / "vww_mobilenetv1_025.onnx", calibration_file(cal_dir, "vww_mobilenetv1_025")).graph
    raised = g.meta["raised_weight_scales"]
    assert len(raised) == 9 and sum(len(v) for v in raised.values()) == 971
    layers = 0
    for node in g.nodes:
        if node.op not in LAYERS:
            continue
        layers += 1
        b = np.asarray(g.tensors[node.inputs[2]].data, np.int64)
        assert b.dtype == np.int64 and g.tensors[node.inputs[2]].data.dtype == np.int32
        assert not np.any((b == INT32_MAX) | (b == -INT32_MAX - 1)), node.name
        w = np.asarray(g.tensors[node.inputs[1]].data, np.int64)
        w = w.reshape(-1, w.shape[-1]).T if node.attrs.get("depthwise") else w.reshape(w.shape[0], -1)
        worst = np.abs(b) + np.abs(w).sum(axis=1) * (128 + abs(node.attrs["input_offset"]))
        assert worst.max() <= INT32_MAX, node.name
        # the bias scale is the input scale times the stored weight scale, channel by channel
        s_in = g.tensors[node.inputs[0]].quant.s
        assert np.array_equal(g.tensors[node.inputs[2]].quant.scale, s_in * g.tensors[node.inputs[1]].quant.scale)
    assert layers == 28
    assert max(g.meta["accumulator_bounds"].values()) <= INT32_MAX


def test_given_weight_scales_refuse_a_bias_beyond_int32():
    """A pre-quantized model's int8 weights keep their scales bit for bit, so nothing can be raised: a float bias
    that needs more than int32 at s_in * s_w is refused with the layer and the bound, never stored clamped."""
    from tinyaot.core.quant import layer_weights
    from tinyaot.errors import TinyaotError
    from tinyaot.ir import QuantParams, Tensor

    qw = np.array([[100, -3]], np.int8)
    w = Tensor("w", (1, 2), "int8", qw, QuantParams(np.array([1e-6]), np.array([0]), 0))
    ok = Tensor("b", (1,), "float32", np.array([0.5], np.float32))
    got = layer_weights(w, ok, 0, 0.01, "Conv node 'c'", input_offset=-5)
    assert got.bias.tolist() == [50_000_000] and got.raised.size == 0  # 0.5 / (0.01 * 1e-6)
    big = Tensor("b", (1,), "float32", np.array([50.0], np.float32))
    # 50 / 1e-8 = 5e9 units; bound 5,000,000,000 + 103 * (128 + 5) = 5,000,013,699
    with pytest.raises(TinyaotError, match=r"^Conv node 'c': its accumulator of output channel 0 .*"
                                           r"5,000,013,699 for some int8 input, past int32"):
        layer_weights(w, big, 0, 0.01, "Conv node 'c'", input_offset=-5)


def test_a_scale_ratio_no_multiplier_encodes_is_a_user_error_naming_the_node(tmp_path):
    """x - x calibrated over +-1e15: the output is always 0 (scale 1/256) while each input step is ~7.8e12, so the
    output rescaling 2 * s_in / (2**20 * s_out) is ~3.8e9, past what a fixed-point multiplier encodes (2**30).
    That is the model's ranges, not a tinyaot bug: one TinyaotError line naming the node."""
    import onnx
    from onnx import TensorProto, helper

    from tinyaot.errors import TinyaotError

    g = helper.make_graph([helper.make_node("Sub", ["x", "x"], ["y"], name="self_sub")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "sub.onnx")
    np.savez(tmp_path / "sub.npz", x=np.random.default_rng(0).uniform(-1e15, 1e15, (4, 1, 16)).astype(np.float32))
    with pytest.raises(TinyaotError, match=r"^Sub node 'self_sub': the rescaling factor .* too large"):
        compile_model(tmp_path / "sub.onnx", tmp_path / "sub.npz")
