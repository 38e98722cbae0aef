"""Add at 16 bits: TFLite's int16 ADD of two int16 activations of one shape, left shift 15 (|x| << 15 <= 2**30),
zero points 0."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.core.quant16 import Q16MAX, Q16MIN
from tinyaot.ops.common import activation_nodes
from tinyaot.ops.registry import IN0, IN1, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, out16, ptr, require16

ADD16_LEFT_SHIFT = 15  # |x| <= 32768, so x << 15 <= 2**30 (TFLite's int16 ADD uses 15 as well)


def add_params16(s1: float, s2: float, s_out: float) -> dict:
    """TFLite's ADD parameters with int16's left shift of 15 (both input multipliers <= 1/2)."""
    twice_max = 2.0 * max(float(s1), float(s2))
    m1, sh1 = quantize_multiplier(float(s1) / twice_max)
    m2, sh2 = quantize_multiplier(float(s2) / twice_max)
    mo, sho = quantize_multiplier(twice_max / ((1 << ADD16_LEFT_SHIFT) * float(s_out)))
    return {"input1_mult": m1, "input1_shift": sh1, "input2_mult": m2, "input2_shift": sh2,
            "left_shift": ADD16_LEFT_SHIFT, "output_mult": mo, "output_shift": sho}


def elementwise_add_s16(a, b, *, input1_mult, input1_shift, input2_mult, input2_shift, left_shift, output_mult,
                        output_shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    x1 = np.asarray(a, np.int64) << int(left_shift)
    x2 = np.asarray(b, np.int64) << int(left_shift)
    s = (multiply_by_quantized_multiplier(x1, input1_mult, input1_shift)
         + multiply_by_quantized_multiplier(x2, input2_mult, input2_shift))
    out = multiply_by_quantized_multiplier(s, output_mult, output_shift)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int16)


@register("AddS16", traits=Traits(fuses_activation=True, int16_form_of=("Add",),
                                  kernels=("tinyaot_elementwise_add_s16",)))
class AddS16(OpSpec):
    """Add of two int16 activations of one shape (no broadcasting, no constant operand at 16 bits)."""

    internal = True
    alias_output_to_input = True  # element i of both inputs is read before output i is written
    _KEYS = ("input1_mult", "input1_shift", "input2_mult", "input2_shift", "left_shift", "output_mult",
             "output_shift", "act_min", "act_max")

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        a, b = (graph.tensors[i] for i in node.inputs[:2])
        if len(node.inputs) != 2 or a.is_const or b.is_const or tuple(a.shape) != tuple(b.shape):
            raise TinyaotError(f"Add node {node.name!r}: with --activation-bits 16 only two activations of one "
                               "shape are supported (no constant operand, no broadcasting)")
        require16(graph, node, 0)
        require16(graph, node, 1)
        qo = out16(node, graph, ranges)
        node.attrs.update(add_params16(a.quant.s, b.quant.s, qo.s))

    def reference(self, node, graph, inputs):
        return [elementwise_add_s16(inputs[0], inputs[1], **{k: node.attrs[k] for k in self._KEYS})]

    def int_bounds(self, node, graph):
        a = node.attrs
        v = 32768 << int(a["left_shift"])
        items = [(f"input shifted left by {a['left_shift']}", v)]
        # each rescaled term is at most v / 2 (input multipliers <= 1/2), so their sum is at most v
        s1 = int(np.abs(multiply_by_quantized_multiplier(v, a["input1_mult"], a["input1_shift"])))
        s2 = int(np.abs(multiply_by_quantized_multiplier(v, a["input2_mult"], a["input2_shift"])))
        items.append(("sum of the rescaled inputs", s1 + s2))
        return items

    def render(self, node, graph, cname):
        a = node.attrs
        p = [a[k] for k in self._KEYS]
        return KernelCall("tinyaot_elementwise_add_s16",
                          files=["tinyaot_elementwise_add_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_params", np.asarray(p, np.int64))],
                          template=TEMPLATE,
                          params={"args": [ptr("const int16_t *", IN0), ptr("const int16_t *", IN1),
                                           f"{cname}_params", str(graph.tensors[node.outputs[0]].size),
                                           ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        add = helper.make_node("Add", list(node.inputs[:2]), ["add_out"])
        n2, i2, out = activation_nodes(node, "add_out")
        return OracleLayer([add] + n2, i2, out)
