"""Least-squares refit of the layers structured pruning took input channels from (compress/prune.py).

Removing channels with no retraining leaves each consumer layer summing fewer inputs than it was trained on;
measured on ic_resnet8 at --prune-channels 0.25, top-1 fell from 89 % to 5 % (ic01 images 100-199). What a
consumer has lost can largely be rebuilt from the channels it keeps, because channels of a feature map are
correlated: `refit_consumers` runs the calibration samples through the float graph before and after pruning,
side by side, and replaces each consumer's weights and bias by the ridge-regularised least-squares fit of its
unpruned pre-activation output (its kept output channels) from the inputs it now receives (He et al., "Channel
pruning for accelerating very deep neural networks", ICCV 2017, without the lasso selection). Layers are refitted
in schedule order and the pruned graph runs on with the refitted weights, so each fit also absorbs the error the
earlier ones left. All in float, before quantization; the calibration ranges stay those of the unpruned model,
which the refitted layers' outputs approximate.

A fully connected layer after a global average pool (through reshapes only, no clamp between) sees one input row
per sample, so its fit from ~100 calibration samples learns their noise (ic_resnet8, the last channel group at 25 %
alone: calibration logits NSR 0.012, held-out 0.052). Pooling and the layer are both affine, so the layer's output
is the mean over positions of what it makes of each position's channels; such a layer is fitted on the positions
instead (`_pooled_source`: the dense layer's output from each dense position as the target), H x W rows per sample
(ic_resnet8 --prune-channels 0.25, float, ic01 images 100-199: logits NSR 0.32 -> 0.26, top-1 63 -> 68 %).

The float runner asks each op for its float evaluation (`OpSpec.evaluate_float`, in the op files): today the ops
pruning passes through (Conv, depthwise Conv, FullyConnected, Add, Relu, Clip, pooling, Reshape) and a Transpose
that keeps the batch axis (the input's NCHW -> NHWC) have one; a graph needing any other op before its last
refitted layer is left as pruning made it, and the returned dict says why.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import FloatUnsupported, get_op, ops_with, traits_of

RIDGE = 1e-3  # ridge strength, relative to the mean diagonal of the inputs' Gram matrix
CHUNK = 16  # samples per block when accumulating the Gram matrices (bounds the im2col memory)
LAYER_OPS = ops_with(weighted_layer=True)

# The float runner has no implementation for an op on the way to a refitted layer (OpSpec.evaluate_float).
Unsupported = FloatUnsupported


def snapshot(graph: Graph) -> Graph:
    """A copy of `graph` that pruning cannot change: pruning rewires node inputs and reshapes tensors in place, but
    replaces constant data rather than writing into it, so the arrays can be shared."""
    return replace(graph, tensors={k: replace(t) for k, t in graph.tensors.items()},
                   nodes=[replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs))
                          for n in graph.nodes],
                   inputs=list(graph.inputs), outputs=list(graph.outputs), meta=dict(graph.meta))


# ---- float runner: each op's float evaluation (OpSpec.evaluate_float, in its op file) ---------------------------

def _const(graph: Graph, node: Node, k: int) -> np.ndarray | None:
    name = node.inputs[k] if len(node.inputs) > k else ""
    return np.asarray(graph.tensors[name].data, np.float64) if name else None


def pre_activation(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """A weighted layer's output before its fused activation (its op's pre_activation, which evaluates a few
    samples at a time to bound the im2col memory)."""
    return get_op(node.op).pre_activation(node, graph, x)


def run_node(graph: Graph, node: Node, values: dict[str, np.ndarray]) -> None:
    """Evaluate `node` in float on the batch in `values` (tensor name -> [N, ...], N samples of batch 1); raises
    Unsupported for an op without a float evaluation."""
    inputs = [values.get(i) if i else None for i in node.inputs]
    for name, y in zip(node.outputs, get_op(node.op).evaluate_float(node, graph, inputs)):
        values[name] = y


# ---- the fit ---------------------------------------------------------------------------------------------------

def _design(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """The layer's inputs as rows [samples x positions, weights per output channel] in its weights' order (its
    op's weight_row_inputs)."""
    return get_op(node.op).weight_row_inputs(node, graph, x)


def ridge_fit(graph: Graph, node: Node, x: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weights (in the layer's layout) and bias minimising |inputs @ W + b - target|^2 + lambda |W|^2, with
    lambda = RIDGE x the mean diagonal of inputs' Gram matrix; the bias is not shrunk."""
    w = _const(graph, node, 1)
    out_c = w.shape[0]
    k = w[0].size
    gram, cross = np.zeros((k + 1, k + 1)), np.zeros((k + 1, out_c))
    for s in range(0, len(x), CHUNK):
        a = _design(graph, node, x[s:s + CHUNK])
        a = np.concatenate([a, np.ones((len(a), 1))], axis=1)
        gram += a.T @ a
        cross += a.T @ target[s:s + CHUNK].reshape(len(a), out_c)
    reg = RIDGE * max(float(np.trace(gram[:k, :k])) / k, np.finfo(np.float64).tiny)
    gram[np.arange(k), np.arange(k)] += reg
    sol = np.linalg.solve(gram, cross)
    return sol[:k].T.reshape(w.shape), sol[k]


def _refit_layer(graph: Graph, node: Node, x: np.ndarray, target: np.ndarray, report: bool = True) -> float | None:
    """Refit one layer in place; returns the relative output error left (|fit - target| / |target|), or None
    without `report` (it costs one more pass of the layer over the samples)."""
    w, b = ridge_fit(graph, node, x, target)
    node.inputs[1] = graph.add_const(node.name + "_refit_weights", w.astype(np.float32))
    if len(node.inputs) < 3:
        node.inputs.append("")
    node.inputs[2] = graph.add_const(node.name + "_refit_bias", b.astype(np.float32))
    if not report:
        return None
    err = pre_activation(graph, node, x) - target
    return float(np.sqrt(np.sum(err ** 2) / max(np.sum(target ** 2), np.finfo(np.float64).tiny)))


def _last_reads(graph: Graph) -> dict[str, int]:
    last = {}
    for k, n in enumerate(graph.nodes):
        for i in n.inputs:
            last[i] = k
    return last


def _pooled_source(graph: Graph, node: Node) -> str | None:
    """The input of the global average pool (its op's position_mean: no clamp, one window over the whole input)
    that fully connected `node` reads through reshapes only, when its channels are the layer's inputs; else None."""
    if get_op(node.op).compression_kind(node) != "fully_connected":
        return None
    p = graph.producer(node.inputs[0])
    while p is not None and traits_of(p.op).reshape and len(graph.consumers(p.outputs[0])) == 1:
        p = graph.producer(p.inputs[0])
    if p is None or not get_op(p.op).position_mean(p, graph):
        return None
    src = p.inputs[0]
    return src if graph.tensors[src].shape[-1] == graph.tensors[node.inputs[1]].shape[1] else None


def _fit_inputs(graph: Graph, node: Node, values: dict[str, np.ndarray], pooled: str | None) -> np.ndarray:
    """What a layer is fitted from: its input, or, after a global average pool, each position's channels as rows."""
    if pooled is None:
        return values[node.inputs[0]]
    x = values[pooled]
    return x.reshape(-1, x.shape[-1])


def refittable_after(graph: Graph, consumers: set[str]) -> set[str]:
    """`consumers` and every later layer a refit can fit: float weights, rows that are output channels reading the
    same inputs (its op's out_channel_axis; not a depthwise or grouped convolution). Their inputs have moved with the
    consumers' errors, so each one refitted in turn to the dense layer's output takes up what the ones before left
    (ic_resnet8 --prune-channels 0.25 with the last stage's chain kept, float, ic01 images 100-199: the classifier
    refitted too takes the logits NSR from 0.19 to 0.17)."""
    order = [k for k, n in enumerate(graph.nodes) if n.name in consumers]
    if not order:
        return set(consumers)
    out = set(consumers)
    for n in graph.nodes[min(order):]:
        if n.op in LAYER_OPS and len(n.inputs) > 1 and n.inputs[1] and graph.tensors[n.inputs[1]].is_const \
                and graph.tensors[n.inputs[1]].quant is None and get_op(n.op).out_channel_axis(n, graph) is not None:
            out.add(n.name)
    return out


def dense_values(graph: Graph, samples, nodes: list[Node] | None = None) -> dict[str, np.ndarray]:
    """The activations `nodes` (default: all) of `graph` compute in float over `samples` ({input name: [N, ...]} or
    the first input's array), for refit_consumers' `dense` (raises Unsupported for an op without a float
    evaluation)."""
    values = _inputs(graph, samples)
    for node in graph.nodes if nodes is None else nodes:
        run_node(graph, node, values)
    return values


def _inputs(graph: Graph, samples) -> dict[str, np.ndarray]:
    if not isinstance(samples, dict):
        samples = {graph.inputs[0]: samples}
    return {name: np.asarray(samples[name], np.float64).reshape((-1, *graph.tensors[name].shape[1:]))
            for name in graph.inputs}


def refit_consumers(before: Graph, after: Graph, samples, layers: set[str],
                    kept: dict[str, np.ndarray], dense: dict | None = None) -> dict:
    """Refit the layers named in `layers` (of the pruned graph `after`, whose structure is that of `before`) on the
    float calibration `samples` ({input name: [N, *input shape]}, or the first input's [N, *shape] alone);
    `kept`: the output channels each pruned producer kept. `dense`: `before`'s activations on these samples
    (dense_values), when many prunings of one model are fitted: they are read, not recomputed, the pruned graph
    takes them up to its first pruned or refitted layer, and the dense layers' outputs the fits aim at are kept in
    it too (under (name, "pre")).
    Returns {"layers": name -> relative output error after the fit (None with `dense`: not measured)} or
    {"skipped": reason}."""
    x = _inputs(before, samples)
    old, new = (dict(x) if dense is None else dense), dict(x)  # the pruned graph keeps the input names
    last = max((k for k, n in enumerate(after.nodes) if n.name in layers), default=-1)
    first = min((k for k, n in enumerate(after.nodes) if n.name in layers or n.name in kept), default=0) \
        if dense is not None else 0
    reads = _last_reads(after)
    pooled = {}
    for k, (b_node, a_node) in enumerate(zip(before.nodes, after.nodes)):
        if a_node.name in layers:
            pooled[a_node.name] = (_pooled_source(before, b_node), _pooled_source(after, a_node))
            for t in pooled[a_node.name]:
                if t is not None:
                    reads[t] = max(reads.get(t, k), k)  # kept until the layer is fitted
    errors = {}
    wired = {n.name: list(n.inputs) for n in after.nodes}
    try:
        for k, (b_node, a_node) in enumerate(zip(before.nodes[:last + 1], after.nodes[:last + 1])):
            if k < first:  # nothing changed yet: the dense activations
                new.update({o: old[o] for o in a_node.outputs})
                continue
            if a_node.name in layers:
                b_src, a_src = pooled[a_node.name]
                if (b_src is None) != (a_src is None):
                    b_src = a_src = None
                key = (b_node.name, "pre" if b_src is None else "pre_positions")
                target = old.get(key) if dense is not None else None
                if target is None:
                    target = pre_activation(before, b_node, _fit_inputs(before, b_node, old, b_src))
                    if dense is not None:
                        old[key] = target
                if a_node.name in kept:
                    target = target[..., kept[a_node.name]]
                errors[a_node.name] = _refit_layer(after, a_node, _fit_inputs(after, a_node, new, a_src), target,
                                                   report=dense is None)
            if dense is None:
                run_node(before, b_node, old)
            run_node(after, a_node, new)
            for values, node in ((old, b_node), (new, a_node)):
                if values is dense:
                    continue
                for i in node.inputs:
                    if reads.get(i) == k and i in values:
                        del values[i]  # last use: keep only the live activations of the N samples
    except Unsupported as e:
        for n in after.nodes:  # all or nothing: undo the layers already refitted
            n.inputs[:] = wired[n.name]
        after.remove_unused_tensors()
        return {"skipped": str(e)}
    after.remove_unused_tensors()
    return {"layers": errors}


__all__ = ["snapshot", "run_node", "pre_activation", "ridge_fit", "refittable_after", "dense_values", "refit_consumers",
           "Unsupported"]
