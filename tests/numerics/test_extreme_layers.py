"""Layers at the numeric edges, deployed end to end: a Conv + BatchNormalization whose gamma is 1e-7 on some channels
(network slimming leaves such channels; their folded weights are ~1e-7 of the others, so at the natural weight
scale their bias would need ~2**35 units), and fully connected layers with 70,000 inputs: one whose accumulator
can pass int32 (refused, naming the layer and the bound) and one that fits and is verified on the input that
drives its accumulator to the top (90 % of int32)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.api import compile_model, deploy
from tinyaot.compress.bounds import INT32_MAX
from tinyaot.errors import TinyaotError

TINY = [1, 4, 6]  # channels of the BatchNormalization with gamma = 1e-7


def conv_bn_model(path):
    rng = np.random.default_rng(8)
    w1 = rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32)
    gamma = np.ones(8, np.float32)
    gamma[TINY] = 1e-7
    beta = np.array([0.3, 0.8, -0.2, 0.1, -0.6, 0.5, 0.45, -0.1], np.float32)  # tiny channels: 0.8, -0.6, 0.45
    mean = rng.normal(0, 0.3, 8).astype(np.float32)
    var = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    w2 = rng.normal(0, 0.4, (4, 8, 1, 1)).astype(np.float32)
    b2 = rng.normal(0, 0.1, 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"), (w2, "w2"), (b2, "b2")]]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"], name="bn1",
                              epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], name="conv2", kernel_shape=[1, 1])]
    g = helper.make_graph(nodes, "conv_bn_tiny_gamma",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = rng.uniform(-1, 1, (16, 1, 3, 8, 8)).astype(np.float32)
    np.savez(path.with_suffix(".npz"), x=x)
    return path, path.with_suffix(".npz")


def test_conv_bn_with_tiny_gamma_deploys_and_verifies(tmp_path):
    model, cal = conv_bn_model(tmp_path / "conv_bn.onnx")
    g = compile_model(model, cal).graph
    conv1 = next(n for n in g.nodes if n.name == "conv1")
    # exactly the near-zero channels needed a larger weight scale, and every bias is stored unclamped
    assert g.meta["raised_weight_scales"] == {"conv1": TINY}
    bias = np.asarray(g.tensors[conv1.inputs[2]].data, np.int64)
    assert np.abs(bias).max() < INT32_MAX
    s_acc = g.tensors[conv1.inputs[2]].quant.scale
    # the stored bias means the folded bias beta - mean * gamma / sqrt(var + eps) (to float32 precision)
    assert np.allclose((bias * s_acc)[TINY], [0.8, -0.6, 0.45], rtol=1e-6, atol=1e-6)
    assert max(g.meta["accumulator_bounds"].values()) <= INT32_MAX

    out = tmp_path / "out"
    report = deploy(model, "stm32", cal, out).report
    v = report["verify"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0 and v["samples"] == 8
    assert len(v["layers_vs_onnxruntime"]) >= 2
    assert all(layer["max_abs_diff"] <= 1 for layer in v["layers_vs_onnxruntime"])


@pytest.mark.parametrize("compression", [{"weight_bits": 4}, {"clusters": 16}, {"prune": 0.5}])
def test_conv_bn_with_tiny_gamma_compressed(tmp_path, compression):
    """The compressed paths set their weights from the same scales (4-bit: qmax 7, raised the same way) and then
    change weights and biases (fitting, clustering, bias correction): the biases stay unclamped, the bounds are
    rechecked, and the deploy verifies."""
    model, cal = conv_bn_model(tmp_path / "conv_bn.onnx")
    g = compile_model(model, cal, compression=compression).graph
    conv1 = next(n for n in g.nodes if n.name == "conv1")
    if "weight_bits" in compression or "clusters" in compression:  # pruning may zero a tiny channel instead
        assert g.meta["raised_weight_scales"]["conv1"] == TINY
    bias = np.asarray(g.tensors[conv1.inputs[2]].data, np.int64)
    assert np.abs(bias).max() < INT32_MAX and max(g.meta["accumulator_bounds"].values()) <= INT32_MAX
    # raised (or, once pruned to all zeros, exact-scale) channels still carry the folded bias, bias correction
    # included (their weights are ~1e-7, so it moves them by a few parts per million at most)
    s_acc = g.tensors[conv1.inputs[2]].quant.scale
    assert np.allclose((bias * s_acc)[TINY], [0.8, -0.6, 0.45], rtol=1e-5, atol=1e-6)
    w = np.asarray(g.tensors[conv1.inputs[1]].data, np.int64)
    assert np.abs(w).max() <= (7 if "weight_bits" in compression else 127)
    v = deploy(model, "stm32", cal, tmp_path / "out", compression=compression).report["verify"]
    assert v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert all(layer["max_abs_diff"] <= 1 for layer in v["layers_vs_onnxruntime"])


# ---- 70,000-input fully connected layers ------------------------------------------------------------------------

DEPTH = 70_000


def fc_model(path, w, b, xs):
    inits = [numpy_helper.from_array(w.astype(np.float32), "w"), numpy_helper.from_array(b.astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="wide_fc"),
             helper.make_node("Add", ["mm", "b"], ["y"], name="wide_fc_bias")]
    g = helper.make_graph(nodes, "wide_fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, DEPTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    np.savez(path.with_suffix(".npz"), x=xs.astype(np.float32).reshape(len(xs), 1, DEPTH))
    return path, path.with_suffix(".npz")


def test_wide_fc_that_can_pass_int32_is_refused_naming_the_layer(tmp_path):
    """Inputs in [0, 1] quantize with zero point -128, so x - zp reaches 255; with every weight at full scale
    (127) the accumulator reaches 70,000 * 127 * 255 = 2,266,950,000 > 2**31 - 1 on the all-ones input. The
    bound tinyaot states is 70,000 * 127 * (128 + 128) = 2,275,840,000."""
    rng = np.random.default_rng(70)
    w = np.stack([np.ones(DEPTH), rng.choice([-1.0, 1.0], DEPTH)], axis=1)
    xs = np.concatenate([np.zeros((1, DEPTH)), np.ones((1, DEPTH)), rng.uniform(0, 1, (2, DEPTH))])
    model, cal = fc_model(tmp_path / "fc_refused.onnx", w, np.zeros(2), xs)
    with pytest.raises(TinyaotError, match=r"FullyConnected node 'wide_fc'.*accumulator of output channel 0.*"
                                           r"2,275,840,000.*past int32"):
        compile_model(model, cal)
    # the command line: one Error line naming the layer and the bound, non-zero exit, nothing written
    r = subprocess.run([sys.executable, "-m", "tinyaot", "deploy", str(model), "--board", "stm32", "--calibration",
                        str(cal), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: FullyConnected node 'wide_fc'")
    assert "2,275,840,000" in lines[0]
    assert not (tmp_path / "out").exists()


def test_wide_fc_that_fits_verifies_on_its_largest_input(tmp_path):
    """Channel 0's weights are all positive (0.7 to 1.0, i.e. 89 to 127 units), so the all-ones input (x - zp = 255
    everywhere) drives its accumulator to about 90 % of int32; channel 1 has random signs and its largest inputs
    are the ones where the weight is positive (or negative). The C under QEMU must equal the int64 reference on
    exactly those inputs."""
    rng = np.random.default_rng(7)
    mag = rng.uniform(0.7, 1.0, (DEPTH, 2))
    mag[0, :] = 1.0  # the largest |w| per channel: scale 1/127
    signs = np.stack([np.ones(DEPTH), rng.choice([-1.0, 1.0], DEPTH)], axis=1)
    w = mag * signs
    extremes = [np.ones(DEPTH), (w[:, 1] > 0).astype(float), (w[:, 1] < 0).astype(float), np.zeros(DEPTH)]
    xs = np.concatenate([np.stack(extremes), rng.uniform(0, 1, (4, DEPTH))])
    model, cal = fc_model(tmp_path / "fc_fits.onnx", w, np.array([0.25, -0.5]), xs)

    g = compile_model(model, cal).graph
    fc = next(n for n in g.nodes if n.op == "FullyConnected")
    assert fc.attrs["input_offset"] == 128  # inputs in [0, 1]: zero point -128
    qw = np.asarray(g.tensors[fc.inputs[1]].data, np.int64)
    qb = np.asarray(g.tensors[fc.inputs[2]].data, np.int64)
    bound = g.meta["accumulator_bounds"]["wide_fc"]
    assert 0.85 * INT32_MAX < bound <= INT32_MAX
    # the all-ones sample reaches the top: its exact accumulator, from the stored integers
    acc = 255 * qw[0].sum() + qb[0]
    assert 0.85 * INT32_MAX < acc <= INT32_MAX

    # 70 KB of input and its harness copy do not fit the STM32F405's 128 KB of RAM: an MPS2 board (Cortex-M4 too)
    report = deploy(model, "mps2-an386", cal, tmp_path / "out").report
    v = report["verify"]
    assert v["ran"] and v["samples"] == 8 and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert all(layer["max_abs_diff"] <= 1 for layer in v["layers_vs_onnxruntime"])
