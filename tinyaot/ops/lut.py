"""Unary activations as 256-entry lookup tables: the shared part of Sigmoid, Tanh, HardSwish, HardSigmoid and
LeakyRelu, and their one C kernel (`tinyaot_lut_s8`).

An int8 input takes only 256 values, so f on it is exactly a table, computed at compile time the way onnxruntime
computes the layer's QDQ equivalent: table[q + 128] = QuantizeLinear_out(f(DequantizeLinear_in(q))), with the
dequantized input and f's value in float32 (as onnxruntime carries them), the division by the output scale in
float32, and round half to even. The only remaining difference to onnxruntime is its own float approximation of f
(MLAS evaluates tanh and the logistic function with polynomials): where that moves f(x) / s_out across a rounding
boundary the two differ by one step, never more. Each table costs 256 bytes of flash and the kernel is one load per
element, with no arithmetic that could overflow.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.ir import QuantParams
from tinyaot.ops.common import activation_nodes, out_params
from tinyaot.ops.registry import ConstArray, IN0, KernelCall, OpSpec, OracleLayer, OUT0

QMIN, QMAX = -128, 127


def lut_s8(input: np.ndarray, table: np.ndarray) -> np.ndarray:
    """output = table[input + 128] (table: 256 int8 values for inputs -128..127)."""
    table = np.asarray(table, np.int8)
    if table.shape != (256,):
        raise ValueError(f"lut_s8: the table has shape {table.shape}, not (256,)")
    return table[np.asarray(input, np.int16) + 128]


def make_table(fn, q_in: QuantParams, q_out: QuantParams, act_min: int = QMIN, act_max: int = QMAX) -> np.ndarray:
    """The int8 table of `fn` (float64 array -> float64 array) from input parameters to output parameters."""
    q = np.arange(QMIN, QMAX + 1, dtype=np.int32)
    x = (q - np.int32(q_in.zp)).astype(np.float32) * np.float32(q_in.s)  # DequantizeLinear, float32
    y = np.asarray(fn(x.astype(np.float64)), np.float64).astype(np.float32)
    with np.errstate(over="ignore"):  # a huge f(x) / tiny scale saturates below, like QuantizeLinear
        r = np.rint(y / np.float32(q_out.s)).astype(np.float64) + q_out.zp
    return np.clip(r, max(QMIN, act_min), min(QMAX, act_max)).astype(np.int8)


class LutOp(OpSpec):
    """A unary elementwise op computed by table. Subclasses give `fn` (float64 numpy) and `onnx_node` (its float
    ONNX equivalent); `fixed_output` pins TFLite's output parameters where TFLite fixes them (sigmoid, tanh), else
    the output parameters come from calibration."""

    alias_output_to_input = True  # element i is read before it is written
    fixed_output: tuple[float, int] | None = None

    def fn(self, node, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def onnx_node(self, node, x: str, out: str):
        """The float ONNX node(s) computing `out` from `x` (one node, or a list)."""
        return helper.make_node(self.op_type, [x], [out])

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        # A pre-quantized model's own output parameters (already on the tensor) are kept: a table serves any.
        if self.fixed_output is not None and graph.tensors[node.outputs[0]].quant is None:
            out = graph.tensors[node.outputs[0]]
            out.quant = QuantParams.per_tensor(*self.fixed_output)
            qo, lo, hi = out.quant, QMIN, QMAX
        else:
            qo, lo, hi = out_params(node, graph, ranges)
        node.attrs["table"] = make_table(lambda v: self.fn(node, v), x.quant, qo, lo, hi)

    def reference(self, node, graph, inputs):
        return [lut_s8(inputs[0], node.attrs["table"])]

    def batches_reference(self, node, graph):
        return True  # element by element

    def render(self, node, graph, cname):
        n = graph.tensors[node.inputs[0]].size
        return KernelCall("tinyaot_lut_s8", [IN0, OUT0, n, f"{cname}_table"], ["tinyaot_lut_s8.c"],
                          [ConstArray("int8_t", f"{cname}_table", node.attrs["table"])])

    def params_bytes(self, node, graph):
        return 256

    def oracle(self, node, graph):
        n2, i2, out = activation_nodes(node, "lut_out")
        core = self.onnx_node(node, node.inputs[0], "lut_out")
        return OracleLayer((core if isinstance(core, list) else [core]) + n2, i2, out)
