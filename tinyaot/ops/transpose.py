"""Transpose. In the NHWC IR most transposes vanish (the `to_nhwc` pass makes NHWC<->NCHW conversions of
single-channel or 1x1 data aliases); the rest become a physical int8 copy with ONNX's `perm` semantics:
output axis i is input axis perm[i]. Quantization parameters pass through unchanged."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError

from .registry import KernelCall, OpSpec, OracleLayer, register, RowWindow, Traits


def _canonical(shape, perm) -> tuple[list[int], list[int]]:
    """(shape, perm) with size-1 axes dropped and input axes that stay adjacent and in order in the output merged:
    the same permutation of the bytes on the fewest axes (a 6-D PixelShuffle transpose becomes 4-D)."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    dims = [int(shape[a]) for a in keep]
    perm = [keep.index(p) for p in perm if shape[p] != 1]
    merged = True
    while merged:
        merged = False
        for j in range(len(perm) - 1):
            a = perm[j]
            if perm[j + 1] == a + 1:  # input axes a, a+1 stay neighbours: one axis of size dims[a] * dims[a+1]
                dims[a:a + 2] = [dims[a] * dims[a + 1]]
                perm = [p if p <= a else p - 1 for k, p in enumerate(perm) if k != j + 1]
                merged = True
                break
    return dims, perm


@register("Transpose", traits=Traits(layout="move", kernels=("tinyaot_transpose_s8",)))
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
        shape, perm = _canonical(graph.tensors[node.inputs[0]].shape, self._perm(node, graph))
        if len(shape) > 4:
            raise TinyaotError(f"Transpose node {node.name!r}: permutation {self._perm(node, graph)} of a "
                               f"{len(graph.tensors[node.inputs[0]].shape)}-D tensor moves {len(shape)} separate "
                               "axis groups; the int8 kernel handles at most 4")
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        return [np.ascontiguousarray(inputs[0].transpose(self._perm(node, graph)))]

    def evaluate_float(self, node, graph, inputs):
        if list(node.attrs.get("perm", ()))[:1] != [0]:  # the batch axis must stay first (NCHW -> NHWC does)
            return super().evaluate_float(node, graph, inputs)
        return [np.transpose(inputs[0], node.attrs["perm"])]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        if list(node.attrs.get("perm", ()))[:1] != [0]:
            return super().backward_float(node, graph, inputs, outputs, grad_out)
        return [np.transpose(grad_out[0], np.argsort(node.attrs["perm"]))], {}

    def row_window(self, node, graph):
        # NCHW -> NHWC (an NCHW model's input): output row h is input row h of every channel plane
        if len(graph.tensors[node.inputs[0]].shape) == 4 and self._perm(node, graph) == [0, 2, 3, 1]:
            return RowWindow(axis=2)
        return None

    def render(self, node, graph, cname):
        # The same byte permutation on fewer axes (unit axes dropped, axes that stay neighbours merged), padded to
        # rank 4 with leading unit axes so one kernel serves every rank.
        x, perm = _canonical(graph.tensors[node.inputs[0]].shape, self._perm(node, graph))
        pad = 4 - len(x)
        x4 = [1] * pad + x
        p4 = list(range(pad)) + [p + pad for p in perm]
        return KernelCall("tinyaot_transpose_s8", files=["tinyaot_transpose_s8.c"], template="layers/transpose.c.j2",
                          params={"in_dims": x4, "perm": p4})

    def oracle(self, node, graph):
        return OracleLayer([helper.make_node("Transpose", [node.inputs[0]], ["t_out"], perm=self._perm(node, graph))],
                           [], "t_out")
