"""Elementwise add: bit-exact numpy int8 reference kernel and its parameter preparation (TFLite int8 ADD).

Both inputs are brought to a common scale (twice the larger input scale) with `left_shift` = 20 bits of headroom so
the rescaling keeps precision: (x + offset) is at most 255 in magnitude, times 2**20 is below 2**28, and the sum of
the two rescaled terms (each at most half of that, since each input multiplier is <= 1/2) stays below 2**28, so
no int32 step can overflow. The sum is then rescaled to the output scale.

Two activations of one shape (residual connections) use the flat `tinyaot_elementwise_add_s8`; a constant addend
that `fuse_bias_add` could not fold into a bias, or operands of different shapes (numpy broadcasting), go through
the broadcasting kernel shared with Sub and Mul (broadcast.py) with the same arithmetic.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.broadcast import BinaryOp
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.ops.registry import KernelCall, register, Traits

ADD_LEFT_SHIFT = 20


def add_params(s1: float, s2: float, s_out: float) -> dict:
    """Multipliers and shifts for elementwise_add_s8 given input and output scales (offsets are not included).

    input_k scale relative to twice the max input scale is <= 1/2, and the output multiplier
    2*max(s1,s2) / (2**20 * s_out) is far below one for any sensible scales, so every shift is <= 0 (TFLite's
    "smaller than one" multipliers); the kernel would also accept a positive output shift.
    """
    twice_max = 2.0 * max(float(s1), float(s2))
    m1, sh1 = quantize_multiplier(float(s1) / twice_max)
    m2, sh2 = quantize_multiplier(float(s2) / twice_max)
    mo, sho = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * float(s_out)))
    return {
        "input1_mult": m1, "input1_shift": sh1,
        "input2_mult": m2, "input2_shift": sh2,
        "left_shift": ADD_LEFT_SHIFT,
        "output_mult": mo, "output_shift": sho,
    }


def elementwise_add_s8(in1: np.ndarray, in2: np.ndarray, *, input1_offset: int, input1_mult: int, input1_shift: int,
                       input2_offset: int, input2_mult: int, input2_shift: int, left_shift: int,
                       output_offset: int, output_mult: int, output_shift: int,
                       act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 + int8 -> int8 with numpy broadcasting (the flat C kernel takes equal shapes, the binary one any)."""
    a = np.asarray(in1)
    b = np.asarray(in2)
    x1 = (a.astype(np.int64) + int(input1_offset)) << int(left_shift)
    x2 = (b.astype(np.int64) + int(input2_offset)) << int(left_shift)
    s = (multiply_by_quantized_multiplier(x1, input1_mult, input1_shift)
         + multiply_by_quantized_multiplier(x2, input2_mult, input2_shift))
    out = multiply_by_quantized_multiplier(s, output_mult, output_shift) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Add", traits=Traits(layout="elementwise", broadcast=True, fuses_activation=True,
                         kernels=("tinyaot_elementwise_add_s8", "tinyaot_elementwise_binary_s8")))
class Add(BinaryOp):
    """ONNX Add of two int8 tensors, each input rescaled to the output's parameters. Constant per-channel addends
    right after a Conv are folded into its bias by the passes; any other constant is an int8 operand."""

    _KEYS = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift",
             "left_shift", "output_offset", "output_mult", "output_shift", "act_min", "act_max")

    def params(self, s1, s2, s_out):
        return add_params(s1, s2, s_out)

    def reference_fn(self, a, b, **kw):
        return elementwise_add_s8(a, b, **kw)

    def render(self, node, graph, cname):
        x1, x2 = (graph.tensors[i] for i in node.inputs)
        if x1.is_const or x2.is_const or tuple(x1.shape) != tuple(x2.shape):
            return super().render(node, graph, cname)
        a = node.attrs
        n = graph.tensors[node.outputs[0]].size
        keys = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift",
                "left_shift", "output_offset", "output_mult", "output_shift", "act_min", "act_max")
        return KernelCall("tinyaot_elementwise_add_s8", files=["tinyaot_elementwise_add_s8.c"],
                          template="layers/elementwise_add.c.j2", params={**{k: a[k] for k in keys}, "size": n})
