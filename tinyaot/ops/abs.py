"""Abs: y = |x| on int8, with calibrated output parameters.

q_out = zp_out + round(|q_in - zp_in| * s_in / s_out), clamped to int8. The value v = |q_in - zp_in| is at most
255, too small for one fixed-point multiply to keep any fractional bits, so it is first shifted left (by up to 23
bits: 255 * 2**23 < 2**31, core/fixedpoint.multiplier_with_headroom) and the product is rounded once, as TFLite's
small rescalings do. Kernel: templates/kernels/tinyaot_abs_s8.c. Everything about the op is in this file: traits,
shape, quantization, the numpy reference (the bit-exact expectation for the C), the kernel call and the float
onnxruntime equivalent.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.fixedpoint import multiplier_with_headroom, multiply_by_quantized_multiplier
from tinyaot.ops.common import out_params
from tinyaot.ops.registry import IN0, OUT0, KernelCall, OpSpec, OracleLayer, Traits, register

KERNEL = "tinyaot_abs_s8"


def abs_s8(input: np.ndarray, *, input_offset: int, output_offset: int, mult: int, shift: int, left_shift: int,
           act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """The int8 reference of tinyaot_abs_s8: v = |x + input_offset| (<= 255), (v << left_shift) requantized."""
    v = np.abs(np.asarray(input, np.int64) + int(input_offset)) << int(left_shift)
    out = multiply_by_quantized_multiplier(v, int(mult), int(shift)) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


@register("Abs", traits=Traits(layout="elementwise", kernels=(KERNEL,)))
class Abs(OpSpec):
    alias_output_to_input = True  # element i is read before it is written

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def inplace_offset(self, node, graph):
        return 0  # same size, element by element

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]].quant
        qo, lo, hi = out_params(node, graph, ranges)
        mult, shift, left = multiplier_with_headroom(x.s / qo.s)
        node.attrs.update(input_offset=-x.zp, output_offset=qo.zp, mult=mult, shift=shift, left_shift=left,
                          act_min=lo, act_max=hi)

    def _args(self, node) -> dict:
        a = node.attrs
        return {k: a[k] for k in ("input_offset", "output_offset", "mult", "shift", "left_shift", "act_min",
                                  "act_max")}

    def reference(self, node, graph, inputs):
        return [abs_s8(inputs[0], **self._args(node))]

    def render(self, node, graph, cname):
        a = self._args(node)
        n = graph.tensors[node.inputs[0]].size
        return KernelCall(KERNEL, [IN0, OUT0, n, a["input_offset"], a["output_offset"], a["left_shift"], a["mult"],
                                   a["shift"], a["act_min"], a["act_max"]], [KERNEL + ".c"])

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Abs", [node.inputs[0]], ["abs_out"])], [], "abs_out")
