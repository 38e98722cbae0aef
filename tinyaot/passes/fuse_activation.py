"""Relu and Clip (ReLU6 and friends) fuse into the op that produces their input, as an activation range.

Every int8 kernel ends with a clamp to [act_min, act_max]; a fused ReLU is that clamp, so it costs nothing.
The fused op writes the activation's output tensor (whose calibrated range is the post-ReLU one).
Assumes the producer's output is read by the activation only.

An activation behind a shape-only op (Reshape, Flatten: `traits.reshape`) moves in front of it first, since
Relu(Reshape(x)) == Reshape(Relu(x)) value for value: mean_to_pool writes `x.mean([2, 3])` as GlobalAveragePool and
a flattening Reshape, and the Relu after it must fuse into the pool as it fused into ReduceMean.
"""
import numpy as np

from tinyaot.ir import Graph
from tinyaot.ops.clamp import activation_range
from tinyaot.ops.registry import traits_of

from ._util import replace_uses, single_consumer

__all__ = ["activation_range", "fuse_activation"]  # activation_range lives with the clamp ops (ops/clamp.py)


def _move_before_reshape(graph: Graph, act) -> None:
    """act(reshape(x)) -> reshape(act(x)) when x comes from an op that fuses activations and each tensor on the way
    has one reader. The producer then writes a fresh tensor, which takes the activation output's calibrated range
    across the reshape (compile._share_ranges_across_moves), the post-activation range the fused clamp needs."""
    shape_op = graph.producer(act.inputs[0])
    if (shape_op is None or not traits_of(shape_op.op).reshape or single_consumer(graph, act.inputs[0]) is not act
            or single_consumer(graph, shape_op.inputs[0]) is not shape_op):
        return
    inner = graph.producer(shape_op.inputs[0])
    if inner is None or not traits_of(inner.op).fuses_activation:
        return
    out = act.outputs[0]
    moved = graph.add_tensor(f"{out}_unshaped", graph.tensors[shape_op.inputs[0]].shape)
    # act now reads the producer's output and writes `moved`; the reshape reads `moved` and writes act's output
    act.inputs[0], act.outputs[0] = shape_op.inputs[0], moved
    shape_op.inputs[0], shape_op.outputs[0] = moved, out
    graph.nodes.remove(act)
    graph.nodes.insert(graph.nodes.index(shape_op), act)


def fuse_activation(graph: Graph) -> Graph:
    for act in [n for n in graph.nodes if activation_range(graph, n) is not None]:
        _move_before_reshape(graph, act)
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
