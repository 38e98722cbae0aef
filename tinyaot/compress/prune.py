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

Structured pruning (`prune_channels`) removes whole channels so the dense kernels do less work. Channels are
removed per channel group: the activations that must keep the same channel positions, found from a layer's
output by following, both ways,
  - an elementwise Add without broadcasting (all its inputs and its output: a residual sum),
  - the per-channel ops MaxPool, AveragePool, GlobalAveragePool and standalone Relu/Clip,
  - Reshape aliases that keep channels innermost (NHWC reshapes that keep the last axis, or the flatten of
    [N, H, W, C] into [N, H*W*C] in front of a FullyConnected),
  - depthwise Convs with channel multiplier 1 (their weights and biases lose the same channels).
The group's producers are the layers writing it: Conv (not depthwise, not grouped) or FullyConnected layers
with float weights, whose output channels go. Its consumers are the Conv (not grouped) or FullyConnected layers
reading it as their input, whose input channels go; a layer may be both (x + conv(x)). Anything else touching
the group makes it ineligible: a Concat or Transpose (they mix channel positions), a broadcasting Add, a graph
input or output (its shape is the model's interface), or a writer that is not a prunable layer. So in a ResNet
the block's output conv, the 1x1 shortcut conv, the Add and the next block's input convs are one group. A group
is pruned only if every producer is asked to be (`--prune-exclude` on one spares the group) and takes the
smallest fraction asked among them.

The channels with the lowest joint score go from every member: the sum over the producers of the L1 norm of
each output channel's weights, each producer's norms divided by their mean (folded batch norms scale producers
arbitrarily; for a single producer this is plain L1 order). A removed channel would, with its weights zeroed,
output the constant act(bias) at each producer; that constant (carried through the Adds, depthwise and pooling
ops of the group) is folded into each consumer's bias, which is exact wherever the consumer's window does not
reach its zero padding. With calibration data, compress/channel_budget.py decides how many channels each group
loses (the fraction asked is then a MACs budget) and compress/refit.py refits the consumers and every later layer
by least squares (prune_step). Calibration ranges stay those of the unpruned float model (onnxruntime runs the
original ONNX file).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from tinyaot.compress.pattern import BLOCK, block_grid, block_scores, expand_block_mask, takes_blocks
from tinyaot.compress.storage import rows
from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, verify
from tinyaot.ops.common import float_bias, fused_activation
from tinyaot.ops.registry import get_op, infer_shapes, ops_with

# From the ops' registered traits: the layers with per-output-channel weights. What each op does under channel
# pruning (its prune axis, how it loses input channels, which channels it ties) its op file says (ops/registry.py).
LAYER_OPS = ops_with(weighted_layer=True)


def layer_nodes(graph: Graph) -> list[Node]:
    """The nodes whose weights compression works on, in schedule order."""
    return [n for n in graph.nodes if n.op in LAYER_OPS and len(n.inputs) > 1 and n.inputs[1]
            and graph.tensors[n.inputs[1]].is_const]


def layer_kind(node: Node) -> str:
    """The kind compression specs select the layer by ("conv", "depthwise", "fully_connected"; its op file says)."""
    return get_op(node.op).compression_kind(node)


def matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _check_float(graph: Graph, node: Node, what: str) -> None:
    w = graph.tensors[node.inputs[1]]
    if w.quant is not None or w.dtype != "float32":
        raise TinyaotError(f"{what} works on float weights, but layer {node.name!r} holds pre-quantized integer "
                           "weights (a QDQ ONNX or int8 TFLite model); prune the float model before quantizing it")


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


def prune_smallest_blocks(arrays: list[np.ndarray], sparsity: float) -> list[np.ndarray]:
    """Block pattern (compress/pattern.py) of prune_smallest: whole 4x4 blocks of the [out_ch, row_len] rows go,
    the lowest LAMP scores of the blocks' L2 norms first, until round(sparsity * N) weights are gone (the block that
    comes closest). Returns new arrays."""
    scores, sizes, shapes = [], [], []
    for a in arrays:
        r = rows(np.asarray(a), False)
        scores.append(lamp_scores(np.sqrt(block_scores(r))).reshape(-1))
        nbr, nbc = block_grid(np.shape(a))
        rc = np.minimum(BLOCK[0], r.shape[0] - BLOCK[0] * np.arange(nbr))
        cc = np.minimum(BLOCK[1], r.shape[1] - BLOCK[1] * np.arange(nbc))
        sizes.append((rc[:, None] * cc[None, :]).reshape(-1))
        shapes.append((nbr, nbc))
    flat = np.concatenate(scores) if scores else np.zeros(0)
    size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    order = np.argsort(flat, kind="stable")
    gone = np.concatenate([[0], np.cumsum(size[order])])
    count = int(np.argmin(np.abs(gone - sparsity * size.sum())))
    keep = np.ones(flat.size, bool)
    keep[order[:count]] = False
    out, pos = [], 0
    for a, (nbr, nbc) in zip(arrays, shapes):
        mask = expand_block_mask(keep[pos:pos + nbr * nbc].reshape(nbr, nbc), np.shape(a))
        out.append(np.where(mask, a, 0).astype(np.asarray(a).dtype))
        pos += nbr * nbc
    return out


def magnitude_prune(graph: Graph, sparsity: dict[str, float], pooled: set[str],
                    patterns: dict[str, str] | None = None) -> dict[str, float]:
    """Zero weights of the layers named in `sparsity` (node name -> fraction), by the pattern `patterns` names for
    the layer (compress/pattern.py; default unstructured). Layers in `pooled` with the same fraction and pattern
    share one global threshold; every other layer is pruned on its own. Returns the achieved float sparsity per
    pruned layer."""
    nodes = {n.name: n for n in layer_nodes(graph)}
    patterns = patterns or {}
    targets = {name: s for name, s in sparsity.items() if name in nodes and s > 0}
    for name in targets:
        _check_float(graph, nodes[name], "--prune")
    groups: dict[tuple, list[str]] = {}
    for name, s in targets.items():
        pattern = patterns.get(name, "unstructured")
        if pattern == "block" and not takes_blocks(layer_kind(nodes[name])):
            continue  # no kernel skips blocks of this layer: left dense
        key = ("global", s, pattern) if name in pooled else ("layer", name, pattern)
        groups.setdefault(key, []).append(name)
    achieved = {}
    for key, names in groups.items():
        s = targets[names[0]]
        tensors = [graph.tensors[nodes[n].inputs[1]] for n in names]
        prune = prune_smallest_blocks if key[2] == "block" else prune_smallest
        for n, t, new in zip(names, tensors, prune([t.data for t in tensors], s)):
            t.data = new
            achieved[n] = float(np.mean(new == 0)) if new.size else 0.0
    return achieved


# ---- structured (channel) pruning ------------------------------------------------------------------------------

@dataclass
class ChannelGroup:
    """Activations that hold the same channels, and the layers that write and read them (see the module docstring).
    Every member tensor's last axis is `positions x channels`, channels innermost (positions > 1 after a flatten)."""

    channels: int
    producers: list[Node]  # Conv/FullyConnected layers whose output channels are the group's
    ties: list[Node]  # Add, per-channel ops, Reshape aliases and depthwise convs: carry the channels through
    consumers: list[Node]  # Conv/FullyConnected layers reading a member tensor as their input 0
    tensors: set[str]


def _channels(graph: Graph, node: Node) -> int:
    return graph.tensors[node.outputs[0]].shape[-1]


def _float_weights(graph: Graph, node: Node) -> bool:
    return graph.tensors[node.inputs[1]].quant is None


def _out_axis(graph: Graph, node: Node) -> int | None:
    """The prune axis of a layer whose output channels can be sliced (its op's out_channel_axis: FullyConnected,
    or a Conv that is neither depthwise nor grouped) when its weights are float; None otherwise."""
    if node.op not in LAYER_OPS or len(node.inputs) < 2 or not node.inputs[1] or not _float_weights(graph, node):
        return None
    return get_op(node.op).out_channel_axis(node, graph)


def _is_producer(graph: Graph, node: Node) -> bool:
    return _out_axis(graph, node) is not None


def _is_consumer(graph: Graph, node: Node, t: str, ch: int) -> bool:
    """`node` reads member tensor `t` only as its input 0 and each input channel of it can be sliced away."""
    if not _is_producer(graph, node) or node.inputs[0] != t or node.inputs.count(t) != 1:
        return False
    return get_op(node.op).input_channels_prunable(node, graph, t, ch)


def _tie_tensors(graph: Graph, node: Node, t: str, ch: int) -> list[str] | None:
    """The activations `node` ties to member `t` channel for channel (its inputs and output), or None when it mixes
    or reshapes channels, or holds weights that cannot follow them (the op's channel_ties)."""
    if len(node.outputs) != 1:
        return None
    return get_op(node.op).channel_ties(node, graph, t, ch)


def channel_group(graph: Graph, producer: Node) -> ChannelGroup | None:
    """The channel group of `producer`'s output, or None when any member cannot lose a channel: a graph input or
    output, an op that mixes channel positions (Concat, Transpose, a broadcasting Add...), or a writer that is
    not a prunable layer."""
    if not _is_producer(graph, producer):
        return None
    ch = _channels(graph, producer)
    tensors: set[str] = set()
    producers, ties, consumers = {}, {}, {}
    todo = [producer.outputs[0]]
    while todo:
        t = todo.pop()
        if t in tensors:
            continue
        if graph.is_graph_io(t) or graph.tensors[t].shape[-1] % ch:
            return None
        tensors.add(t)
        p = graph.producer(t)
        linked = [p] if p is not None else []
        for node in linked + graph.consumers(t):
            if node is p and _is_producer(graph, node):
                producers[node.name] = node
                continue
            if node is not p and _is_consumer(graph, node, t, ch):
                consumers[node.name] = node
                continue
            tied = _tie_tensors(graph, node, t, ch)
            if tied is None:
                return None
            ties[node.name] = node
            todo.extend(tied)
    order = {n.name: k for k, n in enumerate(graph.nodes)}

    def scheduled(nodes: dict) -> list[Node]:
        return sorted(nodes.values(), key=lambda n: order[n.name])

    return ChannelGroup(ch, scheduled(producers), scheduled(ties), scheduled(consumers), tensors)


def _replace(graph: Graph, node: Node, k: int, data: np.ndarray, base: str) -> None:
    """Point input k of `node` at a fresh constant (the old one may be shared or is dropped afterwards)."""
    while len(node.inputs) <= k:
        node.inputs.append("")
    node.inputs[k] = graph.add_const(base, np.asarray(data, np.float32))


def _weights(graph: Graph, node: Node) -> np.ndarray:
    return np.asarray(graph.tensors[node.inputs[1]].data)


def group_scores(graph: Graph, group: ChannelGroup) -> np.ndarray:
    """Per channel: the sum over the producers of the L1 norm of its output channel's weights, each producer's
    norms divided by their mean. Folded batch norms scale each producer arbitrarily, so raw sums would let the
    largest one decide alone; for one producer the order is plain L1."""
    score = np.zeros(group.channels)
    for p in group.producers:
        w = np.moveaxis(_weights(graph, p), _out_axis(graph, p), 0)
        l1 = np.abs(w.reshape(group.channels, -1)).sum(axis=1).astype(np.float64)
        score += l1 / max(float(l1.mean()), np.finfo(np.float64).tiny)
    return score


def _removed_constants(graph: Graph, group: ChannelGroup, gone: np.ndarray) -> dict[str, np.ndarray]:
    """What each member tensor holds in the removed channels once their producers' weights are zero: act(bias)
    at a producer, carried through the ties in schedule order (each tie's removed_channel_value: an Add sums its
    inputs' constants, a clamp clamps them, pooling and reshapes keep them)."""
    v = {p.outputs[0]: fused_activation(p, float_bias(graph, p, group.channels)[gone]) for p in group.producers}
    for node in group.ties:
        values = [v.get(i) if i else None for i in node.inputs]
        v[node.outputs[0]] = get_op(node.op).removed_channel_value(node, graph, values, gone)
    return v


def _slice_consumer(graph: Graph, c: Node, ch: int, keep: np.ndarray, gone: np.ndarray, v: np.ndarray) -> None:
    """Drop the removed input channels of consumer `c` and fold their constant `v` into its bias."""
    new_w, cb = get_op(c.op).prune_input_channels(c, graph, ch, keep, gone, v)
    _replace(graph, c, 1, new_w, c.name + "_pruned_weights")
    _replace(graph, c, 2, cb, c.name + "_pruned_bias")


def prune_group(graph: Graph, group: ChannelGroup, fraction: float, choose=None) -> np.ndarray:
    """Remove floor(fraction * C) channels of the group (at least one channel kept) from every producer's outputs,
    every tie and every consumer's inputs: those `choose(graph, group, count)` names, else the lowest
    `group_scores`. Returns the removed channel indices."""
    ch = group.channels
    remove = min(int(np.floor(fraction * ch + 1e-9)), ch - 1)
    if remove <= 0:
        return np.zeros(0, int)
    gone = np.sort(np.argsort(group_scores(graph, group), kind="stable")[:remove]) if choose is None else \
        np.sort(np.asarray(choose(graph, group, remove), np.int64))
    keep = np.setdiff1d(np.arange(ch), gone)
    v = _removed_constants(graph, group, gone)
    axes = {p.name: _out_axis(graph, p) for p in group.producers}  # before slicing changes the weights' shapes
    # consumers first: a layer both reading and writing the group (x + conv(x)) must fold the bias it had
    for c in group.consumers:
        _slice_consumer(graph, c, ch, keep, gone, v[c.inputs[0]])
    for p in group.producers:
        w = np.take(_weights(graph, p), keep, axis=axes[p.name])
        _replace(graph, p, 1, w, p.name + "_pruned_weights")
        _replace(graph, p, 2, float_bias(graph, p, ch)[keep], p.name + "_pruned_bias")
    for node in group.ties:  # the per-channel constants a tie holds (a depthwise layer's weights and bias)
        for k, data in get_op(node.op).prune_tie(node, graph, ch, keep):
            _replace(graph, node, k, data, node.name + ("_pruned_weights" if k == 1 else "_pruned_bias"))
    for t in group.tensors:
        s = list(graph.tensors[t].shape)
        s[-1] = s[-1] // ch * len(keep)  # a flatten holds positions x channels
        graph.tensors[t].shape = tuple(s)
    return gone


def asked_groups(graph: Graph, fraction: dict[str, float]):
    """Yields (first producer, group, fraction) for each channel group whose producers are all named in `fraction`
    (node name -> fraction > 0), the group taking the smallest fraction among them, in schedule order; found one at
    a time, so a caller may prune each group before the next is looked up."""
    done: set[str] = set()
    for node in list(graph.nodes):
        if fraction.get(node.name, 0.0) <= 0 or node.op not in LAYER_OPS or node.name in done:
            continue
        group = channel_group(graph, node)
        if group is None:
            continue
        done.update(p.name for p in group.producers)
        f = min(fraction.get(p.name, 0.0) for p in group.producers)
        if f > 0:
            yield node, group, f


def prune_channels(graph: Graph, fraction: dict[str, float], kept: dict[str, np.ndarray] | None = None,
                   consumers: set[str] | None = None, choose=None) -> dict[str, int]:
    """Structured pruning of the channel groups whose producers are all named in `fraction` (node name ->
    fraction of output channels); a group takes the smallest fraction among its producers, and a group with a
    producer not named (excluded) is left whole. Returns the channels removed per producer; `kept`, if given,
    receives each pruned producer's (and depthwise tie's) remaining output channel indices and `consumers` the
    names of the layers that lost input channels (what compress/refit.py refits). `choose`: which channels go
    (see prune_group; default: by magnitude)."""
    removed = {}
    kept = {} if kept is None else kept
    consumers = set() if consumers is None else consumers
    for node in layer_nodes(graph):
        if fraction.get(node.name, 0.0) > 0:
            _check_float(graph, node, "--prune-channels")
    for _, group, f in asked_groups(graph, fraction):
        gone = prune_group(graph, group, f, choose)
        if len(gone):
            removed.update({p.name: int(len(gone)) for p in group.producers})
            kept.update({p.name: np.setdiff1d(np.arange(group.channels), gone)
                         for p in group.producers + [t for t in group.ties if t.op in LAYER_OPS]})
            consumers.update(c.name for c in group.consumers)
    graph.remove_unused_tensors()
    verify(graph, "prune_channels", infer=infer_shapes)
    return removed


def eligible_producers(graph: Graph) -> list[str]:
    return [n.name for n in layer_nodes(graph) if channel_group(graph, n) is not None]


__all__ = ["LAYER_OPS", "layer_nodes", "layer_kind", "matches", "lamp_scores", "prune_smallest", "magnitude_prune",
           "ChannelGroup", "channel_group", "group_scores", "prune_group", "asked_groups", "prune_channels",
           "eligible_producers"]
