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

The float runner asks each op for its float evaluation (`OpSpec.evaluate_float`, in the op files): today the ops
pruning passes through (Conv, depthwise Conv, FullyConnected, Add, Relu, Clip, pooling, Reshape) and a Transpose
that keeps the batch axis (the input's NCHW -> NHWC) have one; a graph needing any other op before its last
refitted layer is left as pruning made it, and the returned dict says why.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import FloatUnsupported, get_op

RIDGE = 1e-3  # ridge strength, relative to the mean diagonal of the inputs' Gram matrix
CHUNK = 16  # samples per block when accumulating the Gram matrices (bounds the im2col memory)

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


def _refit_layer(graph: Graph, node: Node, x: np.ndarray, target: np.ndarray) -> float:
    """Refit one layer in place; returns the relative output error left (|fit - target| / |target|)."""
    w, b = ridge_fit(graph, node, x, target)
    node.inputs[1] = graph.add_const(node.name + "_refit_weights", w.astype(np.float32))
    if len(node.inputs) < 3:
        node.inputs.append("")
    node.inputs[2] = graph.add_const(node.name + "_refit_bias", b.astype(np.float32))
    err = pre_activation(graph, node, x) - target
    return float(np.sqrt(np.sum(err ** 2) / max(np.sum(target ** 2), np.finfo(np.float64).tiny)))


def _last_reads(graph: Graph) -> dict[str, int]:
    last = {}
    for k, n in enumerate(graph.nodes):
        for i in n.inputs:
            last[i] = k
    return last


def refit_consumers(before: Graph, after: Graph, samples, layers: set[str],
                    kept: dict[str, np.ndarray]) -> dict:
    """Refit the layers named in `layers` (of the pruned graph `after`, whose structure is that of `before`) on the
    float calibration `samples` ({input name: [N, *input shape]}, or the first input's [N, *shape] alone);
    `kept`: the output channels each pruned producer kept.
    Returns {"layers": name -> relative output error after the fit} or {"skipped": reason}."""
    if not isinstance(samples, dict):
        samples = {before.inputs[0]: samples}
    x = {name: np.asarray(samples[name], np.float64).reshape((-1, *before.tensors[name].shape[1:]))
         for name in before.inputs}
    old, new = dict(x), dict(x)  # the pruned graph keeps the input names
    last = max((k for k, n in enumerate(after.nodes) if n.name in layers), default=-1)
    reads = _last_reads(after)
    errors = {}
    wired = {n.name: list(n.inputs) for n in after.nodes}
    try:
        for k, (b_node, a_node) in enumerate(zip(before.nodes[:last + 1], after.nodes[:last + 1])):
            if a_node.name in layers:
                target = pre_activation(before, b_node, old[b_node.inputs[0]])
                if a_node.name in kept:
                    target = target[..., kept[a_node.name]]
                errors[a_node.name] = _refit_layer(after, a_node, new[a_node.inputs[0]], target)
            run_node(before, b_node, old)
            run_node(after, a_node, new)
            for values, node in ((old, b_node), (new, a_node)):
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


__all__ = ["snapshot", "run_node", "pre_activation", "ridge_fit", "refit_consumers", "Unsupported"]
