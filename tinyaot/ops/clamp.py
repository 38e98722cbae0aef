"""Relu and Clip. Usually fused into their producer's activation clamp by `fuse_activation`; a standalone one
(its producer has other readers, or cannot clamp) keeps its input's parameters and clamps at the quantized
bounds, which is exact: quantization is monotonic, so clamp(q(x)) == q(clamp(x)) on the int8 grid."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.quant import activation_clamp

from .common import activation_nodes
from .registry import get_op, IN0, is_registered, KernelCall, OpSpec, OracleLayer, OUT0, register, Traits


def activation_range(graph, node) -> tuple[float, float] | None:
    """(lo, hi) of an activation node that is a clamp (Relu, Clip), or None: another op, or bounds that are not
    constants. fuse_activation folds such a node into its producer's clamp."""
    return get_op(node.op).activation_range(node, graph) if is_registered(node.op) else None


class _Clamp(OpSpec):
    alias_output_to_input = True

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        rng = self.activation_range(node, graph)
        if rng is None:
            raise TinyaotError(f"{node.op} node {node.name!r}: min and max must be constants")
        node.attrs["activation"] = rng
        q = graph.tensors[node.inputs[0]].quant
        graph.tensors[node.outputs[0]].quant = q
        node.attrs["act_min"], node.attrs["act_max"] = activation_clamp(q, rng)

    def reference(self, node, graph, inputs):
        return [np.clip(inputs[0], node.attrs["act_min"], node.attrs["act_max"]).astype(np.int8)]

    def batches_reference(self, node, graph):
        return True  # element by element

    def render(self, node, graph, cname):
        n = graph.tensors[node.inputs[0]].size
        return KernelCall("tinyaot_clamp_s8", [IN0, OUT0, n, node.attrs["act_min"], node.attrs["act_max"]],
                          ["tinyaot_clamp_s8.c"])

    def evaluate_float(self, node, graph, inputs):
        rng = self.activation_range(node, graph)
        if rng is None:
            return super().evaluate_float(node, graph, inputs)
        return [np.clip(inputs[0], *rng)]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        rng = self.activation_range(node, graph)
        if rng is None:
            return super().backward_float(node, graph, inputs, outputs, grad_out)
        x = inputs[0]
        return [np.where((x > rng[0]) & (x < rng[1]), grad_out[0], 0.0)] + [None] * (len(inputs) - 1), {}

    def removed_channel_value(self, node, graph, values, gone):
        rng = self.activation_range(node, graph)
        return values[0] if rng is None else np.clip(values[0], *rng)

    def oracle(self, node, graph):
        nodes, inits, out = activation_nodes(node, node.inputs[0])
        return OracleLayer(nodes, inits, out)


# A clamp keeps channel c in channel c (a pruned, all-zero channel stays zero only if 0 is inside the clamp,
# which compress/prune.py checks with activation_range).
_TRAITS = Traits(layout="elementwise", per_channel=True, kernels=("tinyaot_clamp_s8",))


@register("Relu", traits=_TRAITS)
class Relu(_Clamp):
    def activation_range(self, node, graph):
        return (0.0, float("inf"))


@register("Clip", traits=_TRAITS)
class Clip(_Clamp):
    def activation_range(self, node, graph):
        lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)  # opset < 11 attributes
        for k in (1, 2):
            name = node.inputs[k] if len(node.inputs) > k else ""
            if name:
                if not graph.tensors[name].is_const:
                    return None
                if k == 1:
                    lo = float(graph.tensors[name].data)
                else:
                    hi = float(graph.tensors[name].data)
        return (float(lo), float(hi))


__all__ = ["Relu", "Clip", "activation_range", "helper"]
