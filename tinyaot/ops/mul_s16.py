"""Mul at 16 bits: TFLite's int16 MUL product a * b, exact in int32 (|a * b| <= 2**30), rescaled by
s1 * s2 / s_out with one rounding (TFLite rounds it twice in 32 bits). Numpy broadcasting over up to 4 merged axes
(broadcast.py's stride walk: the squeeze-and-excitation x[1, H, W, C] * gate[1, 1, 1, C]); a constant operand is
stored int16 on its own symmetric scale.

Like every 16-bit elementwise layer it ends in one requantization of an exact integer (core/quant16.py
`requantize_exact`: the full Q0.31 multiplier, one rounding half toward +infinity, in int64), so the only
difference to onnxruntime's float QDQ is its float32 arithmetic near a rounding tie: one LSB at most.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.quant16 import Q16MAX, Q16MIN, activation_qparams16, requantize_exact
from tinyaot.ops.broadcast import broadcast_geometry
from tinyaot.ops.common import activation_nodes, oracle_operands, set_const
from tinyaot.ops.registry import OUT0, BufferRef, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import INT64_MAX, TEMPLATE, exact16, out16, ptr, require16, rescaled_bound


def elementwise_mul_s16(a, b, *, mult, shift, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 * int16 -> int16 with numpy broadcasting: the exact product rescaled by mult / 2**shift."""
    prod = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    return np.clip(requantize_exact(prod, mult, shift), int(act_min), int(act_max)).astype(np.int16)


@register("MulS16", traits=Traits(fuses_activation=True, int16_form_of=("Mul",),
                                  kernels=("tinyaot_elementwise_mul_s16",)))
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
                require16(graph, node, k)
        a, b = (graph.tensors[i] for i in node.inputs)
        try:
            broadcast_geometry(a.shape, b.shape)
        except TinyaotError as exc:
            raise TinyaotError(f"{where}: {exc}") from None
        qo = out16(node, graph, ranges)
        mult, shift = exact16(np.float64(a.quant.s) * np.float64(b.quant.s) / np.float64(qo.s), where)
        node.attrs.update(mult=mult, shift=shift)

    def reference(self, node, graph, inputs):
        a = node.attrs
        out = elementwise_mul_s16(inputs[0], inputs[1], mult=a["mult"], shift=a["shift"], act_min=a["act_min"],
                                  act_max=a["act_max"])
        return [out.reshape(graph.tensors[node.outputs[0]].shape)]

    def int_bounds(self, node, graph):
        a = node.attrs
        return [("product of two int16 values", 1 << 30),
                ("product times the Q0.31 multiplier plus rounding", rescaled_bound(1 << 30, a["mult"], a["shift"]),
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
                args.append(ptr("const int16_t *", BufferRef("in", j)))
                j += 1
        return KernelCall("tinyaot_elementwise_mul_s16",
                          files=["tinyaot_elementwise_mul_s16.c", "tinyaot_s16_support.h"], consts=consts,
                          template=TEMPLATE, params={"args": args + [f"{cname}_geom", ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        nodes, inits, names = oracle_operands(graph, node, "operand")
        nodes.append(helper.make_node("Mul", names, ["mul_out"]))
        n2, i2, out = activation_nodes(node, "mul_out")
        return OracleLayer(nodes + n2, inits + i2, out)
