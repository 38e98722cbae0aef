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

The float runner covers the ops pruning passes through (Conv, depthwise Conv, FullyConnected, Add, Relu, Clip,
pooling, Reshape) and a Transpose that keeps the batch axis (the input's NCHW -> NHWC); a graph needing any
other op before its last refitted layer is left as pruning made it, and the returned dict says why.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinyaot.ir import Graph, Node
from tinyaot.ops.clamp import activation_range
from tinyaot.ops.conv import im2col_patches

RIDGE = 1e-3  # ridge strength, relative to the mean diagonal of the inputs' Gram matrix
CHUNK = 16  # samples per block when accumulating the Gram matrices (bounds the im2col memory)


class Unsupported(Exception):
    """The float runner has no implementation for an op on the way to a refitted layer."""


def snapshot(graph: Graph) -> Graph:
    """A copy of `graph` that pruning cannot change: pruning rewires node inputs and reshapes tensors in place, but
    replaces constant data rather than writing into it, so the arrays can be shared."""
    return replace(graph, tensors={k: replace(t) for k, t in graph.tensors.items()},
                   nodes=[replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs))
                          for n in graph.nodes],
                   inputs=list(graph.inputs), outputs=list(graph.outputs), meta=dict(graph.meta))


# ---- float runner ----------------------------------------------------------------------------------------------

def _const(graph: Graph, node: Node, k: int) -> np.ndarray | None:
    name = node.inputs[k] if len(node.inputs) > k else ""
    return np.asarray(graph.tensors[name].data, np.float64) if name else None


def _clip(node: Node, y: np.ndarray) -> np.ndarray:
    lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
    return np.clip(y, lo, hi)


def _conv_patches(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """im2col patches [N, OH, OW, KH, KW, C] of a Conv node's NHWC input (zero padding: the padded float value)."""
    a = node.attrs
    pads = list(a.get("pads", (0, 0, 0, 0)))
    return im2col_patches(x, tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), (pads[0], pads[1]),
                    tuple(a.get("dilations", (1, 1))), graph.tensors[node.outputs[0]].shape[1:3])


def _pool(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    if node.op == "GlobalAveragePool":
        return x.mean(axis=(1, 2), keepdims=True)
    a = node.attrs
    pads = list(a.get("pads", (0, 0, 0, 0)))
    geometry = (tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), (pads[0], pads[1]), (1, 1),
                graph.tensors[node.outputs[0]].shape[1:3])
    if node.op == "MaxPool":
        # shift every input above the zero padding, so padding never wins
        shift = 1.0 - float(x.min())
        return im2col_patches(x + shift, *geometry).max(axis=(3, 4)) - shift
    total = im2col_patches(x, *geometry).sum(axis=(3, 4))
    if int(a.get("count_include_pad", 0)):
        return total / float(np.prod(a["kernel_shape"]))
    return total / im2col_patches(np.ones_like(x[:1]), *geometry).sum(axis=(3, 4))


def pre_activation(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """A Conv or FullyConnected layer's output before its fused activation (CHUNK samples at a time, which bounds
    the im2col memory)."""
    return np.concatenate([_pre_activation(graph, node, x[s:s + CHUNK]) for s in range(0, len(x), CHUNK)])


def _pre_activation(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    w, b = _const(graph, node, 1), _const(graph, node, 2)
    if node.op == "FullyConnected":
        y = x.reshape(len(x), -1) @ w.T
        return y if b is None else y + b
    p = _conv_patches(graph, node, x)
    if node.attrs.get("depthwise"):  # 1HWC, output channel c * multiplier + m reads input channel c
        mult = w.shape[3] // x.shape[3]
        y = (np.repeat(p, mult, axis=-1) * w[0]).sum(axis=(3, 4))
    else:
        groups = x.shape[3] // w.shape[3]
        n, oh, ow, kh, kw, _ = p.shape
        cols = p.reshape(n * oh * ow, kh, kw, groups, -1).transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow, -1)
        wt = w.reshape(groups, w.shape[0] // groups, -1).transpose(0, 2, 1)
        y = np.matmul(cols, wt).transpose(1, 0, 2).reshape(n, oh, ow, -1)
    return y if b is None else y + b


def run_node(graph: Graph, node: Node, values: dict[str, np.ndarray]) -> None:
    """Evaluate `node` in float on the batch in `values` (tensor name -> [N, ...], N samples of batch 1)."""

    x = values.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if node.op in ("Conv", "FullyConnected"):
        y = _clip(node, pre_activation(graph, node, x))
    elif node.op == "Add" and all(i in values for i in node.inputs if i):
        y = _clip(node, sum(values[i] for i in node.inputs if i))
    elif activation_range(graph, node) is not None:  # a clamp (Relu, Clip)
        lo, hi = activation_range(graph, node)
        y = np.clip(x, lo, hi)
    elif node.op in ("MaxPool", "AveragePool", "GlobalAveragePool") and not int(node.attrs.get("ceil_mode", 0)):
        y = _clip(node, _pool(graph, node, x))
    elif node.op == "Reshape" and graph.tensors[node.inputs[0]].shape[0] == 1:
        out = graph.tensors[node.outputs[0]].shape
        if out[0] != 1:
            raise Unsupported(f"Reshape node {node.name!r} moves the batch axis")
        y = x.reshape((len(x), *out[1:]))
    elif node.op == "Transpose" and list(node.attrs.get("perm", ()))[:1] == [0]:  # e.g. the input's NCHW -> NHWC
        y = np.transpose(x, node.attrs["perm"])
    else:
        raise Unsupported(f"the float runner has no {node.op} (node {node.name!r})")
    values[node.outputs[0]] = y


# ---- the fit ---------------------------------------------------------------------------------------------------

def _design(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """The layer's inputs as rows [samples x positions, weights per output channel] in its weights' order."""
    if node.op == "FullyConnected":
        return x.reshape(len(x), -1)
    p = _conv_patches(graph, node, x)
    return p.reshape(-1, int(np.prod(p.shape[3:])))


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


def refit_consumers(before: Graph, after: Graph, samples: np.ndarray, layers: set[str],
                    kept: dict[str, np.ndarray]) -> dict:
    """Refit the layers named in `layers` (of the pruned graph `after`, whose structure is that of `before`) on the
    float calibration `samples` [N, *input shape]; `kept`: the output channels each pruned producer kept.
    Returns {"layers": name -> relative output error after the fit} or {"skipped": reason}."""
    x = np.asarray(samples, np.float64).reshape((-1, *before.tensors[before.inputs[0]].shape[1:]))
    old, new = {before.inputs[0]: x}, {after.inputs[0]: x}
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
