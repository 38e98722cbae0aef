"""Relu and Clip (ReLU6 and friends) fuse into the op that produces their input, as an activation range.

Every int8 kernel ends with a clamp to [act_min, act_max]; a fused ReLU is that clamp, so it costs nothing.
The fused op writes the activation's output tensor (whose calibrated range is the post-ReLU one).
Assumes the producer's output is read by the activation only.
"""
import numpy as np

from tinyaot.ir import Graph

from ._util import replace_uses, single_consumer

FUSABLE = ("Conv", "FullyConnected", "Add", "Sub", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
           "ConvTranspose", "ReduceMean")


def activation_range(graph: Graph, node) -> tuple[float, float] | None:
    """(lo, hi) of a Relu/Clip node, or None if its bounds are not constants."""
    if node.op == "Relu":
        return (0.0, float("inf"))
    if node.op == "Clip":
        lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)  # opset < 11 attributes
        for k, default in ((1, lo), (2, hi)):
            name = node.inputs[k] if len(node.inputs) > k else ""
            if name:
                if not graph.tensors[name].is_const:
                    return None
                if k == 1:
                    lo = float(graph.tensors[name].data)
                else:
                    hi = float(graph.tensors[name].data)
        return (float(lo), float(hi))
    return None


def fuse_activation(graph: Graph) -> Graph:
    for act in [n for n in graph.nodes if n.op in ("Relu", "Clip")]:
        prod = graph.producer(act.inputs[0])
        rng = activation_range(graph, act)
        if prod is None or prod.op not in FUSABLE or rng is None or single_consumer(graph, act.inputs[0]) is not act:
            continue
        lo, hi = prod.attrs.get("activation", (-np.inf, np.inf))
        prod.attrs["activation"] = (max(lo, rng[0]), min(hi, rng[1]))
        graph.nodes.remove(act)
        # The fused op now writes the activation's output, keeping its (post-activation) calibration range.
        out = act.outputs[0]
        old = prod.outputs[0]
        graph.tensors[out].shape = graph.tensors[old].shape
        prod.outputs[0] = out
        replace_uses(graph, old, out)
    graph.remove_unused_tensors()
    return graph
