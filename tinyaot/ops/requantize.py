"""Requantize: int8 <-> int16 between layers of different widths (compress/precision.py inserts it, through
`conversion_node`), x' = requant(x - zp) + zp' with TFLite's 32-bit MultiplyByQuantizedMultiplier."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.core.quant import QMAX, QMIN, activation_qparams
from tinyaot.core.quant16 import Q16MAX, Q16MIN, activation_qparams16
from tinyaot.ir import Node
from tinyaot.ops.registry import IN0, OUT0, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, ptr


def requantize_values(x, *, input_offset, mult, shift, output_offset, out_bits) -> np.ndarray:
    """int8 <-> int16: requant(x + input_offset) + output_offset, saturated to the output type."""
    lo, hi, dt = (QMIN, QMAX, np.int8) if out_bits == 8 else (Q16MIN, Q16MAX, np.int16)
    v = multiply_by_quantized_multiplier(np.asarray(x, np.int64) + int(input_offset), mult, shift)
    return np.clip(v + int(output_offset), lo, hi).astype(dt)


@register("Requantize", traits=Traits(kernels=("tinyaot_requantize_s8_s16", "tinyaot_requantize_s16_s8")))
class Requantize(OpSpec):
    """int8 -> int16 or int16 -> int8 between layers of different widths (compress/precision.py inserts it):
    node.attrs["out_bits"] is the output's width; the output tensor's range is the input's calibrated range."""

    internal = True

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        out = graph.tensors[node.outputs[0]]
        bits = int(node.attrs["out_bits"])
        if out.name not in ranges:
            raise TinyaotError(f"calibration produced no range for tensor {out.name!r}")
        if bits == 16:
            out.quant = activation_qparams16(*ranges[out.name])
        else:
            out.quant = activation_qparams(*ranges[out.name])
        mult, shift = quantize_multiplier(np.float64(x.quant.s) / np.float64(out.quant.s))
        node.attrs.update(input_offset=-x.quant.zp, output_offset=out.quant.zp, mult=mult, shift=shift)

    def reference(self, node, graph, inputs):
        a = node.attrs
        return [requantize_values(inputs[0], input_offset=a["input_offset"], mult=a["mult"], shift=a["shift"],
                                  output_offset=a["output_offset"], out_bits=int(a["out_bits"]))]

    def int_bounds(self, node, graph):
        a = node.attrs
        v = (255 if int(a["out_bits"]) == 16 else 32768)
        r = int(np.abs(multiply_by_quantized_multiplier(v, a["mult"], a["shift"])))
        return [("rescaled input plus the output offset", r + abs(int(a["output_offset"])))]

    def render(self, node, graph, cname):
        a = node.attrs
        n = graph.tensors[node.outputs[0]].size
        q = [str(a["input_offset"]), str(a["mult"]), str(a["shift"]), str(a["output_offset"])]
        if int(a["out_bits"]) == 16:
            kernel, args = "tinyaot_requantize_s8_s16", [IN0, str(n), *q, ptr("int16_t *", OUT0)]
        else:
            kernel, args = "tinyaot_requantize_s16_s8", [ptr("const int16_t *", IN0), str(n), *q, OUT0]
        return KernelCall(kernel, files=["tinyaot_requantize_s16.c", "tinyaot_s16_support.h"], template=TEMPLATE,
                          params={"args": args})

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Identity", [node.inputs[0]], ["rq_out"])], [], "rq_out")


def conversion_node(name: str, tensor: str, out: str, bits: int) -> Node:
    """A Requantize node converting `tensor` into `out` of width `bits` (8 or 16)."""
    return Node("Requantize", name, [tensor], [out], {"out_bits": bits, "activation_bits": bits})


def is_conversion(node: Node) -> bool:
    """`node` converts between widths (a Requantize that compress/precision.py inserted)."""
    return node.op == "Requantize"
