"""The 16x8 scheme's elementwise layers (see s16.py for the scheme and how a node becomes its S16 op): bit-exact
numpy references, quantization, C kernel calls and onnxruntime equivalents of Mul, Concat, HardSwish and
HardSigmoid at 16 bits. Every int16 tensor is symmetric (zero point 0).

All of them end in one requantization of an exact integer (core/quant16.py `requantize_exact`: the full Q0.31
multiplier, one rounding half toward +infinity, in int64), so the only difference to onnxruntime's float QDQ is its
float32 arithmetic near a rounding tie: one LSB at most.
- MulS16: TFLite's int16 MUL product a * b, exact in int32 (|a * b| <= 2**30), rescaled by s1 * s2 / s_out with one
  rounding (TFLite rounds it twice in 32 bits). Numpy broadcasting over up to 4 merged axes (broadcast.py's
  stride walk: the squeeze-and-excitation x[1, H, W, C] * gate[1, 1, 1, C]); a constant operand is stored int16 on
  its own symmetric scale.
- ConcatS16: an input with the output's scale is copied; any other is rescaled, x * s_in / s_out (|x| <= 2**15).
- HardSigmoidS16 / HardSwishS16: the gate clip(alpha * x + beta, 0, 1) in Q30, from q * A + B with
  A = alpha * s_in * 2**46 and B = beta * 2**46 rounded to integers (the error of A, at most |q| / 2 units of 2**-46,
  stays below 2**-32 of the gate), rounded to Q30 (a 2**-31 error); HardSigmoid rescales the gate by
  1 / (s_out * 2**30), HardSwish multiplies it by q (|q * g| <= 2**45), rounds that to 2**-15 of it (|z| <= 2**30)
  and rescales by s_in / (s_out * 2**15). Every error before the final rounding is below 1e-4 of an output LSB
  for any calibrated range, so the result is round(f(x) / s_out) but at exact ties.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import ScaleError
from tinyaot.core.quant16 import (Q16MAX, Q16MIN, activation_clamp16, activation_qparams16,
                                  exact_multiplier, requantize_exact)
from tinyaot.ops.broadcast import broadcast_geometry
from tinyaot.ops.common import activation_nodes, oracle_operands, set_const
from tinyaot.ops.registry import IN0, OUT0, Buffer, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16 import TEMPLATE, _out16, _require16, ptr

INT64_MAX = (1 << 63) - 1
GATE_BITS = 30  # the hard gate's fraction bits (1.0 == 2**30)
GATE_PRE = 46  # the bits of A and B: 16 more than the gate's, dropped by one rounding
SWISH_DROP = 15  # q * gate (<= 2**45) is rounded to 2**-15 of itself before the final requantization
B_LIMIT = 1 << 62  # |B| beyond this only moves a gate that is already saturated (|q * A| < 2**61)


def _rescaled(v: int, mult, shift) -> int:
    """|v * mult| plus the rounding term of requantize_exact: the int64 intermediate for inputs up to |v|."""
    return int(v) * int(mult) + (1 << (int(shift) - 1))


def _exact(real: float, where: str) -> tuple[int, int]:
    try:
        return exact_multiplier(real)
    except ScaleError as exc:
        raise TinyaotError(f"{where}: {exc}") from None


# ---- numpy references ------------------------------------------------------------------------------------------
def elementwise_mul_s16(a, b, *, mult, shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 * int16 -> int16 with numpy broadcasting: the exact product rescaled by mult / 2**shift."""
    prod = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    return np.clip(requantize_exact(prod, mult, shift), int(act_min), int(act_max)).astype(np.int16)


def concat_s16(inputs, parts, *, axis) -> np.ndarray:
    """int16 concat; parts[k] = (requantize, mult, shift) for input k (no rescale when requantize is 0)."""
    pieces = []
    for x, (req, mult, shift) in zip(inputs, parts):
        x = np.asarray(x)
        if req:
            x = np.clip(requantize_exact(x, mult, shift), Q16MIN, Q16MAX)
        pieces.append(x.astype(np.int16))
    return np.concatenate(pieces, axis=axis)


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


# ---- ops ------------------------------------------------------------------------------------------------------
@register("MulS16", traits=Traits(fuses_activation=True, kernels=("tinyaot_elementwise_mul_s16",)))
class MulS16(OpSpec):
    """Mul of two int16 tensors (numpy broadcasting; a constant operand is stored as int16)."""

    internal = True
    alias_output_to_input = True  # element k of a full-shape input is read before output k is written

    def infer_shapes(self, node, graph):
        a, b = (graph.tensors[i].shape for i in node.inputs[:2])
        return [tuple(np.broadcast_shapes(tuple(a), tuple(b)))]

    def quantize(self, node, graph, ranges):
        where = f"Mul node {node.name!r}"
        if len(node.inputs) != 2 or all(graph.tensors[i].is_const for i in node.inputs):
            raise TinyaotError(f"{where}: needs two inputs, at least one an activation")
        for k, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.is_const:
                real = np.asarray(t.data, np.float64)
                if real.size == 0 or not np.all(np.isfinite(real)):
                    raise TinyaotError(f"{where}: constant operand {name!r} is empty or not finite")
                qp = activation_qparams16(float(real.min()), float(real.max()))
                node.inputs[k] = set_const(graph, f"{node.name}_operand{k}",
                                           np.clip(np.rint(real / qp.s), Q16MIN, Q16MAX).astype(np.int16),
                                           "int16", qp)
            else:
                _require16(graph, node, k)
        a, b = (graph.tensors[i] for i in node.inputs)
        try:
            broadcast_geometry(a.shape, b.shape)
        except TinyaotError as exc:
            raise TinyaotError(f"{where}: {exc}") from None
        qo = _out16(node, graph, ranges)
        mult, shift = _exact(np.float64(a.quant.s) * np.float64(b.quant.s) / np.float64(qo.s), where)
        node.attrs.update(mult=mult, shift=shift)

    def reference(self, node, graph, inputs):
        a = node.attrs
        out = elementwise_mul_s16(inputs[0], inputs[1], mult=a["mult"], shift=a["shift"], act_min=a["act_min"],
                                  act_max=a["act_max"])
        return [out.reshape(graph.tensors[node.outputs[0]].shape)]

    def int_bounds(self, node, graph):
        a = node.attrs
        return [("product of two int16 values", 1 << 30),
                ("product times the Q0.31 multiplier plus rounding", _rescaled(1 << 30, a["mult"], a["shift"]),
                 INT64_MAX)]

    def params_bytes(self, node, graph):
        return int(sum(graph.tensors[i].nbytes for i in node.inputs if graph.tensors[i].is_const)) + 64

    def render(self, node, graph, cname):
        a = node.attrs
        x1, x2 = (graph.tensors[i].shape for i in node.inputs)
        dims, s1, s2 = broadcast_geometry(x1, x2)
        geom = [*dims, *s1, *s2, a["mult"], a["shift"], a["act_min"], a["act_max"]]
        consts = [ConstArray("int32_t", f"{cname}_geom", np.asarray(geom, np.int64))]
        args, j = [], 0
        for k, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.is_const:
                consts.append(ConstArray("int16_t", f"{cname}_operand{k}", t.data))
                args.append(f"{cname}_operand{k}")
            else:
                args.append(ptr("const int16_t *", Buffer("in", j)))
                j += 1
        return KernelCall("tinyaot_elementwise_mul_s16",
                          files=["tinyaot_elementwise_mul_s16.c", "tinyaot_s16_support.h"], consts=consts,
                          template=TEMPLATE, params={"args": args + [f"{cname}_geom", ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        nodes, inits, names = oracle_operands(graph, node, "operand")
        nodes.append(helper.make_node("Mul", names, ["mul_out"]))
        n2, i2, out = activation_nodes(node, "mul_out")
        return OracleLayer(nodes + n2, inits + i2, out)


@register("ConcatS16", traits=Traits(kernels=("tinyaot_concat_s16",)))
class ConcatS16(OpSpec):
    """Concat of int16 tensors along the (physical, after to_nhwc) axis; constants are stored at the output's
    scale."""

    internal = True

    def _axis(self, node, graph) -> int:
        return int(node.attrs["axis"]) % len(graph.tensors[node.inputs[0]].shape)

    def infer_shapes(self, node, graph):
        shapes = [tuple(graph.tensors[i].shape) for i in node.inputs]
        axis = self._axis(node, graph)
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tuple(out)]

    def quantize(self, node, graph, ranges):
        where = f"Concat node {node.name!r}"
        if node.attrs.get("activation") is not None:
            raise TinyaotError(f"{where}: a fused activation is not supported")
        qo = _out16(node, graph, ranges)
        parts = []
        for k, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.is_const:
                real = np.asarray(t.data, np.float64)
                node.inputs[k] = set_const(graph, f"{node.name}_input{k}",
                                           np.clip(np.rint(real / qo.s), Q16MIN, Q16MAX).astype(np.int16), "int16",
                                           qo)
                parts.append((0, 0, 1))
                continue
            _require16(graph, node, k)
            if np.float32(t.quant.s) == np.float32(qo.s):
                parts.append((0, 0, 1))
            else:
                parts.append((1, *_exact(np.float64(t.quant.s) / np.float64(qo.s), where)))
        node.attrs["parts"] = parts

    def reference(self, node, graph, inputs):
        return [concat_s16(inputs, node.attrs["parts"], axis=self._axis(node, graph))]

    def int_bounds(self, node, graph):
        worst = max([_rescaled(32768, m, t) for req, m, t in node.attrs["parts"] if req] or [0])
        return [("input times the Q0.31 multiplier plus rounding", worst, INT64_MAX)]

    def params_bytes(self, node, graph):
        return int(sum(graph.tensors[i].nbytes for i in node.inputs if graph.tensors[i].is_const))

    def render(self, node, graph, cname):
        axis = self._axis(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        outer = int(np.prod(out[:axis], dtype=np.int64))
        out_inner = int(np.prod(out[axis:], dtype=np.int64))
        calls, consts, pos, j = [], [], 0, 0
        for k, (name, (req, mult, shift)) in enumerate(zip(node.inputs, node.attrs["parts"])):
            t = graph.tensors[name]
            if t.is_const:
                src = f"{cname}_input{k}"
                consts.append(ConstArray("int16_t", src, t.data))
            else:
                src = ptr("const int16_t *", Buffer("in", j))
                j += 1
            in_inner = int(np.prod(t.shape[axis:], dtype=np.int64))
            calls.append([src, str(outer), str(in_inner), str(out_inner), str(pos), str(req), str(mult), str(shift),
                          ptr("int16_t *", OUT0)])
            pos += in_inner
        return KernelCall("tinyaot_concat_s16", files=["tinyaot_concat_s16.c", "tinyaot_s16_support.h"],
                          consts=consts, template="layers/concat_s16.c.j2", params={"calls": calls})

    def oracle(self, node, graph):
        nodes, inits, names = oracle_operands(graph, node, "input")
        nodes.append(helper.make_node("Concat", names, ["concat_out"], axis=self._axis(node, graph)))
        return OracleLayer(nodes, inits, "concat_out")


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
        x = _require16(graph, node)
        qo = graph.tensors[node.outputs[0]]
        if qo.name not in ranges:
            raise TinyaotError(f"calibration produced no range for tensor {qo.name!r}")
        qo.quant = activation_qparams16(*ranges[qo.name])
        lo, hi = activation_clamp16(qo.quant, node.attrs.get("activation"))
        a_coef, b_coef = hard_params(*self._ab(node), x.quant.s, where)
        s_in, s_out = np.float64(x.quant.s), np.float64(qo.quant.s)
        real = s_in / (s_out * 2.0 ** SWISH_DROP) if self.swish else 1.0 / (s_out * 2.0 ** GATE_BITS)
        mult, shift = _exact(real, where)
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
                      _rescaled(1 << 30, a["mult"], a["shift"]), INT64_MAX))
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


@register("HardSigmoidS16", traits=Traits(kernels=("tinyaot_hard_sigmoid_s16",)))
class HardSigmoidS16(_HardS16):
    """HardSigmoid max(0, min(1, alpha * x + beta)) at 16 bits (ONNX defaults alpha 0.2, beta 0.5)."""

    kernel = "tinyaot_hard_sigmoid_s16"


@register("HardSwishS16", traits=Traits(kernels=("tinyaot_hard_swish_s16",)))
class HardSwishS16(_HardS16):
    """HardSwish x * max(0, min(1, x / 6 + 1/2)) at 16 bits."""

    kernel = "tinyaot_hard_swish_s16"
    swish = True

    def _ab(self, node):
        return 1.0 / 6.0, 0.5

