"""Cross-layer equalization, high-bias absorption and bias correction (compress/equalize.py) on small graphs with
known answers: the float function is unchanged, ranges are equalized, calibration sees the equalized tensors,
and bias correction takes out a known mean shift."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.compress.calibrate import collect_ranges
from tinyaot.compress.equalize import (_in_range, _out_range, _weights, absorb_high_bias, equalizable_pairs,
                                       equalize, equalize_for_calibration)
from tinyaot.compress.refit import run_node, snapshot
from tinyaot.frontend import import_onnx_model
from tinyaot.oracle.reference import run_reference
from tinyaot.passes import run_passes
from tinyaot.api import compile_model


def _conv(name, x, y, w, b, group=1, pads=(0, 0, 0, 0)):
    inits = [numpy_helper.from_array(w.astype(np.float32), name + "_w"),
             numpy_helper.from_array(b.astype(np.float32), name + "_b")]
    node = helper.make_node("Conv", [x, name + "_w", name + "_b"], [y], name=name, group=group, pads=list(pads),
                            kernel_shape=list(w.shape[2:]))
    return node, inits


def _chain_model(path, depthwise: bool, bias1=None, seed=0):
    """x[1,4,6,6] -> Conv 3x3 (8 channels, wildly different per-channel scales) -> Relu -> [depthwise 3x3 pad 1
    -> Relu ->] Conv 1x1 (5 channels) -> y."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 1, (8, 4, 3, 3)) * (10.0 ** rng.uniform(-2, 2, 8))[:, None, None, None]
    b1 = rng.normal(0, 0.1, 8) if bias1 is None else bias1
    nodes, inits = [], []
    n, i = _conv("c1", "x", "z1", w1, b1)
    nodes += [n, helper.make_node("Relu", ["z1"], ["r1"])]
    inits += i
    last = "r1"
    if depthwise:
        n, i = _conv("dw", "r1", "z2", rng.normal(0, 1, (8, 1, 3, 3)), rng.normal(0, 0.1, 8), group=8,
                     pads=(1, 1, 1, 1))
        nodes += [n, helper.make_node("Relu", ["z2"], ["r2"])]
        inits += i
        last = "r2"
    n, i = _conv("pw", last, "y", rng.normal(0, 1, (5, 8, 1, 1)), rng.normal(0, 0.1, 5))
    nodes.append(n)
    inits += i
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, path)
    return path


def _float_run(graph, x):
    values = {graph.inputs[0]: x}
    for node in graph.nodes:
        run_node(graph, node, values)
    return values


def _graph(path):
    graph, model = import_onnx_model(path)
    return run_passes(graph, set(), set(), lambda _: None), model


@pytest.mark.parametrize("depthwise", [False, True])
def test_cle_keeps_the_float_function_and_equalizes_ranges(tmp_path, depthwise):
    graph, _ = _graph(_chain_model(tmp_path / "m.onnx", depthwise))
    x = np.random.default_rng(1).normal(0, 1, (6, 1, 4, 6, 6)).astype(np.float32)
    before = snapshot(graph)
    pairs = equalizable_pairs(graph)
    assert len(pairs) == (2 if depthwise else 1)
    r1_0 = _out_range(_weights(graph, pairs[0][0]), pairs[0][2])
    r2_0 = _in_range(_weights(graph, pairs[0][1]), pairs[0][3])
    scales = equalize(graph)
    ya = _float_run(before, x.reshape(6, *before.tensors[before.inputs[0]].shape[1:]))
    yb = _float_run(graph, x.reshape(6, *graph.tensors[graph.inputs[0]].shape[1:]))
    out = graph.outputs[0]
    np.testing.assert_allclose(yb[out], ya[out], rtol=1e-4, atol=1e-4 * np.abs(ya[out]).max())
    # the joined tensor changed by exactly its per-channel factor
    t = pairs[0][0].outputs[0]
    np.testing.assert_allclose(yb[t] * scales[t], ya[t], rtol=1e-4, atol=1e-5 * np.abs(ya[t]).max())
    a, b, k1, k2 = pairs[-1]  # the last pair equalized is exactly balanced
    np.testing.assert_allclose(_out_range(_weights(graph, a), k1), _in_range(_weights(graph, b), k2), rtol=1e-5)
    if not depthwise:  # one pair: both sides become sqrt(r1 r2)
        np.testing.assert_allclose(_out_range(_weights(graph, a), k1), np.sqrt(r1_0 * r2_0), rtol=1e-5)
    # the per-channel spread of the first layer (a factor of up to 10^4 before) is now far smaller
    r = _out_range(_weights(graph, pairs[0][0]), pairs[0][2])
    assert r.max() / r.min() < (r1_0.max() / r1_0.min()) / 10


def test_calibration_sees_the_equalized_tensor(tmp_path):
    graph, model = _graph(_chain_model(tmp_path / "m.onnx", False))
    x = np.random.default_rng(2).normal(0, 1, (20, 1, 4, 6, 6)).astype(np.float32)
    transforms = equalize_for_calibration(graph, model, {"x": x})
    t = next(iter(transforms))
    ranges = collect_ranges(model, {"x": x}, [t], transforms=transforms)
    values = _float_run(graph, x.reshape(20, *graph.tensors[graph.inputs[0]].shape[1:]))[t]
    assert ranges[t][0] == pytest.approx(float(values.min()), abs=1e-5)
    assert ranges[t][1] == pytest.approx(float(values.max()), rel=1e-4)


def test_high_bias_absorption(tmp_path):
    # a first layer whose biases keep every channel above 2.0 on all data: the absorbed graph computes the same
    # output, and the joined tensor's per-channel minimum drops to 0
    path = tmp_path / "m.onnx"
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.01, (8, 4, 3, 3))
    nodes, inits = [], []
    n, i = _conv("c1", "x", "z1", w1, np.full(8, 3.0))
    nodes += [n, helper.make_node("Relu", ["z1"], ["r1"])]
    inits += i
    n, i = _conv("pw", "r1", "y", rng.normal(0, 1, (5, 8, 1, 1)), np.zeros(5))
    nodes.append(n)
    inits += i
    g = helper.make_graph(nodes, "hb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    graph, model = _graph(path)
    x = rng.uniform(-1, 1, (10, 1, 4, 6, 6)).astype(np.float32)
    before = snapshot(graph)
    transforms = equalize_for_calibration(graph, model, {"x": x})
    t = next(iter(transforms))
    assert graph.meta["equalization"]["absorbed"] == [t]
    divisor, offset = transforms[t]
    assert np.all(offset > 1.5)
    xs = x.reshape(10, *graph.tensors[graph.inputs[0]].shape[1:])
    ya, yb = _float_run(before, xs), _float_run(graph, xs)
    out = graph.outputs[0]
    np.testing.assert_allclose(yb[out], ya[out], rtol=1e-4, atol=1e-4 * np.abs(ya[out]).max())
    assert yb[t].min(axis=(0, 1, 2, 3)) == pytest.approx(np.zeros(8), abs=1e-5)
    assert absorb_high_bias(graph, {}) == {}


def _fc_model(path):
    """y = x @ W.T + b with 64 inputs whose int8 weights all round the same way: every weight sits 0.4 of a step
    above a grid point (per-channel scale max|w| / 127 with the channel's max exactly on the grid)."""
    rng = np.random.default_rng(4)
    k = rng.integers(-100, 100, (6, 64)).astype(np.float64)
    k[:, 0] = 127  # the channel max: scale = 1/127 exactly
    w = (k + np.where(np.arange(64) == 0, 0.0, 0.4)) / 127
    b = np.zeros(6)
    inits = [numpy_helper.from_array(w.T.astype(np.float32), "W"), numpy_helper.from_array(b.astype(np.float32), "B")]
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "B"], ["y"])], "fc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def test_bias_correction_removes_a_known_mean_shift(tmp_path):
    w = _fc_model(tmp_path / "fc.onnx")
    x = np.random.default_rng(5).uniform(0.8, 1.0, (64, 1, 64)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=x)
    errors = {}
    for bc in (False, True):
        c = compile_model(tmp_path / "fc.onnx", tmp_path / "cal.npz", bias_correction=bc, cle=False)
        g = c.graph
        outs = np.stack([c.dequantize_output(run_reference(g, {g.inputs[0]: c.quantize_input(s)})[g.outputs[0]])
                         for s in x]).reshape(len(x), -1)
        ref = x.reshape(len(x), -1).astype(np.float64) @ w.T
        errors[bc] = (outs - ref).mean(axis=0)
        s_out = g.tensors[g.outputs[0]].quant.s
    # each weight is stored 0.4 step (1/127 * 0.4) low: the output's mean shift is 63 * 0.4/127 * E[x] ~ -0.18
    expected = -63 * 0.4 / 127 * float(x.mean())
    np.testing.assert_allclose(errors[False], expected, atol=0.5 * s_out + 0.01)
    assert np.all(np.abs(errors[True]) < 0.6 * s_out), (errors[True], s_out)


def _pair_model(path, spread: float, seed=7):
    """x[1,4,6,6] -> Conv 3x3 (8 channels, output channel k scaled by spread**(k/7)) -> Relu -> Conv 1x1 -> y."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 1, (8, 4, 3, 3)) * (spread ** (np.arange(8) / 7.0))[:, None, None, None]
    n1, i1 = _conv("c1", "x", "z1", w1, np.zeros(8))
    n2, i2 = _conv("pw", "r1", "y", rng.normal(0, 1, (5, 8, 1, 1)), np.zeros(5))
    g = helper.make_graph([n1, helper.make_node("Relu", ["z1"], ["r1"]), n2], "pair",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 4])], i1 + i2)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("spread, equalized", [(1000.0, True), (4.0, False)])
def test_auto_cle_equalizes_only_a_starved_channel_spread(tmp_path, spread, equalized):
    # the joining tensor's channels span `spread` (times the data's own variation): auto CLE (the default)
    # equalizes the pair only when the narrowest channel is under 1/CLE_SPREAD of the tensor's range
    from tinyaot.compress.equalize import CLE_SPREAD, DEFAULT_CLE, channel_spread

    assert DEFAULT_CLE == "auto"
    assert channel_spread(np.zeros(3), np.array([1.0, 0.5, 0.01])) == pytest.approx(100.0)
    assert channel_spread(np.zeros(3), np.array([1.0, 0.5, 0.0])) == pytest.approx(2.0)  # a dead channel is skipped
    path = _pair_model(tmp_path / "m.onnx", spread)
    x = np.random.default_rng(8).normal(0, 1, (20, 1, 4, 6, 6)).astype(np.float32)
    graph, model = _graph(path)
    transforms = equalize_for_calibration(graph, model, {"x": x}, "auto")
    eq = graph.meta["equalization"]
    (measured,) = eq["spread"].values()
    assert (measured > CLE_SPREAD) == equalized and bool(transforms) == equalized
    assert eq["mode"] == "auto" and eq["pairs"] == int(equalized)
    np.savez(tmp_path / "cal.npz", x=x)
    c = compile_model(path, tmp_path / "cal.npz")  # the default: min/max ranges (the input's judged), auto CLE
    assert c.graph.meta["calibration"]["cle"] == "auto"
    assert c.graph.meta["calibration"]["cle_pairs"] == int(equalized)
    assert c.graph.meta["calibration"]["method"] == "auto-input"


def test_a_bias_only_channel_is_not_blown_up(tmp_path):
    # channel 0 of the first layer has (nearly) zero weights and a bias of 1: its values are that constant, which
    # the weight ranges do not see. sqrt(r1 / r2) would divide it by ~1e-4 every sweep (vww_mobilenetv1_025 had a
    # channel grown 2e12-fold); it must be left alone, and every channel's overall factor stays within bounds
    from tinyaot.compress.equalize import S_MAX, S_MIN

    rng = np.random.default_rng(9)
    w1 = rng.normal(0, 1, (8, 4, 3, 3))
    w1[0] *= 1e-9
    b1 = np.zeros(8)
    b1[0] = 1.0
    n1, i1 = _conv("c1", "x", "z1", w1, b1)
    n2, i2 = _conv("pw", "r1", "y", rng.normal(0, 1, (5, 8, 1, 1)), np.zeros(5))
    g = helper.make_graph([n1, helper.make_node("Relu", ["z1"], ["r1"]), n2], "dead",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 4])], i1 + i2)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    graph, _ = _graph(tmp_path / "m.onnx")
    scales = equalize(graph)
    (s,) = scales.values()
    assert s[0] == 1.0 and np.all((s >= S_MIN) & (s <= S_MAX))
