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
from tinyaot.ops.common import activation_grad, fused_activation, unbroadcast
from tinyaot.ops.intbounds import shifted_sum_bounds
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.ops.registry import IN0, IN1, OUT0, KernelCall, register, Traits, Variant, variant_of

ADD_LEFT_SHIFT = 20
HALF = (1 << 30, 0)  # quantize_multiplier(0.5): the larger-scale input's multiplier and shift
FAST = "fast"  # variant: tinyaot_elementwise_add_s8_fast (same-shape activations, TFLite's preparation)
# Cost model, instructions per element executed under QEMU (ic_resnet8's residual adds, 4096..16384 elements):
# generic 80 on a Cortex-M4, 75 on a Cortex-M3; the fast kernel 17.0 and 21.0 there. Keyed by target.has_dsp.
FAST_COST_PER_ELEMENT = {True: 17.0, False: 21.0}
GENERIC_COST_PER_ELEMENT = {True: 80.0, False: 75.0}
# The Helium (MVE) variant (templates/kernels/tinyaot_elementwise_add_s8_mve.c): four elements per vector, the
# generic kernel's integers for any parameters (input offsets within [-128, 128]). Instructions per element under
# QEMU on mps3-an547 (ic_resnet8's residual adds).
MVE_ADD = "mve_add"
MVE_ADD_COST_PER_ELEMENT = 4.5  # ic_resnet8: 73,833 for 16,384 elements, 18,538 for 4,096


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


def add_fast_params(a: dict) -> dict | None:
    """The arguments of tinyaot_elementwise_add_s8_fast for an Add's parameters `a` (the node's attrs), or None
    when that kernel cannot compute them exactly. `swap`: input 2 has the larger scale, so the call passes the
    inputs the other way round (the arithmetic is symmetric in the two inputs).

    Requires TFLite's preparation: left shift 20, one input at multiplier exactly 1/2 (the larger scale), the
    other at 1/2 too or with a right shift e2 in 1..30, an output right shift eo >= 1 with
    2^28 + 2^(eo-1) + 128 * 2^eo < 2^31 (the kernel's rounding add stays in int32; see the kernel's header)."""
    if a["left_shift"] != ADD_LEFT_SHIFT:
        return None
    one = (int(a["input1_mult"]), int(a["input1_shift"]))
    two = (int(a["input2_mult"]), int(a["input2_shift"]))
    swap = one != HALF
    if swap:
        one, two = two, one
    if one != HALF:
        return None
    o1, o2 = (a["input2_offset"], a["input1_offset"]) if swap else (a["input1_offset"], a["input2_offset"])
    in2_half = two == HALF
    e2 = 1 if in2_half else -two[1]
    eo = -int(a["output_shift"])
    if not (1 <= e2 <= 30 and 1 <= eo <= 30) or 2**28 + 2**(eo - 1) + 128 * 2**eo >= 2**31:
        return None
    return {"swap": swap, "o1_20": int(o1) * 2**20, "o2_21": int(o2) * 2**21, "m2": two[0], "e2": e2,
            "half2": 2**(e2 - 1), "mo": int(a["output_mult"]), "eo": eo,
            "radd": 2**(eo - 1) + int(a["output_offset"]) * 2**eo, "act_min": int(a["act_min"]),
            "act_max": int(a["act_max"]), "in2_half": int(in2_half)}


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Add", traits=Traits(layout="elementwise", broadcast=True, quantized_constants=True, fuses_activation=True,
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

    def int_bounds(self, node, graph):
        return shifted_sum_bounds(node)

    def evaluate_float(self, node, graph, inputs):
        present = [v for v, i in zip(inputs, node.inputs) if i]
        if any(v is None for v in present):  # a constant addend: not evaluated in float
            return super().evaluate_float(node, graph, inputs)
        return [fused_activation(node, sum(present))]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        if any(v is None for v, i in zip(inputs, node.inputs) if i):
            return super().backward_float(node, graph, inputs, outputs, grad_out)
        g = activation_grad(node, outputs[0], grad_out[0])
        return [None if v is None else unbroadcast(g, v.shape) for v in inputs], {}

    def channel_ties(self, node, graph, t, channels):
        """Without broadcasting, channel c of every input adds into channel c (a residual sum): all its inputs and
        its output hold the same channels."""
        out = graph.tensors[node.outputs[0]].shape
        acts = [i for i in node.inputs if i and not graph.tensors[i].is_const]
        if len(acts) != len([i for i in node.inputs if i]) or any(graph.tensors[i].shape != out for i in acts):
            return None
        return [*acts, node.outputs[0]]

    def removed_channel_value(self, node, graph, values, gone):
        return fused_activation(node, sum(v for v, i in zip(values, node.inputs) if i))

    def _flat(self, node, graph) -> bool:
        x1, x2 = (graph.tensors[i] for i in node.inputs)
        return not (x1.is_const or x2.is_const or tuple(x1.shape) != tuple(x2.shape))

    def variants(self, node, graph, target):
        if target.core == "generic" or not self._flat(node, graph) or add_fast_params(node.attrs) is None:
            return super().variants(node, graph, target) + self._mve_variants(node, graph, target)
        n = graph.tensors[node.outputs[0]].size
        return (Variant("generic", n * GENERIC_COST_PER_ELEMENT[bool(target.has_dsp)]),
                Variant(FAST, n * FAST_COST_PER_ELEMENT[bool(target.has_dsp)])) + self._mve_variants(node, graph,
                                                                                                      target)

    def _mve_variants(self, node, graph, target) -> tuple:
        a = node.attrs
        if (not target.has_mve or not self._flat(node, graph) or graph.tensors[node.inputs[0]].dtype != "int8"
                or not all(-128 <= a[k] <= 128 for k in ("input1_offset", "input2_offset"))):
            return ()
        return (Variant(MVE_ADD, graph.tensors[node.outputs[0]].size * MVE_ADD_COST_PER_ELEMENT),)

    def render(self, node, graph, cname):
        if not self._flat(node, graph):
            return super().render(node, graph, cname)
        a = node.attrs
        n = graph.tensors[node.outputs[0]].size
        if variant_of(node) == FAST:
            f = add_fast_params(a)
            ins = [IN1, IN0] if f["swap"] else [IN0, IN1]
            args = ins + [OUT0, n] + [f[k] for k in ("o1_20", "o2_21", "m2", "e2", "half2", "mo", "eo", "radd",
                                                     "act_min", "act_max", "in2_half")]
            return KernelCall("tinyaot_elementwise_add_s8_fast", args=args,
                              files=["tinyaot_elementwise_add_s8_fast.c"])
        keys = ("input1_offset", "input1_mult", "input1_shift", "input2_offset", "input2_mult", "input2_shift",
                "left_shift", "output_offset", "output_mult", "output_shift", "act_min", "act_max")
        if variant_of(node) == MVE_ADD:  # same arguments as the generic kernel
            return KernelCall("tinyaot_elementwise_add_s8_mve",
                              files=["tinyaot_elementwise_add_s8_mve.c", "tinyaot_mve_support.h"],
                              template="layers/elementwise_add.c.j2", params={**{k: a[k] for k in keys}, "size": n})
        return KernelCall("tinyaot_elementwise_add_s8", files=["tinyaot_elementwise_add_s8.c"],
                          template="layers/elementwise_add.c.j2", params={**{k: a[k] for k in keys}, "size": n})
