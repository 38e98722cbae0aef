"""Pruning on the float graph, after the passes and before quantization.

Magnitude pruning (`magnitude_prune`) zeroes the smallest-|w| weights of Conv and FullyConnected layers: the
`round(sparsity * N)` lowest-scoring of the N weights in scope, ties broken by position so the result is
deterministic. The scope is each layer on its own, or one pool of all the layers that share the default sparsity
(a global threshold, so layers get different sparsities). Within a layer the order is plain |w|. Across layers raw
|w| cannot be compared: folding batch norm rescales each layer's weights arbitrarily, and a global threshold on
raw |w| was measured to zero 100 % of ic_resnet8's first conv and 98.9 % of kws_dscnn's at 50 % (both models
then answer one class). So the global threshold is put on each weight's LAMP score (Lee et al., "Layer-adaptive
sparsity for the magnitude-based pruning", ICLR 2021): w_u^2 / sum of w_v^2 over the weights of its layer at
least as large, which is monotone in |w| inside a layer, invariant to a layer's scale, and 1 for a layer's
largest weight, so no layer is ever emptied. Zeros stay exact zeros through quantization, because weights are
quantized symmetrically (zero point 0); with calibration data, storage_step then re-rounds the kept weights to
compensate for the pruned ones (compress/pipeline.py).

Structured pruning (`prune_channels`) removes whole output channels so the dense kernels do less work. Eligible
producers are Conv (not depthwise, not grouped) and FullyConnected layers whose output reaches exactly one
consumer layer, a Conv (not grouped) or a FullyConnected, and nothing else; between them the path may hold only
  - the producer's fused activation (it is in the node),
  - Reshape aliases that keep channels innermost (NHWC reshapes that keep the last axis, or the flatten of
    [N, H, W, C] into [N, H*W*C] in front of a FullyConnected),
  - per-channel ops: MaxPool, AveragePool, GlobalAveragePool, standalone Relu/Clip,
  - one depthwise Conv with channel multiplier 1, whose channels are then pruned too (its inputs and outputs).
Why exactly these: removing a channel must remove one input channel of the consumer and nothing else. A tensor
read by two nodes, an Add (a residual: the other branch still has that channel), a Concat or Transpose (they mix
channel positions), or a graph output (its shape is the model's interface) would change meaning, so a channel
feeding any of them is never pruned.

The channels with the smallest L1 norm of the producer's weights go. A removed channel would, with its weights
zeroed, output the constant act(bias); that constant (carried through the depthwise and pooling ops on the path)
is folded into the consumer's bias, which is exact wherever the consumer's window does not reach its zero
padding. Calibration ranges stay those of the unpruned float model (onnxruntime runs the original ONNX file).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, verify

LAYER_OPS = ("Conv", "FullyConnected")
PER_CHANNEL_OPS = ("MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Clip")


def layer_nodes(graph: Graph) -> list[Node]:
    """The nodes whose weights compression works on, in schedule order."""
    return [n for n in graph.nodes if n.op in LAYER_OPS and len(n.inputs) > 1 and n.inputs[1]
            and graph.tensors[n.inputs[1]].is_const]


def layer_kind(node: Node) -> str:
    if node.op == "FullyConnected":
        return "fully_connected"
    return "depthwise" if node.attrs.get("depthwise") else "conv"


def matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _check_float(graph: Graph, node: Node, what: str) -> None:
    w = graph.tensors[node.inputs[1]]
    if w.quant is not None or w.dtype != "float32":
        raise TinyaotError(f"{what} works on float weights, but layer {node.name!r} holds pre-quantized integer "
                           "weights (a QDQ model); prune the float model before quantizing it")


# ---- magnitude pruning -----------------------------------------------------------------------------------------

def lamp_scores(a: np.ndarray) -> np.ndarray:
    """LAMP score of each entry: a_u^2 / sum of a_v^2 over the entries v at or after u in ascending |a| order
    (stable on ties), so the scores rank entries exactly as |a| does, and the largest entry scores 1."""
    f = np.asarray(a, np.float64).reshape(-1) ** 2
    order = np.argsort(f, kind="stable")
    suffix = np.cumsum(f[order][::-1])[::-1]
    out = np.empty_like(f)
    out[order] = f[order] / np.maximum(suffix, np.finfo(np.float64).tiny)
    return out.reshape(np.shape(a))


def prune_smallest(arrays: list[np.ndarray], sparsity: float) -> list[np.ndarray]:
    """Zero the round(sparsity * N) entries with the lowest LAMP score over all `arrays` together (for one array,
    simply its smallest-magnitude entries; stable order on ties: earlier arrays, then earlier positions, first).
    Returns new arrays."""
    flat = np.concatenate([lamp_scores(a).reshape(-1) for a in arrays]) if arrays else np.zeros(0)
    count = int(round(sparsity * flat.size))
    keep = np.ones(flat.size, bool)
    keep[np.argsort(flat, kind="stable")[:count]] = False
    out, pos = [], 0
    for a in arrays:
        out.append(np.where(keep[pos:pos + a.size].reshape(a.shape), a, 0).astype(a.dtype))
        pos += a.size
    return out


def magnitude_prune(graph: Graph, sparsity: dict[str, float], pooled: set[str]) -> dict[str, float]:
    """Zero weights of the layers named in `sparsity` (node name -> fraction). Layers in `pooled` with the same
    fraction share one global threshold; every other layer is pruned on its own. Returns the achieved float
    sparsity per pruned layer."""
    nodes = {n.name: n for n in layer_nodes(graph)}
    targets = {name: s for name, s in sparsity.items() if name in nodes and s > 0}
    for name in targets:
        _check_float(graph, nodes[name], "--prune")
    groups: dict[tuple, list[str]] = {}
    for name, s in targets.items():
        key = ("global", s) if name in pooled else ("layer", name)
        groups.setdefault(key, []).append(name)
    achieved = {}
    for names in groups.values():
        s = targets[names[0]]
        tensors = [graph.tensors[nodes[n].inputs[1]] for n in names]
        for n, t, new in zip(names, tensors, prune_smallest([t.data for t in tensors], s)):
            t.data = new
            achieved[n] = float(np.mean(new == 0)) if new.size else 0.0
    return achieved


# ---- structured (channel) pruning ------------------------------------------------------------------------------

@dataclass
class _Chain:
    producer: Node
    path: list[Node]  # nodes between producer and consumer
    depthwise: Node | None
    consumer: Node
    positions: int  # consumer FullyConnected input = positions x channels (channels innermost); 1 for Conv


def _channels(graph: Graph, node: Node) -> int:
    return graph.tensors[node.outputs[0]].shape[-1]


def channel_chain(graph: Graph, producer: Node) -> _Chain | None:
    """The path from an eligible producer to its one consumer layer (see the module docstring), or None."""
    if producer.op not in LAYER_OPS or graph.tensors[producer.inputs[1]].quant is not None:
        return None
    if producer.op == "Conv":
        w = graph.tensors[producer.inputs[1]].shape
        x = graph.tensors[producer.inputs[0]].shape
        if producer.attrs.get("depthwise") or w[3] != x[3]:
            return None
    t = producer.outputs[0]
    shape = graph.tensors[t].shape
    ch = shape[-1]  # the channels being pruned (a flatten hides them in its last axis)
    positions = 1
    flattened = False
    path, dw = [], None
    while True:
        if t in graph.outputs:
            return None
        cons = graph.consumers(t)
        if len(cons) != 1 or cons[0].inputs.count(t) != 1 or cons[0].inputs[0] != t:
            return None
        c = cons[0]
        out_shape = graph.tensors[c.outputs[0]].shape if c.outputs else None
        if c.op == "Reshape":
            if not flattened and out_shape[-1] == shape[-1] and len(shape) >= 2:
                pass  # channels stay the innermost axis
            elif not flattened and len(shape) == 4 and len(out_shape) == 2 and out_shape[0] == shape[0]:
                flattened, positions = True, shape[1] * shape[2]
            else:
                return None
        elif c.op in PER_CHANNEL_OPS and not flattened and len(c.outputs) == 1:
            if out_shape[-1] != shape[-1]:
                return None
        elif c.op == "Conv" and c.attrs.get("depthwise") and dw is None and not flattened:
            wshape = graph.tensors[c.inputs[1]].shape
            if wshape[3] != shape[-1] or graph.tensors[c.inputs[1]].quant is not None:
                return None  # channel multiplier > 1
            dw = c
        elif c.op == "Conv" and not c.attrs.get("depthwise") and not flattened:
            wshape = graph.tensors[c.inputs[1]].shape
            if wshape[3] != shape[-1] or graph.tensors[c.inputs[1]].quant is not None:
                return None  # grouped
            return _Chain(producer, path, dw, c, 1)
        elif c.op == "FullyConnected":
            w = graph.tensors[c.inputs[1]]
            if w.quant is not None or w.shape[1] != positions * ch or (not flattened and len(shape) != 2):
                return None
            return _Chain(producer, path, dw, c, positions)
        else:
            return None
        path.append(c)
        t = c.outputs[0]
        shape = out_shape


def _act(node: Node, v: np.ndarray) -> np.ndarray:
    lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
    return np.clip(v, lo, hi)


def _replace(graph: Graph, node: Node, k: int, data: np.ndarray, base: str) -> None:
    """Point input k of `node` at a fresh constant (the old one may be shared or is dropped afterwards)."""
    while len(node.inputs) <= k:
        node.inputs.append("")
    node.inputs[k] = graph.add_const(base, np.asarray(data, np.float32))


def _bias(graph: Graph, node: Node, channels: int) -> np.ndarray:
    if len(node.inputs) > 2 and node.inputs[2]:
        return np.asarray(graph.tensors[node.inputs[2]].data, np.float64).reshape(-1)
    return np.zeros(channels)


def prune_chain(graph: Graph, chain: _Chain, fraction: float) -> int:
    """Remove floor(fraction * C) output channels (smallest L1 norm, at least one channel kept). Returns how many."""
    p, c = chain.producer, chain.consumer
    w = np.asarray(graph.tensors[p.inputs[1]].data)
    ch = w.shape[0]
    remove = min(int(np.floor(fraction * ch + 1e-9)), ch - 1)
    if remove <= 0:
        return 0
    l1 = np.abs(w.reshape(ch, -1)).sum(axis=1)
    gone = np.sort(np.argsort(l1, kind="stable")[:remove])
    keep = np.setdiff1d(np.arange(ch), gone)
    b = _bias(graph, p, ch)
    v = _act(p, b[gone])  # what a removed channel outputs once its weights are zero
    _replace(graph, p, 1, w[keep], p.name + "_pruned_weights")
    _replace(graph, p, 2, b[keep], p.name + "_pruned_bias")
    for node in chain.path:
        if node is chain.depthwise:
            dw = np.asarray(graph.tensors[node.inputs[1]].data)
            db = _bias(graph, node, dw.shape[3])
            v = _act(node, db[gone] + v * dw[..., gone].reshape(-1, remove).sum(axis=0))
            _replace(graph, node, 1, dw[..., keep], node.name + "_pruned_weights")
            _replace(graph, node, 2, db[keep], node.name + "_pruned_bias")
        elif node.op in ("Relu", "Clip"):
            from tinyaot.passes.fuse_activation import activation_range

            lo, hi = activation_range(graph, node) or (-np.inf, np.inf)
            v = np.clip(v, lo, hi)
        out = graph.tensors[node.outputs[0]]
        s = list(out.shape)
        # a flatten holds positions x channels; every other op on the path keeps channels as its last axis
        s[-1] = s[-1] // ch * len(keep)
        out.shape = tuple(s)
    graph.tensors[p.outputs[0]].shape = (*graph.tensors[p.outputs[0]].shape[:-1], len(keep))
    cw = np.asarray(graph.tensors[c.inputs[1]].data, np.float64)
    out_c = cw.shape[0]
    cb = _bias(graph, c, out_c)
    if c.op == "Conv":  # OHWI: input channels on the last axis
        cb = cb + cw[..., gone].sum(axis=(1, 2)) @ v
        new_w = cw[..., keep]
    else:  # [out, positions * channels], channels innermost
        cw3 = cw.reshape(out_c, chain.positions, ch)
        cb = cb + cw3[:, :, gone].sum(axis=1) @ v
        new_w = cw3[:, :, keep].reshape(out_c, -1)
    _replace(graph, c, 1, new_w, c.name + "_pruned_weights")
    _replace(graph, c, 2, cb, c.name + "_pruned_bias")
    return int(remove)


def prune_channels(graph: Graph, fraction: dict[str, float]) -> dict[str, int]:
    """Structured pruning of the eligible producers named in `fraction` (node name -> fraction of output
    channels). Returns the channels removed per producer; ineligible names are skipped (`eligible_producers`
    lists the eligible ones)."""
    removed = {}
    for node in layer_nodes(graph):
        if fraction.get(node.name, 0.0) > 0:
            _check_float(graph, node, "--prune-channels")
    for node in list(graph.nodes):
        f = fraction.get(node.name, 0.0)
        if f <= 0 or node.op not in LAYER_OPS:
            continue
        chain = channel_chain(graph, node)
        if chain is None:
            continue
        n = prune_chain(graph, chain, f)
        if n:
            removed[node.name] = n
    graph.remove_unused_tensors()
    verify(graph, "prune_channels")
    return removed


def eligible_producers(graph: Graph) -> list[str]:
    return [n.name for n in layer_nodes(graph) if channel_chain(graph, n) is not None]


__all__ = ["LAYER_OPS", "layer_nodes", "layer_kind", "matches", "lamp_scores", "prune_smallest", "magnitude_prune",
           "channel_chain", "prune_chain", "prune_channels", "eligible_producers"]
