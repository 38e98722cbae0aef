"""What exporters spell in several ways compiles to one form (issue 21, items 2 and 3), each rewrite checked on a
small graph, with its refusals: constant subgraphs folded at import by onnxruntime (a Div on shapes is no reason to
refuse a model), Div by a constant as Mul (passes/div_to_mul.py), `x * HardSigmoid(x)` as HardSwish and
`x * Sigmoid(x)` as Swish (passes/fuse_swish.py), a zero Pad before a Conv as the Conv's pads (passes/fold_pad.py),
ReduceMean over H and W as GlobalAveragePool (passes/mean_to_pool.py). Each rewritten model still verifies: QEMU
== numpy reference and every layer within 1 LSB of onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from op_models import calibration, const, deploy_verified, save_model
from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError
from tinyaot.frontend import import_model


def _conv(x: str, y: str, c_in: int, c_out: int, seed: int = 0):
    """A 3x3 Conv keeping H and W, and its weight initializer."""
    w = np.random.default_rng(seed).normal(size=(c_out, c_in, 3, 3)) * 0.3
    return helper.make_node("Conv", [x, y + "_w"], [y], pads=[1, 1, 1, 1]), const(y + "_w", w)


def _ops(compiled) -> list[str]:
    return [n.op for n in compiled.graph.nodes]


def test_shape_arithmetic_with_div_folds_at_import(tmp_path):
    """`x.chunk(2, 1)` as the TorchScript exporter writes it: the split point is Shape -> Gather -> Div -> Mul ->
    Slice bounds. Div is computed only from constants: onnxruntime evaluates it at import, so the model imports
    (the Div never reaches the op check) and the Slices become data moves of the right halves."""
    i64 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.int64), n)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Div", ["c", "two"], ["half"]), helper.make_node("Unsqueeze", ["half", "ax0"], ["h1"]),
             helper.make_node("Slice", ["x", "zero1", "h1", "ax1"], ["a"]),
             helper.make_node("Mul", ["h1", "two1"], ["end"]),
             helper.make_node("Slice", ["x", "h1", "end", "ax1"], ["b"]),
             helper.make_node("Relu", ["b"], ["rb"]), helper.make_node("Concat", ["rb", "a"], ["y"], axis=1)]
    inits = [i64("one", 1), i64("two", 2), i64("ax0", [0]), i64("zero1", [0]), i64("ax1", [1]), i64("two1", [2])]
    path = save_model(tmp_path / "chunk.onnx", nodes, [1, 8, 3, 3], [1, 8, 3, 3], inits)
    g = import_model(path).graph
    assert {n.op for n in g.nodes} == {"Slice", "Relu", "Concat"}  # no Shape, Gather, Div, Unsqueeze, Mul left
    deploy_verified(path, calibration(tmp_path / "cal.npz", [1, 8, 3, 3]), tmp_path / "out")


def test_div_by_a_constant_is_a_mul(tmp_path):
    conv, w = _conv("x", "c", 3, 4)
    nodes = [conv, helper.make_node("Div", ["c", "six"], ["y"])]
    inits = [w, const("six", np.full((1, 4, 1, 1), 6.0))]
    path = save_model(tmp_path / "div.onnx", nodes, [1, 3, 8, 8], [1, 4, 8, 8], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8])
    c = compile_model(path, cal)
    assert "Div" not in _ops(c) and "Mul" in _ops(c)
    mul = next(n for n in c.graph.nodes if n.op == "Mul")
    recip = c.graph.tensors[next(i for i in mul.inputs if c.graph.tensors[i].is_const)]
    assert np.allclose(recip.quant.dequantize(recip.data), 1 / 6, rtol=0.01)  # the reciprocal, quantized
    deploy_verified(path, cal, tmp_path / "out")


@pytest.mark.parametrize("what, divisor, message", [
    ("activation", None, "only division of an activation by a float constant"),
    ("zero", np.array([1.0, 0.0, 2.0, 3.0], np.float32).reshape(1, 4, 1, 1), "holds zero or a non-finite value")])
def test_div_refusals(tmp_path, what, divisor, message):
    conv, w = _conv("x", "c", 3, 4)
    nodes = [conv, helper.make_node("Relu", ["c"], ["r"])]
    inits = [w]
    if divisor is None:
        nodes.append(helper.make_node("Div", ["c", "r"], ["y"]))
    else:
        inits.append(const("d", divisor))
        nodes.append(helper.make_node("Div", ["c", "d"], ["y"]))
    path = save_model(tmp_path / f"{what}.onnx", nodes, [1, 3, 8, 8], [1, 4, 8, 8], inits)
    with pytest.raises(TinyaotError, match=message):
        compile_model(path, calibration(tmp_path / "cal.npz", [1, 3, 8, 8]))


@pytest.mark.parametrize("gate, attrs, fused", [("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}, "HardSwish"),
                                                ("HardSigmoid", {}, None),  # ONNX's default alpha 0.2: no HardSwish
                                                ("Sigmoid", {}, "Swish")])
def test_x_times_gate_of_x_is_one_table(tmp_path, gate, attrs, fused):
    conv, w = _conv("x", "c", 3, 4, seed=1)
    nodes = [conv, helper.make_node(gate, ["c"], ["g"], **attrs), helper.make_node("Mul", ["g", "c"], ["y"])]
    inits = [w]
    path = save_model(tmp_path / f"{gate}.onnx", nodes, [1, 3, 8, 8], [1, 4, 8, 8], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8])
    ops = _ops(compile_model(path, cal))
    if fused:
        assert fused in ops and gate not in ops and "Mul" not in ops
        deploy_verified(path, cal, tmp_path / "out")  # the table is within 1 LSB of onnxruntime's two nodes
    else:
        assert gate in ops and "Mul" in ops


def test_a_gate_read_twice_is_not_fused(tmp_path):
    conv, w = _conv("x", "c", 3, 4, seed=2)
    nodes = [conv, helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["g", "c"], ["m"]),
             helper.make_node("Add", ["m", "g"], ["y"])]
    inits = [w]
    path = save_model(tmp_path / "twice.onnx", nodes, [1, 3, 8, 8], [1, 4, 8, 8], inits)
    ops = _ops(compile_model(path, calibration(tmp_path / "cal.npz", [1, 3, 8, 8])))
    assert "Swish" not in ops and "Sigmoid" in ops


@pytest.mark.parametrize("pads, value, folds", [([0, 0, 1, 0, 0, 0, 2, 1], 0.0, True),
                                                ([0, 0, 1, 1, 0, 0, 1, 1], 0.5, False),  # not zero
                                                ([0, 1, 1, 1, 0, 0, 1, 1], 0.0, False)])  # pads a channel
def test_zero_padding_folds_into_the_conv(tmp_path, pads, value, folds):
    w = const("w", np.random.default_rng(3).normal(size=(4, 3 + pads[1], 3, 3)) * 0.3)
    nodes = [helper.make_node("Pad", ["x", "pads", "v"], ["p"], mode="constant"),
             helper.make_node("Conv", ["p", "w"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(pads, np.int64), "pads"), const("v", np.float32(value)), w]
    oh, ow = 8 + pads[2] + pads[6] - 2, 8 + pads[3] + pads[7] - 2
    path = save_model(tmp_path / "pad.onnx", nodes, [1, 3, 8, 8], [1, 4, oh, ow], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8])
    c = compile_model(path, cal)
    assert ("Pad" not in _ops(c)) == folds
    if folds:
        conv = next(n for n in c.graph.nodes if n.op == "Conv")
        assert list(conv.attrs["pads"]) == [1, 0, 2, 1]  # NHWC kernels' [top, left, bottom, right]
        deploy_verified(path, cal, tmp_path / "out")


@pytest.mark.parametrize("keepdims", [0, 1])
def test_spatial_reduce_mean_is_global_average_pool(tmp_path, keepdims):
    conv, w = _conv("x", "c", 3, 4, seed=4)
    nodes = [conv, helper.make_node("ReduceMean", ["c"], ["y"], axes=[-1, -2], keepdims=keepdims)]
    inits = [w]
    path = save_model(tmp_path / "mean.onnx", nodes, [1, 3, 8, 8], [1, 4, 1, 1] if keepdims else [1, 4], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8])
    ops = _ops(compile_model(path, cal))
    assert "GlobalAveragePool" in ops and "ReduceMean" not in ops
    deploy_verified(path, cal, tmp_path / "out")


def test_a_relu_after_a_flattening_mean_fuses_into_the_pool(tmp_path):
    """`relu(x.mean([2, 3]))`: mean_to_pool gives GlobalAveragePool -> Reshape -> Relu; the Relu moves in front of
    the Reshape (passes/fuse_activation.py) and fuses into the pool, so no layer of its own is left."""
    conv, w = _conv("x", "c", 3, 4, seed=5)
    nodes = [conv, helper.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Relu", ["m"], ["y"])]
    path = save_model(tmp_path / "mean_relu.onnx", nodes, [1, 3, 8, 8], [1, 4], [w])
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8])
    c = compile_model(path, cal)
    assert "Relu" not in _ops(c)
    pool = next(n for n in c.graph.nodes if n.op == "GlobalAveragePool")
    assert pool.attrs["activation"][0] == 0.0
    deploy_verified(path, cal, tmp_path / "out")


def test_a_constant_graph_output_is_refused_at_import(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    path = save_model(tmp_path / "const.onnx", nodes, [1, 4], [2])
    with pytest.raises(TinyaotError, match=r"graph output 'y' does not depend on the input data \(it folds to "
                                           r"the constant \[1\.0, 4\.0\]"):
        import_model(path)
