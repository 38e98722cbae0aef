"""Pad, mode "constant": bit-exact numpy int8 reference and its parameters.

The output keeps the input's quantization parameters (TFLite's PAD restriction), so the values are copied unchanged
and the constant is quantized once to the input's grid, the way onnxruntime's QuantizeLinear would quantize the
float constant the QDQ layer pads with (round half to even, saturated): the oracle then agrees exactly. Modes
"reflect", "edge" and "wrap" are refused with an error naming the mode.

The `to_nhwc` pass reads the ONNX pads (an input since opset 11, an attribute before; opset 18's `axes` input
too), permutes them into the physical layout and leaves them in `attrs["pads"]` ([begin per axis..., end per
axis...]) with the float constant in `attrs["value"]`; the node then has one input.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import NHWC, new_float32_const, new_int64_const
from tinyaot.ops.registry import KernelCall, OpSpec, OracleLayer, register, traits_of, Traits


def pad_s8(input: np.ndarray, pre, post, pad_value: int) -> np.ndarray:
    """int8 constant padding: pre[i] / post[i] elements of pad_value before / after axis i."""
    x = np.asarray(input)
    return np.pad(x, list(zip((int(p) for p in pre), (int(p) for p in post))), mode="constant",
                  constant_values=np.int8(pad_value)).astype(np.int8)


def onnx_pad_spec(node, graph, rank: int) -> tuple[list[int], list[int], float]:
    """(begins, ends, constant) of an ONNX Pad node, over the logical axes of its rank-`rank` input."""
    mode = node.attrs.get("mode", "constant")
    if mode != "constant":
        raise TinyaotError(f"Pad node {node.name!r}: mode {mode!r} is not supported (only 'constant' padding)")

    def const_input(k: int, what: str):
        name = node.inputs[k] if len(node.inputs) > k else ""
        if not name:
            return None
        t = graph.tensors[name]
        if not t.is_const:
            raise TinyaotError(f"Pad node {node.name!r}: {what} must be a constant")
        return np.asarray(t.data)

    pads = const_input(1, "pads")
    pads = np.asarray(node.attrs.get("pads", [0] * 2 * rank) if pads is None else pads, np.int64).ravel()
    value = const_input(2, "the constant value")
    value = float(node.attrs.get("value", 0.0) if value is None else np.asarray(value, np.float64).ravel()[0])
    axes = const_input(3, "axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in np.asarray(axes).ravel()]
    if pads.size != 2 * len(axes):
        raise TinyaotError(f"Pad node {node.name!r}: {pads.size} pads for {len(axes)} axes")
    begins, ends = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begins[a], ends[a] = int(pads[k]), int(pads[k + len(axes)])
    if min(begins + ends) < 0:
        raise TinyaotError(f"Pad node {node.name!r}: negative pads (cropping) are not supported")
    if not np.isfinite(value):
        raise TinyaotError(f"Pad node {node.name!r}: the constant value {value} is not finite")
    return begins, ends, value


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Pad", traits=Traits(layer_1d=True, kernels=("tinyaot_pad_s8",)))
class Pad(OpSpec):
    def _pads(self, node, graph):
        rank = len(graph.tensors[node.inputs[0]].shape)
        p = [int(v) for v in node.attrs["pads"]]
        return p[:rank], p[rank:]

    def layout(self, node, ctx):
        """Its input's layout, or NHWC when a conv or pool reads it (convert the smaller, unpadded tensor, if
        anything); the pads follow the permutation (physical axis j is logical axis perm[j])."""
        x = node.inputs[0]
        perm = ctx.perm[x]
        if len(perm) == 4 and any(traits_of(r.op).layout == "spatial" for r in ctx.readers(node.outputs[0])):
            perm = NHWC
        begins, ends, value = onnx_pad_spec(node, ctx.graph, len(perm))
        node.inputs = [ctx.ensure(x, perm, node)]
        node.attrs = {"pads": [begins[p] for p in perm] + [ends[p] for p in perm], "value": value}
        out = node.outputs[0]
        ctx.set_out(out, ctx.graph.tensors[out].shape, perm)
        ctx.emit(node)
        return True

    def lift_1d(self, node, graph):
        begins, ends, value = onnx_pad_spec(node, graph, 3)
        node.inputs = [node.inputs[0], new_int64_const(graph, f"{node.name}_pads_2d", begins[:2] + [0] + begins[2:]
                                                       + ends[:2] + [0] + ends[2:]),
                       new_float32_const(graph, f"{node.name}_value", value)]
        node.attrs.pop("pads", None)
        node.attrs.pop("value", None)

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        x = graph.tensors[node.inputs[0]].shape
        pre, post = self._pads(node, graph)
        return [tuple(d + a + b for d, a, b in zip(x, pre, post))]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        rank = len(x.shape)
        pre, post = self._pads(node, graph)
        kept = [j for j in range(rank) if not (x.shape[j] == 1 and pre[j] == 0 and post[j] == 0)]
        if len(kept) > 4:
            raise TinyaotError(f"Pad node {node.name!r}: rank {rank} with more than 4 non-unit axes is not supported")
        graph.tensors[node.outputs[0]].quant = x.quant
        # float32 constant over float32 scale, rounded half to even: QuantizeLinear's own arithmetic
        q = np.rint(np.float32(node.attrs["value"]) / np.float32(x.quant.s)) + x.quant.zp
        node.attrs["pad_value"] = int(np.clip(q, -128, 127))

    def reference(self, node, graph, inputs):
        pre, post = self._pads(node, graph)
        return [pad_s8(inputs[0], pre, post, node.attrs["pad_value"])]

    def _rank4(self, node, graph):
        """Dims and pads in rank 4: unit axes without padding dropped, leading unit axes added."""
        x = graph.tensors[node.inputs[0]].shape
        pre, post = self._pads(node, graph)
        keep = [j for j in range(len(x)) if not (x[j] == 1 and pre[j] == 0 and post[j] == 0)]
        pad = 4 - len(keep)
        return ([1] * pad + [x[j] for j in keep], [0] * pad + [pre[j] for j in keep],
                [0] * pad + [post[j] for j in keep])

    def render(self, node, graph, cname):
        dims, pre, post = self._rank4(node, graph)
        return KernelCall("tinyaot_pad_s8", files=["tinyaot_pad_s8.c"], template="layers/pad.c.j2",
                          params={"in_dims": dims, "pre": pre, "post": post, "pad_value": node.attrs["pad_value"]})

    def oracle(self, node, graph):
        pre, post = self._pads(node, graph)
        pads = numpy_helper.from_array(np.asarray(pre + post, np.int64), node.name + "_pads")
        value = numpy_helper.from_array(np.asarray(node.attrs["value"], np.float32), node.name + "_value")
        return OracleLayer([helper.make_node("Pad", [node.inputs[0], pads.name, value.name], ["pad_out"],
                                             mode="constant")], [pads, value], "pad_out")
