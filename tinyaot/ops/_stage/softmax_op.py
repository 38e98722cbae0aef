from tinyaot.ops.softmax import softmax_s8
import numpy as np
from onnx import helper

from tinyaot.errors import TinyaotError
from tinyaot.ir import QuantParams
from tinyaot.ops.fixedpoint import softmax_params
from tinyaot.ops.registry import KernelCall, OracleLayer, OpSpec, register
# ---- appended below the reference kernels ------------------------------------------------------------------


@register("Softmax")
class Softmax(OpSpec):
    """ONNX Softmax over the last physical axis (the `to_nhwc` pass guarantees it). The output parameters are
    TFLite's fixed ones, scale 1/256 and zero point -128, so the 256 levels span [0, 1)."""

    alias_output_to_input = True  # each row is read (max, sum) before any of it is written
    # Measured against onnxruntime's float softmax on the shared models' real inputs (see tests/ops):
    # the fixed-point exponent keeps every output within one step of round-half-to-even of the float value.
    oracle_tolerance = 1

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        axis = int(node.attrs.get("axis", -1)) % len(x.shape)
        if any(d != 1 for d in x.shape[axis + 1:]):
            raise TinyaotError(f"Softmax node {node.name!r}: only the innermost axis is supported")
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(1.0 / 256, -128)
        mult, shift, diff_min = softmax_params(x.quant.s, 1.0)
        node.attrs.update(input_mult=mult, input_left_shift=shift, diff_min=diff_min)

    def _rows(self, node, graph):
        x = graph.tensors[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", -1)) % len(x)
        row = int(np.prod(x[axis:]))
        return int(np.prod(x)) // row, row

    def reference(self, node, graph, inputs):
        rows, row = self._rows(node, graph)
        a = node.attrs
        y = softmax_s8(inputs[0].reshape(rows, row), input_mult=a["input_mult"],
                       input_left_shift=a["input_left_shift"], diff_min=a["diff_min"])
        return [y.reshape(inputs[0].shape)]

    def render(self, node, graph, cname):
        rows, row = self._rows(node, graph)
        a = node.attrs
        code = (f"tinyaot_softmax_s8({{in0}}, {rows}, {row}, {a['input_mult']}, {a['input_left_shift']}, "
                f"{a['diff_min']}, {{out0}});")
        return KernelCall("tinyaot_softmax_s8", code, ["tinyaot_softmax_s8.c"], [])

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Softmax", [node.inputs[0]], ["sm_out"],
                                             axis=len(graph.tensors[node.inputs[0]].shape) - 1)], [], "sm_out")
