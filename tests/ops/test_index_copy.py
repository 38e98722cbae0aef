"""IndexCopy (ops/index_copy.py, passes/index_moves.py): Slice, Split, Gather with constant indices and Expand of
an activation become one int8 copy through a constant source map. Bytes are copied, not computed, so every layer
must equal onnxruntime's QDQ layer exactly (0 LSB); the numpy reference == host C == C under QEMU."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from op_models import calibration, conv_node, deploy_verified, host_layer_diffs, layer_ops, save_model
from tinyaot.api import compile_model

C, H, W = 4, 5, 6


def _i64(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


CASES = {
    # name: (nodes after the conv "c" [1, C, H, W] -> "y", initializers, y shape, opset)
    "slice_steps_negative_axes": ([helper.make_node("Slice", ["c", "st", "en", "ax", "sp"], ["y"])],
                                  [_i64("st", [-1, 1]), _i64("en", [-100, 4]), _i64("ax", [-1, 1]),
                                   _i64("sp", [-2, 2])], [1, 2, H, 3], 13),
    "split_two_outputs_swapped": ([helper.make_node("Split", ["c", "parts"], ["a", "b"], axis=2),
                                  helper.make_node("Concat", ["b", "a"], ["y"], axis=2)],
                                 [_i64("parts", [2, 3])], [1, C, H, W], 13),
    "split_num_outputs_opset18": ([helper.make_node("Split", ["c"], ["a", "b"], axis=3, num_outputs=2),
                                   helper.make_node("Add", ["a", "b"], ["y"])], [], [1, C, H, W // 2], 18),
    "gather_constant_indices": ([helper.make_node("Gather", ["c", "gi"], ["y"], axis=1)],
                                [_i64("gi", [3, 0, 0, -1])], [1, 4, H, W], 13),
    "expand_broadcast": ([helper.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=1),
                          helper.make_node("Expand", ["m", "shape"], ["y"])],
                         [_i64("shape", [1, C, 2, 3])], [1, C, 2, 3], 13),
}


@pytest.mark.parametrize("name", list(CASES))
def test_data_movement_is_exact(tmp_path, name):
    nodes, inits, y_shape, opset = CASES[name]
    conv, conv_inits = conv_node("x", "c", "w", 3, C)
    m = save_model(tmp_path / f"{name}.onnx", [conv] + nodes, [1, 3, H, W], y_shape, conv_inits + inits, opset=opset)
    cal = calibration(tmp_path / "cal.npz", [1, 3, H, W], n=8)
    g = compile_model(m, cal).graph
    ops = [n.op for n in g.nodes]
    assert "IndexCopy" in ops and not {"Slice", "Split", "Gather", "Expand"} & set(ops), ops
    diffs = host_layer_diffs(m, cal, np.load(cal)["x"][:4])
    assert diffs["IndexCopy"][0] == 0, diffs
    assert all(d[0] <= d[1] for d in diffs.values()), diffs


def test_slice_and_split_deploy_under_qemu(tmp_path):
    nodes = [helper.make_node("Slice", ["c", "st", "en", "ax"], ["s"]),
             helper.make_node("Split", ["s", "parts"], ["a", "b"], axis=1),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=1)]
    conv, inits = conv_node("x", "c", "w", 3, C)
    m = save_model(tmp_path / "slice_split.onnx", [conv] + nodes, [1, 3, H, W], [1, C, 3, W],
                   inits + [_i64("st", [1]), _i64("en", [4]), _i64("ax", [2]), _i64("parts", [1, 3])])
    r = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 3, H, W]), tmp_path / "out")
    assert sum(op == "IndexCopy" for op, _ in layer_ops(r)) == 3
