"""Softmax at 16 bits: int16 logits in, int8 probabilities out (scale 1/256, zero point -128): TFLite's integer
softmax (fixed-point exp over Q5.26 differences) fed the int16 differences; a difference below diff_min
contributes exp = 0 exactly as for int8, and diff_min keeps d * 2**left_shift inside int32."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import softmax_params
from tinyaot.core.quant import QuantParams
from tinyaot.ops.registry import IN0, OUT0, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, ptr, require16
from tinyaot.ops.softmax import MAX_ROW_SIZE, softmax_s8


@register("SoftmaxS16", traits=Traits(int16_form_of=("Softmax",), kernels=("tinyaot_softmax_s16_s8",)))
class SoftmaxS16(OpSpec):
    """Softmax of int16 logits over the innermost axis, int8 probabilities out (scale 1/256, zero point -128)."""

    internal = True
    output_bits = 8  # its output stays int8 (probabilities) whatever the layer's width
    oracle_tolerance = 1  # as the int8 softmax: the fixed-point exp is within one output step of float

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = require16(graph, node)
        axis = int(node.attrs.get("axis", -1)) % len(x.shape)
        if axis != len(x.shape) - 1 and int(np.prod(x.shape[axis + 1:])) != 1:
            raise TinyaotError(f"Softmax node {node.name!r}: only the innermost axis is supported with "
                               "--activation-bits 16")
        if x.shape[axis] > MAX_ROW_SIZE:
            raise TinyaotError(f"Softmax node {node.name!r}: axis of {x.shape[axis]} > {MAX_ROW_SIZE} elements")
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(1.0 / 256, -128)
        mult, shift, diff_min = softmax_params(x.quant.s, 1.0)
        node.attrs.update(input_mult=mult, input_left_shift=shift, diff_min=diff_min)

    def _rows(self, node, graph):
        x = graph.tensors[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", -1)) % len(x)
        return int(np.prod(x[:axis])), int(x[axis])

    def reference(self, node, graph, inputs):
        rows, n = self._rows(node, graph)
        a = node.attrs
        y = softmax_s8(np.asarray(inputs[0]).reshape(rows, n), input_mult=a["input_mult"],
                       input_left_shift=a["input_left_shift"], diff_min=a["diff_min"])
        return [y.reshape(inputs[0].shape)]

    def int_bounds(self, node, graph):
        return [(f"sum of {self._rows(node, graph)[1]} exponentials in Q12.19", self._rows(node, graph)[1] << 19)]

    def render(self, node, graph, cname):
        rows, n = self._rows(node, graph)
        a = node.attrs
        args = [ptr("const int16_t *", IN0), str(rows), str(n), str(a["input_mult"]), str(a["input_left_shift"]),
                str(a["diff_min"]), ptr("int8_t *", OUT0)]
        return KernelCall("tinyaot_softmax_s16_s8", files=["tinyaot_softmax_s16_s8.c", "tinyaot_s16_support.h"],
                          template=TEMPLATE, params={"args": args})

    def oracle(self, node, graph):
        axis = int(node.attrs.get("axis", -1)) % len(graph.tensors[node.inputs[0]].shape)
        return OracleLayer([helper.make_node("Softmax", [node.inputs[0]], ["sm_out"], axis=axis)], [], "sm_out")
