"""HardSigmoid and HardSwish at 16 bits, one gate: clip(alpha * x + beta, 0, 1) in Q30, from q * A + B with
A = alpha * s_in * 2**46 and B = beta * 2**46 rounded to integers (the error of A, at most |q| / 2 units of 2**-46,
stays below 2**-32 of the gate), rounded to Q30 (a 2**-31 error); HardSigmoid rescales the gate by
1 / (s_out * 2**30), HardSwish multiplies it by q (|q * g| <= 2**45), rounds that to 2**-15 of it (|z| <= 2**30)
and rescales by s_in / (s_out * 2**15). Every error before the final rounding is below 1e-4 of an output LSB
for any calibrated range, so the result is round(f(x) / s_out) but at exact ties.

Like every 16-bit elementwise layer it ends in one requantization of an exact integer (core/quant16.py
`requantize_exact`: the full Q0.31 multiplier, one rounding half toward +infinity, in int64), so the only
difference to onnxruntime's float QDQ is its float32 arithmetic near a rounding tie: one LSB at most.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.quant16 import Q16MAX, Q16MIN, activation_clamp16, activation_qparams16, requantize_exact
from tinyaot.ops.common import activation_nodes
from tinyaot.ops.registry import IN0, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import INT64_MAX, TEMPLATE, exact16, ptr, require16, rescaled_bound

GATE_BITS = 30  # the hard gate's fraction bits (1.0 == 2**30)
GATE_PRE = 46  # the bits of A and B: 16 more than the gate's, dropped by one rounding
SWISH_DROP = 15  # q * gate (<= 2**45) is rounded to 2**-15 of itself before the final requantization
B_LIMIT = 1 << 62  # |B| beyond this only moves a gate that is already saturated (|q * A| < 2**61)


def hard_gate_s16(q, a_coef, b_coef) -> np.ndarray:
    """clip(alpha * x + beta, 0, 1) in Q30: (q * A + B) / 2**16 rounded, clipped to [0, 2**30].
    |q * A| < 2**61 and |B| <= 2**62 (hard_params), so the int64 sum cannot overflow."""
    s = np.asarray(q, np.int64) * np.int64(a_coef) + np.int64(b_coef) + np.int64(1 << (GATE_PRE - GATE_BITS - 1))
    return np.clip(s >> (GATE_PRE - GATE_BITS), 0, 1 << GATE_BITS)


def hard_sigmoid_s16(q, *, a_coef, b_coef, mult, shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    g = hard_gate_s16(q, a_coef, b_coef)  # <= 2**30
    return np.clip(requantize_exact(g, mult, shift), int(act_min), int(act_max)).astype(np.int16)


def hard_swish_s16(q, *, a_coef, b_coef, mult, shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    q64 = np.asarray(q, np.int64)
    z = q64 * hard_gate_s16(q64, a_coef, b_coef)  # |z| <= 2**15 * 2**30
    z = (z + (1 << (SWISH_DROP - 1))) >> SWISH_DROP  # |z| <= 2**30
    return np.clip(requantize_exact(z, mult, shift), int(act_min), int(act_max)).astype(np.int16)


def hard_params(alpha: float, beta: float, s_in: float, where: str) -> tuple[int, int]:
    """(A, B): alpha * s_in and beta in units of 2**-46. |alpha * s_in| < 1 keeps |q * A| < 2**61 (a gate that
    moves by a whole step per input LSB is a step function no calibrated layer has)."""
    a_real = float(np.float32(alpha)) * float(s_in)
    if not abs(a_real) < 1.0:
        raise TinyaotError(f"{where}: alpha * input scale = {a_real:.3g}, the int16 gate needs it below 1")
    a_coef = int(round(a_real * 2.0 ** GATE_PRE))
    b_coef = int(np.clip(round(float(np.float32(beta)) * 2.0 ** GATE_PRE), -B_LIMIT, B_LIMIT))
    return a_coef, b_coef


class _HardS16(OpSpec):
    """HardSigmoid / HardSwish at 16 bits: the Q30 gate (module docstring), then the op's requantization."""

    internal = True
    alias_output_to_input = True  # element i is read before it is written
    kernel = ""
    swish = False

    def _ab(self, node):
        return float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        where = f"{node.attrs.get('onnx_op', node.op)} node {node.name!r}"
        x = require16(graph, node)
        qo = graph.tensors[node.outputs[0]]
        if qo.name not in ranges:
            raise TinyaotError(f"calibration produced no range for tensor {qo.name!r}")
        qo.quant = activation_qparams16(*ranges[qo.name])
        lo, hi = activation_clamp16(qo.quant, node.attrs.get("activation"))
        a_coef, b_coef = hard_params(*self._ab(node), x.quant.s, where)
        s_in, s_out = np.float64(x.quant.s), np.float64(qo.quant.s)
        real = s_in / (s_out * 2.0 ** SWISH_DROP) if self.swish else 1.0 / (s_out * 2.0 ** GATE_BITS)
        mult, shift = exact16(real, where)
        node.attrs.update(a_coef=a_coef, b_coef=b_coef, mult=mult, shift=shift, act_min=lo, act_max=hi)

    def _kw(self, node):
        return {k: node.attrs[k] for k in ("a_coef", "b_coef", "mult", "shift", "act_min", "act_max")}

    def reference(self, node, graph, inputs):
        fn = hard_swish_s16 if self.swish else hard_sigmoid_s16
        return [fn(inputs[0], **self._kw(node))]

    def int_bounds(self, node, graph):
        a = node.attrs
        gate = 32768 * abs(int(a["a_coef"])) + abs(int(a["b_coef"])) + (1 << 15)
        items = [("gate sum q * A + B", gate, INT64_MAX)]
        if self.swish:
            items.append(("input times the Q30 gate", 1 << 45, INT64_MAX))
        items.append(("rescaled value times the Q0.31 multiplier plus rounding",
                      rescaled_bound(1 << 30, a["mult"], a["shift"]), INT64_MAX))
        return items

    def params_bytes(self, node, graph):
        return 6 * 8

    def render(self, node, graph, cname):
        a = node.attrs
        p = [a["a_coef"], a["b_coef"], a["mult"], a["shift"], a["act_min"], a["act_max"]]
        return KernelCall(self.kernel, files=["tinyaot_hard_activation_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int64_t", f"{cname}_params", np.asarray(p, np.int64))],
                          template=TEMPLATE,
                          params={"args": [ptr("const int16_t *", IN0), str(graph.tensors[node.outputs[0]].size),
                                           f"{cname}_params", ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        alpha, beta = self._ab(node)
        x = node.inputs[0]
        gate = helper.make_node("HardSigmoid", [x], ["gate_out"], alpha=alpha, beta=beta)
        if not self.swish:
            n2, i2, out = activation_nodes(node, "gate_out")
            return OracleLayer([gate] + n2, i2, out)
        mul = helper.make_node("Mul", [x, "gate_out"], ["swish_out"])  # ONNX's definition of HardSwish
        n2, i2, out = activation_nodes(node, "swish_out")
        return OracleLayer([gate, mul] + n2, i2, out)


@register("HardSigmoidS16", traits=Traits(int16_form_of=("HardSigmoid",),
                                           kernels=("tinyaot_hard_sigmoid_s16",)))
class HardSigmoidS16(_HardS16):
    """HardSigmoid max(0, min(1, alpha * x + beta)) at 16 bits (ONNX defaults alpha 0.2, beta 0.5)."""

    kernel = "tinyaot_hard_sigmoid_s16"


@register("HardSwishS16", traits=Traits(int16_form_of=("HardSwish",),
                                         kernels=("tinyaot_hard_swish_s16",)))
class HardSwishS16(_HardS16):
    """HardSwish x * max(0, min(1, x / 6 + 1/2)) at 16 bits."""

    kernel = "tinyaot_hard_swish_s16"
    swish = True

    def _ab(self, node):
        return 1.0 / 6.0, 0.5
