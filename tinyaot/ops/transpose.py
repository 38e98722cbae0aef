"""Transpose. In the NHWC IR most transposes vanish (the `to_nhwc` pass makes NHWC<->NCHW conversions of
single-channel or 1x1 data aliases); the rest become a physical int8 copy with ONNX's `perm` semantics:
output axis i is input axis perm[i]. Quantization parameters pass through unchanged."""
from __future__ import annotations

import numpy as np
from onnx import helper

from .registry import KernelCall, OracleLayer, OpSpec, register


@register("Transpose")
class Transpose(OpSpec):
    def _perm(self, node, graph):
        rank = len(graph.tensors[node.inputs[0]].shape)
        return list(node.attrs.get("perm") or reversed(range(rank)))

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        x = graph.tensors[node.inputs[0]].shape
        return [tuple(x[p] for p in self._perm(node, graph))]

    def quantize(self, node, graph, ranges):
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        return [np.ascontiguousarray(inputs[0].transpose(self._perm(node, graph)))]

    def render(self, node, graph, cname):
        x = list(graph.tensors[node.inputs[0]].shape)
        perm = self._perm(node, graph)
        # Pad to rank 4 with leading unit axes so one kernel serves every rank up to 4.
        pad = 4 - len(x)
        x4 = [1] * pad + x
        p4 = list(range(pad)) + [p + pad for p in perm]
        code = (f"static const int32_t in_dims[4] = {{{', '.join(map(str, x4))}}};\n"
                f"static const int32_t perm[4] = {{{', '.join(map(str, p4))}}};\n"
                f"tinyaot_transpose_s8({{in0}}, {{out0}}, in_dims, perm);")
        return KernelCall("tinyaot_transpose_s8", code, ["tinyaot_transpose_s8.c"], [])

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Transpose", [node.inputs[0]], ["t_out"], perm=self._perm(node, graph))],
                           [], "t_out")
