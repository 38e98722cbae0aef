"""Relu and Clip (ReLU6 and friends) fuse into the op that produces their input, as an activation range.

Every int8 kernel ends with a clamp to [act_min, act_max]; a fused ReLU is that clamp, so it costs nothing.
The fused op writes the activation's output tensor (whose calibrated range is the post-ReLU one).
Assumes the producer's output is read by the activation only.
"""
import numpy as np

from tinyaot.ir import Graph
from tinyaot.ops.clamp import activation_range
from tinyaot.ops.registry import traits_of

from ._util import replace_uses, single_consumer

__all__ = ["activation_range", "fuse_activation"]  # activation_range lives with the clamp ops (ops/clamp.py)


def fuse_activation(graph: Graph) -> Graph:
    for act in [n for n in graph.nodes if activation_range(graph, n) is not None]:
        prod = graph.producer(act.inputs[0])
        rng = activation_range(graph, act)
        if (prod is None or not traits_of(prod.op).fuses_activation or rng is None
                or single_consumer(graph, act.inputs[0]) is not act):
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
