"""Reshape: in the NHWC IR a Reshape is always an alias, the same bytes under another shape (the `to_nhwc` pass
turns every data movement that moves bytes into a Transpose). It costs no code and no memory."""
from __future__ import annotations

import numpy as np

from .common import batch_reshape
from .registry import FloatUnsupported, KernelCall, OpSpec, register, RowWindow, Traits


@register("Reshape", traits=Traits(layout="move", alias=True, reshape=True))
class Reshape(OpSpec):
    def infer_shapes(self, node, graph):
        out = graph.tensors[node.outputs[0]].shape
        if graph.layout == "NHWC" and graph.tensors[node.inputs[0]].size != int(np.prod(out, dtype=np.int64)):
            return [("size", "mismatch")]
        return None

    def is_alias(self, node, graph):
        return self.traits.alias

    def row_window(self, node, graph):
        # a reshape to its own NHWC shape (an exporter's no-op) keeps every row where it was; a one-channel NCHW
        # tensor seen as NHWC (the to_nhwc pass's alias) has its rows along axis 2, the same bytes
        shape = graph.tensors[node.inputs[0]].shape
        out = graph.tensors[node.outputs[0]].shape
        if len(shape) == 4 and out == shape:
            return RowWindow()
        if len(shape) == 4 and shape[1] == 1 and out == (shape[0], shape[2], shape[3], 1):
            return RowWindow(axis=2)
        return None

    def quantize(self, node, graph, ranges):
        # An alias keeps the parameters of the bytes it aliases.
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        return [batch_reshape(inputs[0], graph.tensors[node.outputs[0]].shape)]

    def batches_reference(self, node, graph):
        return True  # (SampleRunner batches only where input and output are one sample: the values keep their order)

    def render(self, node, graph, cname):
        return KernelCall("")  # never emitted: a reshape is an alias

    def evaluate_float(self, node, graph, inputs):
        if graph.tensors[node.inputs[0]].shape[0] != 1:
            return super().evaluate_float(node, graph, inputs)
        out = graph.tensors[node.outputs[0]].shape
        if out[0] != 1:
            raise FloatUnsupported(f"Reshape node {node.name!r} moves the batch axis")
        return [inputs[0].reshape((len(inputs[0]), *out[1:]))]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        self.evaluate_float(node, graph, inputs)  # the same conditions
        return [grad_out[0].reshape(inputs[0].shape)] + [None] * (len(inputs) - 1), {}

    def channel_ties(self, node, graph, t, channels):
        """A reshape that keeps the last axis, or the flatten of [N, H, W, C] into [N, H*W*C] (channels stay
        innermost): channel c stays channel c of every position."""
        if t not in (node.inputs[0], node.outputs[0]):
            return None
        x, out = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
        keeps_last = out[-1] == x[-1] and len(x) >= 2
        flatten = x[-1] == channels and len(x) == 4 and len(out) == 2 and out[0] == x[0]
        return [node.inputs[0], node.outputs[0]] if keeps_last or flatten else None
