from tinyaot.ops.add import add_params, elementwise_add_s8
import numpy as np
from onnx import helper

from tinyaot.errors import TinyaotError
from tinyaot.ops.common import activation_nodes, out_params
from tinyaot.ops.registry import KernelCall, OracleLayer, OpSpec, register
# ---- appended below the reference kernels ------------------------------------------------------------------


@register("Add")
class Add(OpSpec):
    """ONNX Add of two int8 tensors of the same shape (residual connections), each input rescaled to the
    output's parameters. Constant addends are folded into a bias by the passes before this op is reached."""

    alias_output_to_input = True  # the kernel reads each element before writing it

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        a, b = (graph.tensors[i].shape for i in node.inputs)
        return [tuple(np.broadcast_shapes(a, b))]

    def quantize(self, node, graph, ranges):
        a, b = (graph.tensors[i] for i in node.inputs)
        if a.is_const or b.is_const or a.shape != b.shape:
            raise TinyaotError(f"Add node {node.name!r}: only the sum of two same-shape activations is supported "
                               f"(shapes {list(a.shape)} and {list(b.shape)})")
        qo, lo, hi = out_params(node, graph, ranges)
        node.attrs.update(add_params(a.quant.s, b.quant.s, qo.s), input1_offset=-a.quant.zp,
                          input2_offset=-b.quant.zp, output_offset=qo.zp, act_min=lo, act_max=hi)

    _KEYS = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift",
             "left_shift", "output_offset", "output_mult", "output_shift", "act_min", "act_max")

    def reference(self, node, graph, inputs):
        return [elementwise_add_s8(inputs[0], inputs[1], **{k: node.attrs[k] for k in self._KEYS})]

    def render(self, node, graph, cname):
        a = node.attrs
        n = graph.tensors[node.outputs[0]].size
        code = (f"status |= tinyaot_elementwise_add_s8({{in0}}, {{in1}}, {a['input1_offset']}, {a['input1_mult']}, "
                f"{a['input1_shift']},\n    {a['input2_offset']}, {a['input2_mult']}, {a['input2_shift']}, "
                f"{a['left_shift']}, {{out0}},\n    {a['output_offset']}, {a['output_mult']}, {a['output_shift']}, "
                f"{a['act_min']}, {a['act_max']}, {n});")
        return KernelCall("tinyaot_elementwise_add_s8", code, ["tinyaot_elementwise_add_s8.c"], [])

    def params_bytes(self, node, graph):
        return 0

    def oracle(self, node, graph):
        add = helper.make_node("Add", list(node.inputs), ["add_out"])
        n2, i2, out = activation_nodes(node, "add_out")
        return OracleLayer([add] + n2, i2, out)
