"""Elementwise subtract: bit-exact numpy int8 reference kernel (TFLite int8 SUB).

TFLite's SUB is its ADD with the second rescaled term subtracted: both inputs are offset, shifted left by 20 and
rescaled to twice the larger input scale (multipliers <= 1/2, see add.py for the overflow bound), and the
difference is rescaled to the output. The difference of two terms each below 2**27 in magnitude stays below 2**28.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.add import add_params
from tinyaot.ops.broadcast import BinaryOp
from tinyaot.ops.intbounds import shifted_sum_bounds
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier
from tinyaot.ops.registry import register, Traits


def elementwise_sub_s8(in1: np.ndarray, in2: np.ndarray, *, input1_offset: int, input1_mult: int, input1_shift: int,
                       input2_offset: int, input2_mult: int, input2_shift: int, left_shift: int,
                       output_offset: int, output_mult: int, output_shift: int,
                       act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 - int8 -> int8 with numpy broadcasting."""
    x1 = (np.asarray(in1, np.int64) + int(input1_offset)) << int(left_shift)
    x2 = (np.asarray(in2, np.int64) + int(input2_offset)) << int(left_shift)
    d = (multiply_by_quantized_multiplier(x1, input1_mult, input1_shift)
         - multiply_by_quantized_multiplier(x2, input2_mult, input2_shift))
    out = multiply_by_quantized_multiplier(d, output_mult, output_shift) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Sub", traits=Traits(layout="elementwise", broadcast=True, quantized_constants=True, fuses_activation=True,
                         kernels=("tinyaot_elementwise_binary_s8",)))
class Sub(BinaryOp):
    _KEYS = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift",
             "left_shift", "output_offset", "output_mult", "output_shift", "act_min", "act_max")

    def params(self, s1, s2, s_out):
        return add_params(s1, s2, s_out)

    def int_bounds(self, node, graph):
        return shifted_sum_bounds(node)

    def reference_fn(self, a, b, **kw):
        return elementwise_sub_s8(a, b, **kw)
