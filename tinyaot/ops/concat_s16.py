"""Concat at 16 bits: an input with the output's scale is copied; any other is rescaled, x * s_in / s_out
(|x| <= 2**15).

Like every 16-bit elementwise layer it ends in one requantization of an exact integer (core/quant16.py
`requantize_exact`: the full Q0.31 multiplier, one rounding half toward +infinity, in int64), so the only
difference to onnxruntime's float QDQ is its float32 arithmetic near a rounding tie: one LSB at most.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.quant16 import Q16MAX, Q16MIN, requantize_exact
from tinyaot.ops.common import oracle_operands, set_const
from tinyaot.ops.registry import OUT0, BufferRef, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import INT64_MAX, exact16, out16, ptr, require16, rescaled_bound


def concat_s16(inputs, parts, *, axis) -> np.ndarray:
    """int16 concat; parts[k] = (requantize, mult, shift) for input k (no rescale when requantize is 0)."""
    pieces = []
    for x, (req, mult, shift) in zip(inputs, parts):
        x = np.asarray(x)
        if req:
            x = np.clip(requantize_exact(x, mult, shift), Q16MIN, Q16MAX)
        pieces.append(x.astype(np.int16))
    return np.concatenate(pieces, axis=axis)


@register("ConcatS16", traits=Traits(int16_form_of=("Concat",), kernels=("tinyaot_concat_s16",)))
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
        qo = out16(node, graph, ranges)
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
            require16(graph, node, k)
            if np.float32(t.quant.s) == np.float32(qo.s):
                parts.append((0, 0, 1))
            else:
                parts.append((1, *exact16(np.float64(t.quant.s) / np.float64(qo.s), where)))
        node.attrs["parts"] = parts

    def reference(self, node, graph, inputs):
        return [concat_s16(inputs, node.attrs["parts"], axis=self._axis(node, graph))]

    def int_bounds(self, node, graph):
        worst = max([rescaled_bound(32768, m, t) for req, m, t in node.attrs["parts"] if req] or [0])
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
                src = ptr("const int16_t *", BufferRef("in", j))
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
