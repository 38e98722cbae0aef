"""Static shape plumbing (passes/fold_constants.py, ops/shape_ops.py): Shape/Size of an activation fold to
constants, and the arithmetic exporters build on them (Gather, Unsqueeze, Concat, Slice, Split, Cast, Range,
ConstantOfShape, Equal/Where, Expand of a constant) folds with them, so no such node reaches the int8 graph; the
model's outputs still match onnxruntime. A Cast of run-time values is refused with a one-line error naming
the node."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from op_models import calibration, const, deploy_verified, host_layer_diffs, save_model
from tinyaot.api import compile_model

SHAPE_OPS = {"Shape", "Size", "Gather", "Expand", "ConstantOfShape", "Slice", "Split", "Range", "Cast", "Equal",
             "Where", "Unsqueeze", "Concat"}


def _i64(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


def _plumbing_model(path):
    """x [1, 4, 6] -> Reshape to [1, 24] whose target shape is computed from Shape(x) the way PyTorch's flatten
    exports it, then Add a bias made by Expand(ConstantOfShape(Shape), ...) through Where/Equal/Cast/Range/Slice/
    Split: every node but the Reshape and the Add is shape arithmetic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Size", ["x"], ["numel"]),
        helper.make_node("Unsqueeze", ["numel", "ax0"], ["numel1"]),
        helper.make_node("Concat", ["one", "numel1"], ["bshape"], axis=0),
        helper.make_node("ConstantOfShape", ["bshape"], ["zeros"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Cast", ["numel"], ["numel_f"], to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero_f", "numel_f", "one_f"], ["ramp"]),
        helper.make_node("Slice", ["ramp", "st", "en"], ["ramp_part"]),
        helper.make_node("Split", ["ramp_part", "halves"], ["r_a", "r_b"], axis=0),
        helper.make_node("Concat", ["r_b", "r_a"], ["swapped"], axis=0),
        helper.make_node("Equal", ["swapped", "twelve"], ["is12"]),
        helper.make_node("Where", ["is12", "zeros_row", "swapped"], ["picked"]),
        helper.make_node("Unsqueeze", ["picked", "ax0"], ["picked1"]),
        helper.make_node("Expand", ["picked1", "bshape"], ["bias"]),
        helper.make_node("Mul", ["bias", "zeros"], ["bias_scaled"]),
        helper.make_node("Add", ["flat", "bias_scaled"], ["y"]),
    ]
    f = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    inits = [_i64("i0", [0]), _i64("ax0", [0]), _i64("minus1", [-1]), _i64("one", [1]), f("zero_f", 0.0),
             f("one_f", 1.0), _i64("st", [0]), _i64("en", [24]), _i64("halves", [12, 12]), f("twelve", 12.0),
             f("zeros_row", np.zeros(24) - 3.0)]
    nodes[1] = helper.make_node("Gather", ["s", "i0s"], ["n"], axis=0)  # a scalar index: Gather drops the axis
    inits.append(_i64("i0s", 0))
    return save_model(path, nodes, [1, 4, 6], [1, 24], inits, opset=13)


def test_shape_plumbing_folds_away(tmp_path):
    m = _plumbing_model(tmp_path / "plumbing.onnx")
    cal = calibration(tmp_path / "cal.npz", [1, 4, 6], n=8)
    g = compile_model(m, cal).graph
    assert not {n.op for n in g.nodes} & SHAPE_OPS, [n.op for n in g.nodes]
    diffs = host_layer_diffs(m, cal, np.load(cal)["x"][:4])
    assert all(d[0] <= d[1] for d in diffs.values()), diffs
    deploy_verified(m, cal, tmp_path / "out")


def test_shape_op_over_run_time_values_is_a_one_line_error(tmp_path):
    # indices computed from the input (an embedding lookup): Cast of an activation has no kernel and says so
    nodes = [helper.make_node("Cast", ["x"], ["idx"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)]
    m = save_model(tmp_path / "lookup.onnx", nodes, [1, 5], [1, 5, 3],
                   [const("table", np.arange(30).reshape(10, 3))])
    cal = calibration(tmp_path / "cal.npz", [1, 5])
    p = subprocess.run([sys.executable, "-m", "tinyaot", "deploy", str(m), "--board", "stm32", "--calibration",
                        str(cal), "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    assert lines == [l for l in lines if l.startswith("Error: ")] and len(lines) == 1, lines
    assert "Cast node" in lines[0] and "reads activation" in lines[0]
