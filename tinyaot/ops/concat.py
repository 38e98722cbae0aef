"""Concat along any axis: bit-exact numpy int8 reference and its parameters.

The output's parameters come from calibration of the concat output. An input with exactly those parameters is
copied; any other is requantized on the way, output = zp_out + (x - zp_in) * s_in / s_out with one TFLite
fixed-point multiplier applied to (x - zp_in) shifted left by up to 23 bits first (fixedpoint.multiplier_with_headroom:
the product keeps fractional bits, so the result is rounded once, not twice; onnxruntime's float rescale rounds half
to even, so only a near-tie can differ by one step). |x - zp_in| << 23 < 2**31, so nothing overflows. A constant
input is quantized straight to the output's parameters and copied from flash.

The kernel sees every tensor as [outer][inner] rows (outer = the axes before the concat axis, inner = the concat axis
times the axes after it) and is called once per input. In NHWC a channel concat has outer = N*H*W: each input's
channels are interleaved with the others' in every pixel, so an input cannot be computed directly into the output
buffer; in-place planning would only help concats with outer == 1 and is not done (every input is copied).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.quant import quantize_values
from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import oracle_operands, out_params, set_const
from tinyaot.core.fixedpoint import multiplier_with_headroom, requantize_to_int8
from tinyaot.core.quant import INT32_MAX
from tinyaot.ops.intbounds import epilogue, offset_input_max
from tinyaot.ops.registry import BufferRef, ConstArray, KernelCall, OpSpec, OracleLayer, register, Traits


def concat_requant_params(s_in: float, zp_in: int, s_out: float, zp_out: int) -> dict:
    """How one input reaches the output's grid: a copy when the parameters are equal, else a rescale."""
    if np.float32(s_in) == np.float32(s_out) and int(zp_in) == int(zp_out):
        return {"requantize": 0, "input_offset": 0, "left_shift": 0, "mult": 0, "shift": 0}
    mult, shift, left = multiplier_with_headroom(float(s_in) / float(s_out))
    return {"requantize": 1, "input_offset": -int(zp_in), "left_shift": left, "mult": mult, "shift": shift}


def concat_s8(inputs: list[np.ndarray], parts: list[dict], *, axis: int, output_offset: int) -> np.ndarray:
    """int8 concat; parts[k] (from concat_requant_params) says how input k is brought to the output's grid."""
    pieces = []
    for x, p in zip(inputs, parts):
        x = np.asarray(x)
        if p["requantize"]:
            v = (x.astype(np.int64) + p["input_offset"]) << p["left_shift"]
            x = requantize_to_int8(v, p["mult"], p["shift"], output_offset, -128, 127)
        pieces.append(x.astype(np.int8))
    return np.concatenate(pieces, axis=axis)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Concat", traits=Traits(quantized_constants=True, kernels=("tinyaot_concat_s8",)))
class Concat(OpSpec):
    """ONNX Concat; after `to_nhwc` the axis attribute is the physical axis."""

    def _axis(self, node, graph) -> int:
        rank = len(graph.tensors[node.inputs[0]].shape)
        return int(node.attrs["axis"]) % rank

    def layout(self, node, ctx):
        """Every input in the layout of the largest one (not copied), constants too; the axis made physical."""
        data = [i for i in node.inputs if i and not ctx.graph.tensors[i].is_const]
        perm = ctx.perm[max(data, key=lambda i: ctx.graph.tensors[i].size)]
        axis = int(node.attrs["axis"]) % len(perm)
        for k, i in enumerate(node.inputs):
            if ctx.graph.tensors[i].is_const:
                node.inputs[k] = ctx.const_operand(i, perm)
            elif len(ctx.logical[i]) != len(perm):
                raise TinyaotError(f"Concat node {node.name!r}: inputs of different ranks")
            else:
                node.inputs[k] = ctx.ensure(i, perm, node)
        node.attrs["axis"] = perm.index(axis)  # the ONNX axis, as a physical one
        out = node.outputs[0]
        ctx.set_out(out, ctx.graph.tensors[out].shape, perm)
        ctx.emit(node)
        return True

    def lifts_with_1d(self, node, graph):
        """A concatenation of activations over channels (ONNX axis 1 of [N, C, L]) lifts with them."""
        return (all(i and not graph.tensors[i].is_const for i in node.inputs)
                and int(node.attrs.get("axis", 0)) % 3 == 1)

    def lift_1d(self, node, graph):
        node.attrs["axis"] = 1

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        shapes = [tuple(graph.tensors[i].shape) for i in node.inputs]
        axis = self._axis(node, graph)
        for s in shapes[1:]:
            if len(s) != len(shapes[0]) or any(s[j] != shapes[0][j] for j in range(len(s)) if j != axis):
                return [("inputs", "disagree")]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tuple(out)]

    def quantize(self, node, graph, ranges):
        qo, _, _ = out_params(node, graph, ranges)
        if node.attrs.get("activation") is not None:
            raise TinyaotError(f"Concat node {node.name!r}: a fused activation is not supported")
        parts = []
        for k, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.is_const:
                real = t.quant.dequantize(t.data) if t.quant is not None else np.asarray(t.data, np.float64)
                node.inputs[k] = set_const(graph, f"{node.name}_input{k}", quantize_values(real, qo), "int8", qo)
                parts.append(concat_requant_params(qo.s, qo.zp, qo.s, qo.zp))
            else:
                parts.append(concat_requant_params(t.quant.s, t.quant.zp, qo.s, qo.zp))
        node.attrs["parts"] = parts
        node.attrs["output_offset"] = qo.zp

    def reference(self, node, graph, inputs):
        return [concat_s8(inputs, node.attrs["parts"], axis=self._axis(node, graph),
                          output_offset=node.attrs["output_offset"])]

    def int_bounds(self, node, graph):
        """Each requantized input: (x + io) << left_shift, then the epilogue."""
        items = []
        for k, p in enumerate(node.attrs["parts"]):
            if not p["requantize"]:
                continue
            v = offset_input_max(p["input_offset"]) << int(p["left_shift"])
            items.append((f"input {k} shifted left by {p['left_shift']}", v))
            if v <= INT32_MAX:
                epilogue(items, [v], p["mult"], p["shift"], node.attrs["output_offset"])
        return items

    def render(self, node, graph, cname):
        axis = self._axis(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        outer = int(np.prod(out[:axis], dtype=np.int64))
        out_inner = int(np.prod(out[axis:], dtype=np.int64))
        parts, consts, pos, j = [], [], 0, 0
        for k, (name, p) in enumerate(zip(node.inputs, node.attrs["parts"])):
            t = graph.tensors[name]
            if t.is_const:
                src = f"{cname}_input{k}"
                consts.append(ConstArray("int8_t", src, t.data))
            else:
                src = BufferRef("in", j)
                j += 1
            in_inner = int(np.prod(t.shape[axis:], dtype=np.int64))
            parts.append({"src": src, "in_inner": in_inner, "pos": pos, "requantize": p["requantize"],
                          "input_offset": p["input_offset"], "left_shift": p["left_shift"], "mult": p["mult"],
                          "shift": p["shift"]})
            pos += in_inner
        return KernelCall("tinyaot_concat_s8", files=["tinyaot_concat_s8.c"], consts=consts,
                          template="layers/concat.c.j2",
                          params={"parts": parts, "outer": outer, "out_inner": out_inner,
                                  "output_offset": node.attrs["output_offset"]})

    def params_bytes(self, node, graph):
        return int(sum(graph.tensors[i].nbytes for i in node.inputs if graph.tensors[i].is_const))

    def oracle(self, node, graph):
        nodes, inits, names = oracle_operands(graph, node, "input")
        nodes.append(helper.make_node("Concat", names, ["concat_out"], axis=self._axis(node, graph)))
        return OracleLayer(nodes, inits, "concat_out")
