"""Helpers for the per-op tests: tiny ONNX models built with onnx.helper, deployed and verified, or compiled and
checked layer by layer against onnxruntime on the host.

`deploy_verified` runs the whole product path (import, passes, calibration, quantization, C, arm-none-eabi-gcc,
QEMU on mps2-an386) and asserts what the numerics contract promises: the C under QEMU equals the numpy reference bit
for bit, and every layer is within its tolerance of onnxruntime's QDQ run on the same int8 input.
`host_layer_diffs` does the onnxruntime part without building anything, over as many samples as a test wants.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyaot.api import compile_model, deploy
from tinyaot.oracle.onnxruntime_layers import check_layers
from tinyaot.oracle.reference import run_reference

BOARD = "mps2-an386"


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def save_model(path: Path, nodes, x_shape, y_shape, initializers=(), opset: int = 13, x: str = "x",
               y: str = "y") -> Path:
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(y_shape))],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def calibration(path: Path, shape, n: int = 12, seed: int = 0, scale: float = 2.0) -> Path:
    """n samples of the input, normal with a few large values so ranges are not symmetric or tiny."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, *shape)) * scale + rng.uniform(-0.5, 0.5)).astype(np.float32)
    np.savez(path, x=x)
    return path


def deploy_verified(model: Path, cal: Path, out: Path, **options) -> dict:
    """Deploy for BOARD and check the verification; `options` as tinyaot.api.deploy takes them (e.g. disable_passes,
    for a test of an op's own kernel that a pass would otherwise rewrite into another op)."""
    report = deploy(model, BOARD, cal, out, **options).report
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"], v
    assert v["max_abs_diff_vs_reference"] == 0
    for layer in v["layers_vs_onnxruntime"]:
        assert layer["max_abs_diff"] <= layer["tolerance"], layer
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    return report


def layer_ops(report: dict) -> list[tuple[str, str]]:
    """(op, kernel) of every layer of a deploy report, in schedule order."""
    return [(layer["op"], layer["kernel"]) for layer in report["layers"]]


def host_layer_diffs(model: Path, cal: Path, samples: np.ndarray) -> dict[str, tuple[int, int]]:
    """op -> (worst |tinyaot - onnxruntime| in LSB, tolerance) over `samples` (float inputs), each layer fed the
    same int8 input as tinyaot's layer, without building any C."""
    compiled = compile_model(model, cal)
    refs = [run_reference(compiled.graph, {compiled.input: compiled.quantize_input(s)}) for s in samples]
    worst: dict[str, tuple[int, int]] = {}
    for c in check_layers(compiled.graph, refs):
        prev = worst.get(c.op, (0, c.tolerance))[0]
        worst[c.op] = (max(prev, c.max_abs_diff), c.tolerance)
    return worst


def int8_layer_diffs(model: Path, cal: Path, q_inputs: list[np.ndarray]) -> tuple[dict[str, int], object]:
    """op -> worst |tinyaot - onnxruntime| over int8 graph inputs given directly (e.g. all 256 values, so a table
    is checked entry by entry), and the compiled model."""
    compiled = compile_model(model, cal)
    refs = [run_reference(compiled.graph, {compiled.input: np.asarray(q, np.int8)}) for q in q_inputs]
    worst: dict[str, int] = {}
    for c in check_layers(compiled.graph, refs):
        worst[c.op] = max(worst.get(c.op, 0), c.max_abs_diff)
    return worst, compiled


ALL_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)


def conv_node(x: str, y: str, w: str, c_in: int, c_out: int, k: int = 3, seed: int = 0):
    """A Conv (padding keeps H, W) and its float weight and bias initializers."""
    rng = np.random.default_rng(seed)
    inits = [const(w, rng.standard_normal((c_out, c_in, k, k)) * 0.3),
             const(w + "_b", rng.standard_normal(c_out) * 0.1)]
    return helper.make_node("Conv", [x, w, w + "_b"], [y], pads=[k // 2] * 4), inits


def lut_exhaustive(tmp_path: Path, node, cal_scale: float = 2.0, opset: int = 13) -> tuple[int, object]:
    """The op alone on a [1, 256] input, fed all 256 int8 values at once: every table entry against onnxruntime's
    QDQ layer. Returns the worst difference in LSB and the compiled model."""
    m = save_model(tmp_path / "lut_all.onnx", [node], [1, 256], [1, 256], opset=opset)
    worst, compiled = int8_layer_diffs(m, calibration(tmp_path / "cal_all.npz", [1, 256], scale=cal_scale),
                                       [ALL_INT8])
    return worst[node.op_type], compiled


def deploy_after_conv(tmp_path: Path, node_type: str, opset: int = 13, **attrs) -> dict:
    """Conv -> the op (NHWC, in place after the Conv) -> NCHW output, deployed and verified."""
    conv, inits = conv_node("x", "c", "w", 2, 3)
    m = save_model(tmp_path / "conv_op.onnx", [conv, helper.make_node(node_type, ["c"], ["y"], **attrs)],
                   [1, 2, 4, 5], [1, 3, 4, 5], inits, opset=opset)
    return deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, 4, 5]), tmp_path / "out")
