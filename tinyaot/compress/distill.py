"""End-to-end distillation of a compressed float graph to the dense float model's logits.

Layer-wise reconstruction (compress/reconstruct.py) fits each compressed layer, alone and linearly, to the dense
layer's output; it cannot trade one layer's error against another's through the non-linearities between them,
and it stops far short on block masks (kws_dscnn, 4x4 blocks at --prune 0.5: every allocation and mask variant
measured landed at 54-71 % top-1 against 91 % dense; see compress/pipeline.py) and on removed channels
(ic_resnet8 --prune-channels 0.25: 61 % against 89 %). Here, with the masks fixed, the kept float weights and
biases of every weighted layer are trained jointly, a few hundred steps of Adam on minibatches, to reproduce the
dense float model's logits (mean squared error, each sample's mean over classes removed, relative to the dense
logits' energy) over the calibration inputs and a few deterministic transforms of them (`augmented`: shifted
along the input's spatial axes, `spatial_axes`, whatever the path, and mixed), and, where the caller names them
(`features`), the dense model's intermediate tensors too (each one's mean squared error relative to its energy,
times FEATURE_WEIGHT: compress/pipeline._distill_features after --prune-channels). The
gradients come from the ops themselves (OpSpec.backward_float, in the op files); a graph with an op on the way
to the logits that has none is left as it was, and the returned report says why.

Masks can also be chosen here (`gradual`): the pruned layers go from dense to their sparsity over the first part
of the steps (Zhu & Gupta's cubic schedule), each time removing the groups of their pattern (`Pattern`: blocks of
output channels x row positions, or single weights) with the least mean square weight, so that the training
between two steps moves the weight into the groups that stay (gradual magnitude pruning with distillation).

Everything is float numpy on the NHWC graph after the passes, before quantization; deterministic for a seed. The
training runs with the BLAS library on one thread: OpenBLAS splits a float32 product's sums differently with two
threads than with one (measured here on a 256x1000 @ 1000x64 product), the training amplifies the last-bit
differences, and kws_dscnn `--prune 0.6 --prune-pattern block2x1 --prune-method distill` then compiled to other
weights with OPENBLAS_NUM_THREADS=1 than with 2 (82.00 % against 83.00 % top-1). A compile must not depend on the
machine's thread count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from tinyaot.compress.reconstruct import Pattern, group_ids
from tinyaot.compress.storage import rows
from tinyaot.ir import Graph
from tinyaot.ops.registry import FloatUnsupported, get_op, traits_of

STEPS = 300  # Adam steps
BATCH = 32  # samples per step
LR = 0.03  # Adam's step, relative to each parameter tensor's root mean square (bias: the output's)
BETAS = (0.9, 0.999)
PRUNE_UNTIL = 0.6  # gradual pruning reaches the target at this fraction of the steps
PRUNE_EVERY = 10  # steps between two mask updates while the sparsity rises
SEED = 0
# Measured on kws_dscnn, 4x4 blocks at --prune 0.5 (float top-1, 900 held-out samples, 300 steps): LR 0.01 54.9 %,
# 0.03 67.1 %, 0.1 diverges; a cosine decay after the ramp 62.7 %; the layers' output errors added to the loss 59.1 %;
# LAMP allocation across the layers 68.8 % (one fraction each: 67.1 %)
COSINE = False
LR_SCALES = (1.0, 1 / 3, 1 / 9)  # step sizes tried in turn while a run diverges (ic_resnet8 at LR 0.03, 4x4 blocks)
DIVERGED = 1.0  # a minibatch's logits error (relative to the dense logits' energy) that stops a run: constant
# logits score 1
CHECK_EVERY = 20  # steps between two measures of the calibration samples' logits error (the best weights are kept)
ALLOC = "lamp"
# weight of each matched feature map's relative error against the logits' (ic_resnet8 --prune-channels 0.25, float,
# held-out logits NSR vs dense float, 300 steps: 1.0 0.159, 3.0 0.157; features off 0.185)
FEATURE_WEIGHT = 1.0


@dataclass
class Target:
    """A layer pruned gradually: its final fraction of weights removed, in groups of `pattern` over its rows
    (compress/storage.rows)."""

    sparsity: float
    pattern: Pattern


def logits_tensor(graph: Graph) -> str:
    """The tensor distillation matches: the input of a final Softmax (the logits), else the first output."""
    out = graph.outputs[0]
    producer = next((n for n in graph.nodes if out in n.outputs), None)
    if producer is not None and get_op(producer.op).logits_input:
        return producer.inputs[0]
    return out


def _feeds(graph: Graph, samples) -> dict[str, np.ndarray]:
    if not isinstance(samples, dict):
        samples = {graph.inputs[0]: samples}
    return {name: np.asarray(samples[name], np.float32).reshape((-1, *graph.tensors[name].shape[1:]))
            for name in graph.inputs}


def _path(graph: Graph, head: str) -> list:
    """The nodes the head depends on, in schedule order."""
    need, keep = {head}, []
    for node in reversed(graph.nodes):
        if any(o in need for o in node.outputs):
            keep.append(node)
            need.update(i for i in node.inputs if i)
    return keep[::-1]


def forward(graph: Graph, nodes: list, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor the nodes compute, in float, for the batch in `feeds`."""
    values = dict(feeds)
    for node in nodes:
        ins = [values.get(i) if i else None for i in node.inputs]
        for name, y in zip(node.outputs, get_op(node.op).evaluate_float(node, graph, ins)):
            values[name] = y
    return values


def backward(graph: Graph, nodes: list, values: dict, grads: dict[str, np.ndarray]) -> dict[str, dict]:
    """{node name: {input index: gradient}} of the constant parameters, from the loss's gradients `grads` at
    some tensors ({name: gradient}), through each op's backward_float."""
    grads = dict(grads)
    params = {}
    for node in reversed(nodes):
        if not any(o in grads for o in node.outputs):
            continue
        outs = [values[o] for o in node.outputs]
        g_out = [grads.pop(o, np.zeros_like(v)) for o, v in zip(node.outputs, outs)]
        ins = [values.get(i) if i else None for i in node.inputs]
        g_in, g_par = get_op(node.op).backward_float(node, graph, ins, outs, g_out)
        for name, g in zip(node.inputs, g_in):
            if g is not None and name and name not in graph.inputs:
                grads[name] = grads[name] + g if name in grads else g
        if g_par:
            params[node.name] = g_par
    return params


def augmented(feeds: dict[str, np.ndarray], copies: int, seed: int,
              axes: tuple[int, int] | None) -> dict[str, np.ndarray]:
    """The samples and `copies` - 1 transformed copies of each: shifted by up to 2 positions along each of two
    axes of a sample (`axes`, counted in a sample without its batch axis, `spatial_axes` of the graph; None: its
    last two; a size-1 axis is never shifted; zeros come in), and mixed with another sample (a random convex
    combination, weight of the other <= 0.3: mixup-style inputs between the calibration samples, domain-free).
    Deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    out = {k: [v] for k, v in feeds.items()}
    n = len(next(iter(feeds.values())))
    for _ in range(copies - 1):
        other = rng.permutation(n)
        lam = rng.uniform(0.0, 0.3, n)
        shifts = rng.integers(-2, 3, (n, 2))
        for k, v in feeds.items():
            mixed = v * (1 - lam.reshape((-1,) + (1,) * (v.ndim - 1))) + \
                v[other] * lam.reshape((-1,) + (1,) * (v.ndim - 1))
            if v.ndim >= 3:
                mixed = np.stack([_shift(m, s, axes) for m, s in zip(mixed, shifts)])
            out[k].append(mixed.astype(v.dtype))
    return {k: np.concatenate(v) for k, v in out.items()}


def spatial_axes(graph: Graph) -> tuple[int, int] | None:
    """The axes of a sample of the first input (no batch axis) that its first sliding-window layer slides over,
    for `augmented`'s shifts: H and W of an NHWC input the layer reads as it is (through shape-keeping reshapes
    only); None (its last two axes, H and W of NCHW) when anything else comes first (a Transpose to NHWC)."""
    name = graph.inputs[0]
    shape = tuple(graph.tensors[name].shape)
    t = name
    while True:
        users = graph.consumers(t)
        if len(users) != 1:
            return None
        node = users[0]
        if traits_of(node.op).sliding_window:
            return (0, 1) if len(shape) == 4 else None  # [N, H, W, C]: a sample's H and W
        if not traits_of(node.op).reshape or tuple(graph.tensors[node.outputs[0]].shape) != shape:
            return None
        t = node.outputs[0]


def _shift(x: np.ndarray, shift, axes: tuple[int, int] | None = None) -> np.ndarray:
    out = np.zeros_like(x)
    src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for ax, s in zip((x.ndim - 2, x.ndim - 1) if axes is None else axes, shift):
        size = x.shape[ax]
        s = int(np.clip(s, -(size - 1), size - 1)) if size > 1 else 0
        src[ax] = slice(max(0, -s), size - max(0, s))
        dst[ax] = slice(max(0, s), size - max(0, -s))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _group_keep(w: np.ndarray, depthwise: bool, sparsity: float, pattern: Pattern) -> np.ndarray:
    """Keep mask (IR layout) removing the round(sparsity x weights / group size) groups of least mean square."""
    r = rows(w, depthwise)
    out, n = r.shape
    ids = group_ids(out, n, pattern)
    size = np.bincount(ids.reshape(-1))
    score = np.bincount(ids.reshape(-1), weights=(r ** 2).reshape(-1)) / np.maximum(size, 1)
    order = np.argsort(score, kind="stable")
    removed = np.cumsum(size[order])
    count = int(np.sum(removed <= sparsity * r.size + 1e-9))
    gone = np.zeros(score.size, bool)
    gone[order[:count]] = True
    keep = ~gone[ids]
    return np.ascontiguousarray(keep.T).reshape(w.shape) if depthwise else keep.reshape(w.shape)


def distill(graph: Graph, teacher: Graph, samples, targets: dict[str, Target] | None = None,
            steps: int = STEPS, seed: int = SEED, copies: int = 4, keep: dict[str, np.ndarray] | None = None,
            features: dict[str, tuple[str, np.ndarray | None]] | None = None) -> dict:
    """See `_distill`; with the BLAS library held to one thread, so the result does not depend on the machine's
    thread count (module docstring)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _distill(graph, teacher, samples, targets, steps, seed, copies, keep, features or {})


def _distill(graph: Graph, teacher: Graph, samples, targets: dict[str, Target] | None, steps: int, seed: int,
             copies: int, keep: dict[str, np.ndarray] | None, features: dict) -> dict:
    """Train the weighted layers' float weights and biases of `graph` (in place) so that its logits match those of
    `teacher` (the dense float graph) over the calibration `samples` ({input name: [N, ...]} or the first input's
    array) and their `augmented` copies. Zeros already in a layer's weights stay zero (its mask), or for a layer
    in `keep` ({name: bool mask in its weights' layout}) exactly the weights that mask drops; layers in `targets`
    are pruned gradually to their sparsity. Returns {"steps", "loss_before", "loss_after" (relative
    logits error on the unaugmented samples), "masks": {layer: keep mask}} or {"skipped": reason} when an op on the
    way has no float evaluation or backward pass (the graph is then unchanged)."""
    targets = targets or {}
    head, t_head = logits_tensor(graph), logits_tensor(teacher)
    nodes, t_nodes = _path(graph, head), _path(teacher, t_head)
    layers = [n for n in nodes if traits_of(n.op).weighted_layer and len(n.inputs) > 1
              and graph.tensors[n.inputs[1]].is_const and graph.tensors[n.inputs[1]].quant is None]
    base = _feeds(graph, samples)
    # every path (--prune masks given or chosen here, --prune-channels) shifts the same axes: the input's spatial
    # ones (the last two axes of an NHWC sample are W and C: shifting them mixed ic_resnet8's RGB channels)
    pool = augmented(base, copies, seed, spatial_axes(graph))
    count = len(next(iter(pool.values())))
    saved = {n.name: [graph.tensors[i].data for i in n.inputs[1:3] if i] for n in layers}
    try:
        t_logits, t_feats = _targets(teacher, t_nodes, t_head, _feeds(teacher, pool), features)
        energy = float(np.mean(t_logits ** 2)) or 1.0
        f_energy = {f: float(np.mean(t ** 2)) or 1.0 for f, t in t_feats.items()}
        # parameters: float32 copies trained here (the ops compute in the activations' precision, and float32 halves
        # the time), written back at the end
        for scale in LR_SCALES:
            for n in layers:  # every attempt starts from the weights given
                for i, data in zip([i for i in n.inputs[1:3] if i], saved[n.name]):
                    graph.tensors[i].data = data
            params, masks, lrs, state = {}, {}, {}, {}
            first = forward(graph, nodes, {k: v[:BATCH] for k, v in pool.items()})
            for n in layers:
                w = np.array(graph.tensors[n.inputs[1]].data, np.float32)
                masks[n.name] = w != 0 if keep is None or n.name not in keep else np.asarray(keep[n.name], bool)
                w *= masks[n.name]
                params[(n.name, 1)] = w
                lrs[(n.name, 1)] = scale * LR * float(np.sqrt(np.mean(w ** 2)) or 1.0)
                if len(n.inputs) > 2 and n.inputs[2]:
                    params[(n.name, 2)] = np.array(graph.tensors[n.inputs[2]].data, np.float32)
                    lrs[(n.name, 2)] = scale * LR * float(np.std(first[n.outputs[0]]) or 1.0)
            for key, p in params.items():
                state[key] = (np.zeros_like(p), np.zeros_like(p))
            _set(graph, layers, params)
            t_base = t_logits[:len(next(iter(base.values())))]
            before = _loss(graph, nodes, head, base, t_base, energy)
            rng = np.random.default_rng(seed)
            order = rng.permutation(count)
            at = 0
            ramp = min(max(1, int(PRUNE_UNTIL * steps)), steps) if targets else 0
            best = (np.inf, None)
            for step in range(steps + 1):
                if targets and step <= ramp and (step % PRUNE_EVERY == 0 or step == ramp):
                    frac = 1.0 - (1.0 - step / ramp) ** 3 if ramp else 1.0
                    _update_masks(graph, layers, params, masks, targets, frac)
                if step >= ramp and ((step - ramp) % CHECK_EVERY == 0 or step == steps):
                    # once the masks are final: the weights with the least logits error on the calibration samples
                    # are what is kept (a step size too large for a model then costs steps, not the result)
                    loss = _loss(graph, nodes, head, base, t_base, energy)
                    if loss < best[0]:
                        best = (loss, {k: p.copy() for k, p in params.items()})
                if step == steps:
                    break
                if at + BATCH > count:
                    order, at = rng.permutation(count), 0
                idx = np.sort(order[at:at + BATCH])
                at += BATCH
                values = forward(graph, nodes, {k: v[idx] for k, v in pool.items()})
                y = values[head].reshape(len(idx), -1)
                diff = _centred(y) - t_logits[idx]
                if float(np.mean(diff ** 2)) > DIVERGED * energy:
                    break  # worse than constant logits: diverged, start again with a smaller step
                # d/dy of mean((centred(y) - t)^2) / energy; centring is a projection, so it passes the gradient
                g = _centred(2.0 * diff / (diff.size * energy)).reshape(values[head].shape)
                at_grads = {head: g}
                for f, t in t_feats.items():  # FEATURE_WEIGHT x mean((y_f - t_f)^2) / energy_f per feature
                    df = values[f] - t[idx]
                    at_grads[f] = FEATURE_WEIGHT * 2.0 * df / (df.size * f_energy[f])
                grads = backward(graph, nodes, values, at_grads)
                t = step + 1
                # the step size: constant while the masks change, then a cosine decay to 0 over the remaining steps
                decay = 1.0 if not COSINE or step < ramp else \
                    0.5 * (1 + np.cos(np.pi * (step - ramp) / max(1, steps - ramp)))
                for key, p in params.items():
                    gr = grads.get(key[0], {}).get(key[1])
                    if gr is None:
                        continue
                    m, v = state[key]
                    m *= BETAS[0]
                    m += (1 - BETAS[0]) * gr
                    v *= BETAS[1]
                    v += (1 - BETAS[1]) * gr * gr
                    mh = m / (1 - BETAS[0] ** t)
                    vh = v / (1 - BETAS[1] ** t)
                    p -= decay * lrs[key] * mh / (np.sqrt(vh) + 1e-12)
                    if key[1] == 1:
                        p *= masks[key[0]]
            if best[1] is not None and step == steps:
                break
        after, params = best
        if params is None:
            raise FloatUnsupported(f"the distillation diverged at every step size tried ({LR} x {LR_SCALES})")
        _set(graph, layers, params, np.float32)
    except FloatUnsupported as e:
        for n in layers:
            for i, data in zip([i for i in n.inputs[1:3] if i], saved[n.name]):
                graph.tensors[i].data = data
        return {"skipped": str(e)}
    return {"steps": steps, "step_size": LR * scale, "loss_before": before, "loss_after": after,
            "masks": {n.name: masks[n.name] for n in layers}}


def _update_masks(graph, layers, params, masks, targets, frac):
    if ALLOC == "lamp":
        shared = {}
        for n in layers:
            if n.name in targets:
                shared.setdefault((targets[n.name].sparsity, targets[n.name].pattern), []).append(n)
        for (sparsity, pattern), ns in shared.items():
            keeps = _lamp_keep([params[(n.name, 1)] for n in ns], [bool(n.attrs.get("depthwise")) for n in ns],
                               sparsity * frac, pattern)
            for n, keep in zip(ns, keeps):
                masks[n.name] = keep
                params[(n.name, 1)] *= keep
        return
    for n in layers:
        if n.name in targets:
            tg = targets[n.name]
            w = params[(n.name, 1)]
            keep = _group_keep(w, bool(n.attrs.get("depthwise")), tg.sparsity * frac, tg.pattern)
            masks[n.name] = keep
            w *= keep


def _lamp_keep(ws, depthwise, sparsity, pattern):
    """Keep masks removing sparsity x all the layers' weights together, groups ranked by LAMP score of their
    mean square within their layer."""
    scores, sizes, idss = [], [], []
    for w, dw in zip(ws, depthwise):
        r = rows(w, dw)
        ids = group_ids(*r.shape, pattern)
        size = np.bincount(ids.reshape(-1))
        ms = np.bincount(ids.reshape(-1), weights=(r ** 2).reshape(-1)) / np.maximum(size, 1)
        order = np.argsort(ms, kind="stable")
        suffix = np.cumsum((ms * size)[order][::-1])[::-1]
        sc = np.empty_like(ms)
        sc[order] = ms[order] / np.maximum(suffix, 1e-300)
        scores.append(sc)
        sizes.append(size)
        idss.append(ids)
    flat, size = np.concatenate(scores), np.concatenate(sizes)
    order = np.argsort(flat, kind="stable")
    count = int(np.sum(np.cumsum(size[order]) <= sparsity * size.sum() + 1e-9))
    gone = np.zeros(flat.size, bool)
    gone[order[:count]] = True
    out, pos = [], 0
    for w, dw, ids, sc in zip(ws, depthwise, idss, scores):
        keep = ~gone[pos:pos + sc.size][ids]
        pos += sc.size
        out.append(np.ascontiguousarray(keep.T).reshape(w.shape) if dw else keep.reshape(w.shape))
    return out


def _set(graph: Graph, layers, params, dtype=None) -> None:
    """The parameters into the graph: the training arrays themselves while training, float32 copies at the end."""
    for n in layers:
        for k in (1, 2):
            if (n.name, k) in params:
                p = params[(n.name, k)]
                graph.tensors[n.inputs[k]].data = p if dtype is None else p.astype(dtype)


def _centred(y: np.ndarray) -> np.ndarray:
    y = y.reshape(len(y), -1)
    return y - y.mean(axis=1, keepdims=True)


def _targets(graph, nodes, head, feeds, features) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The centred logits and the `features` ({student tensor: (teacher tensor, channels or None)}) of `graph`
    for every sample of `feeds`, BATCH samples at a time."""
    count = len(next(iter(feeds.values())))
    logits, feats = [], {f: [] for f in features}
    for s in range(0, count, BATCH):
        values = forward(graph, nodes, {k: v[s:s + BATCH] for k, v in feeds.items()})
        logits.append(_centred(values[head]))
        for f, (t, ch) in features.items():
            feats[f].append((values[t] if ch is None else values[t][..., ch]).astype(np.float32))
    return np.concatenate(logits), {f: np.concatenate(v) for f, v in feats.items()}


def _logits(graph, nodes, head, feeds) -> np.ndarray:
    """The centred logits for every sample of `feeds`, BATCH samples at a time (bounds the memory)."""
    count = len(next(iter(feeds.values())))
    return np.concatenate([_centred(forward(graph, nodes, {k: v[s:s + BATCH] for k, v in feeds.items()})[head])
                           for s in range(0, count, BATCH)])


def _loss(graph, nodes, head, feeds, t_logits, energy) -> float:
    return float(np.mean((_logits(graph, nodes, head, feeds) - t_logits) ** 2) / energy)


__all__ = ["Target", "distill", "spatial_axes", "forward", "backward", "augmented", "logits_tensor", "STEPS"]
