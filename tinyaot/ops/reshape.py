"""Reshape: in the NHWC IR a Reshape is always an alias, the same bytes under another shape (the `to_nhwc` pass
turns every data movement that moves bytes into a Transpose). It costs no code and no memory."""
from __future__ import annotations

import numpy as np

from .registry import KernelCall, OpSpec, register, Traits


@register("Reshape", traits=Traits(layout="move"))
class Reshape(OpSpec):
    def infer_shapes(self, node, graph):
        out = graph.tensors[node.outputs[0]].shape
        if graph.layout == "NHWC" and graph.tensors[node.inputs[0]].size != int(np.prod(out, dtype=np.int64)):
            return [("size", "mismatch")]
        return None

    def is_alias(self, node, graph):
        return True

    def quantize(self, node, graph, ranges):
        # An alias keeps the parameters of the bytes it aliases.
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        return [inputs[0].reshape(graph.tensors[node.outputs[0]].shape)]

    def render(self, node, graph, cname):
        return KernelCall("")  # never emitted: a reshape is an alias
