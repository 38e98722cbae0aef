"""Elementwise multiply: bit-exact numpy int8 reference kernel and its parameters (TFLite int8 MUL).

(x1 + offset1) * (x2 + offset2) is exact in int32 (at most 255 * 255 = 65025 in magnitude) and is rescaled to the
output by one fixed-point multiplier for s1 * s2 / s_out (TFLite's two roundings), plus the output zero point.
Broadcasting follows numpy (see broadcast.py for the C kernel's stride walk); a constant operand (x times a
per-channel scale) is an int8 tensor like any other.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.broadcast import BinaryOp
from tinyaot.ops.intbounds import epilogue, offset_input_max
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.ops.registry import register, Traits


def mul_params(s1: float, s2: float, s_out: float) -> dict:
    mult, shift = quantize_multiplier(float(s1) * float(s2) / float(s_out))
    return {"output_mult": mult, "output_shift": shift}


def elementwise_mul_s8(in1: np.ndarray, in2: np.ndarray, *, input1_offset: int, input2_offset: int,
                       output_offset: int, output_mult: int, output_shift: int, act_min: int = -128,
                       act_max: int = 127) -> np.ndarray:
    """int8 * int8 -> int8 with numpy broadcasting."""
    prod = (np.asarray(in1, np.int64) + int(input1_offset)) * (np.asarray(in2, np.int64) + int(input2_offset))
    out = multiply_by_quantized_multiplier(prod, output_mult, output_shift) + int(output_offset)
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Mul", traits=Traits(layout="elementwise", broadcast=True, quantized_constants=True, fuses_activation=True,
                         kernels=("tinyaot_elementwise_binary_s8",)))
class Mul(BinaryOp):
    _KEYS = ("input1_offset", "input2_offset", "output_offset", "output_mult", "output_shift", "act_min", "act_max")

    def params(self, s1, s2, s_out):
        return mul_params(s1, s2, s_out)

    def int_bounds(self, node, graph):
        """(x1 - zp1) * (x2 - zp2), at most 255 * 255, then the epilogue."""
        a = node.attrs
        prod = offset_input_max(a["input1_offset"]) * offset_input_max(a["input2_offset"])
        items = [("product (x1 - zp1) * (x2 - zp2)", prod)]
        epilogue(items, [prod], a["output_mult"], a["output_shift"], a["output_offset"])
        return items

    def reference_fn(self, a, b, **kw):
        return elementwise_mul_s8(a, b, **kw)
