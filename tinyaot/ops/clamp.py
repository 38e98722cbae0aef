"""Relu and Clip. Usually fused into their producer's activation clamp by `fuse_activation`; a standalone one
(its producer has other readers, or cannot clamp) keeps its input's parameters and clamps at the quantized
bounds, which is exact: quantization is monotonic, so clamp(q(x)) == q(clamp(x)) on the int8 grid."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.compress.quantize import activation_clamp
from tinyaot.passes.fuse_activation import activation_range
from tinyaot.errors import TinyaotError

from .common import activation_nodes
from .registry import KernelCall, OracleLayer, OpSpec, register


class _Clamp(OpSpec):
    alias_output_to_input = True

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        rng = activation_range(graph, node)
        if rng is None:
            raise TinyaotError(f"{node.op} node {node.name!r}: min and max must be constants")
        node.attrs["activation"] = rng
        q = graph.tensors[node.inputs[0]].quant
        graph.tensors[node.outputs[0]].quant = q
        node.attrs["act_min"], node.attrs["act_max"] = activation_clamp(q, rng)

    def reference(self, node, graph, inputs):
        return [np.clip(inputs[0], node.attrs["act_min"], node.attrs["act_max"]).astype(np.int8)]

    def render(self, node, graph, cname):
        n = graph.tensors[node.inputs[0]].size
        code = f"tinyaot_clamp_s8({{in0}}, {{out0}}, {n}, {node.attrs['act_min']}, {node.attrs['act_max']});"
        return KernelCall("tinyaot_clamp_s8", code, ["tinyaot_clamp_s8.c"], [])

    def oracle(self, node, graph):
        nodes, inits, out = activation_nodes(node, node.inputs[0])
        return OracleLayer(nodes, inits, out)


@register("Relu")
class Relu(_Clamp):
    pass


@register("Clip")
class Clip(_Clamp):
    pass


__all__ = ["Relu", "Clip", "helper"]
