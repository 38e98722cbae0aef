"""How --prune-channels spreads its fraction over the channel groups (compress/prune.py): by measured sensitivity.

`--prune-channels F` asks for the speed of removing floor(F x C) channels from every eligible group (C its channels):
the budget is the multiply-accumulates (every op's macs()) that this uniform removal saves, and any allocation of
levels to the groups that saves at least as many meets it. The groups of a model differ a lot in what a channel
costs and what losing it costs: in ic_resnet8 a channel of the first stage's residual chain carries 404k MACs, one of
the last stage's 39k, and the last stage's groups feed the classifier. Each group is measured alone at the levels
k/8 of its channels up to MAX_SHARE x F (and F itself): pruned by the chooser prune_step uses, its consumers and every
later layer refitted (compress/refit.py) on the calibration samples of one fold, and the logits' noise-to-signal
ratio against the dense float model taken on the fold's held-out share, summed over FOLDS folds (a refit looks better
on the samples it was fitted to than it is, most for a layer after global pooling; one 70/30 split picked
allocations 4 points of float top-1 worse on ic_resnet8 than two folds). The allocation with the least sum of the
groups' ratios that meets the budget is used: every allocation is tried when there are at most SEARCH_LIMIT, else
one level is added at a time to the group with the least ratio per MAC saved; the uniform allocation is always a
candidate. An allocation's MACs are counted exactly: each op's macs() times the kept fraction of the group its output
channels belong to and, for a layer reading another group (or the same one, x + conv(x)), of its input's group.

Measured at --prune-channels 0.25 (held-out splits of ci/datasets.py; top-1 of the int8 model on host C):
ic_resnet8 uniform 61 %, allocated 74 % (the first stage's chain 1/8 and its inner conv 1/2, the second stage's 1/8
and 1/4, the last stage's chain dense and its inner conv 3/8; MACs 0.569 of dense either way; float logits NSR on
ic01 images 100-199 0.26 -> 0.20 with the refits below both); kws_dscnn 86.44 % -> 88.89 %. With the choice damped
(compress/pipeline.CHANNEL_DAMP) ic_resnet8 72 %, kws_dscnn 88.67 %: the same within those splits' noise.
"""
from __future__ import annotations

import itertools

import numpy as np

from tinyaot.compress.distill import _feeds, _path, logits_tensor
from tinyaot.compress.prune import ChannelGroup, channel_group, prune_group
from tinyaot.compress.refit import dense_values, refit_consumers, refittable_after, run_node, snapshot
from tinyaot.ir import Graph
from tinyaot.ops.registry import FloatUnsupported, get_op

LEVELS = tuple(k / 8 for k in range(1, 7))  # fractions of a group's channels measured (with the asked one)
MAX_SHARE = 2.0  # no group loses more than this many times the asked fraction (the measures are noisy: 30 samples)
FOLDS = 2  # the calibration samples are measured in FOLDS shares, each held out from the refits once
SEARCH_LIMIT = 200_000  # allocations tried one by one at most; beyond, greedy


def _folds(samples, graph: Graph) -> list[tuple[dict, dict]]:
    """(fit, held) feeds of each fold: fold i holds out the i-th of FOLDS contiguous shares of the samples and fits
    on the others, so every sample is held out once."""
    feeds = _feeds(graph, samples)
    n = len(next(iter(feeds.values())))
    cuts = [int(round(i * n / FOLDS)) for i in range(FOLDS + 1)]
    out = []
    for a, b in zip(cuts, cuts[1:]):
        fit = {k: np.concatenate([v[:a], v[b:]]) for k, v in feeds.items()}
        out.append((fit, {k: v[a:b] for k, v in feeds.items()}))
    return out


def _centred(logits: np.ndarray) -> np.ndarray:
    """[N, classes] with each sample's mean over classes removed (a shift softmax ignores)."""
    out = np.asarray(logits, np.float64).reshape(len(logits), -1)
    return out - out.mean(axis=1, keepdims=True)


def nsr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / max(float(np.sum(want ** 2)), np.finfo(np.float64).tiny))


def removed(channels: int, fraction: float) -> int:
    """Channels prune_group removes from a group of `channels` at `fraction`."""
    return min(int(np.floor(fraction * channels + 1e-9)), channels - 1)


def _mac_terms(graph: Graph, groups: list[ChannelGroup]) -> list[tuple[int, int | None, int | None]]:
    """(macs, group of its output channels, group of its input channels) per op with MACs; a tie of a group (a
    depthwise layer, a pool) scales once with it."""
    member = {}
    for gi, g in enumerate(groups):
        for t in g.tensors:
            member[t] = gi
    terms = []
    for node in graph.nodes:
        m = int(get_op(node.op).macs(node, graph))
        if m <= 0:
            continue
        out_g = member.get(node.outputs[0]) if node.outputs else None
        in_g = member.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
        if any(node is t for g in groups for t in g.ties):
            in_g = None
        terms.append((m, out_g, in_g))
    return terms


def count_macs(terms, kept: np.ndarray) -> np.ndarray:
    """MACs of allocations: `kept` [allocations, groups] = kept fraction of each group's channels."""
    total = np.zeros(len(kept))
    for m, out_g, in_g in terms:
        f = np.full(len(kept), float(m))
        if out_g is not None:
            f *= kept[:, out_g]
        if in_g is not None:
            f *= kept[:, in_g]
        total += f
    return total


def _measure(graph: Graph, groups: list[ChannelGroup], levels: list[float], samples, chooser) -> np.ndarray:
    """cost[group, level]: the held-out logits NSR with that group alone pruned to that level (level 0: 0), summed
    over the folds. The dense activations of each fold are computed once (refit.dense_values)."""
    cost = np.zeros((len(groups), len(levels)))
    head = logits_tensor(graph)
    for fit, held in _folds(samples, graph):
        choose = chooser(fit)
        path = _path(graph, head)
        dense_fit, dense_held = dense_values(graph, fit, path), dense_values(graph, held, path)
        want = _centred(dense_held[head])
        for gi, group in enumerate(groups):
            done = {}
            for li, level in enumerate(levels):
                count = removed(group.channels, level)
                if count <= 0:
                    continue
                if count not in done:
                    done[count] = nsr(_pruned_logits(graph, group, level, fit, choose, dense_fit, dense_held), want)
                cost[gi, li] += done[count]
    return cost


def _pruned_logits(graph: Graph, group: ChannelGroup, level: float, fit: dict, choose, dense_fit: dict,
                   dense_held: dict) -> np.ndarray:
    """The held-out logits of `graph` with `group` pruned to `level` and its consumers and every later layer
    refitted on `fit`; the layers before the group's first producer keep the dense activations."""
    after = snapshot(graph)
    g = channel_group(after, next(n for n in after.nodes if n.name == group.producers[0].name))
    gone = prune_group(after, g, level, choose)
    kept = {p.name: np.setdiff1d(np.arange(group.channels), gone) for p in g.producers}
    after.remove_unused_tensors()
    head = logits_tensor(after)
    path = _path(after, head)
    layers = refittable_after(after, {c.name for c in g.consumers}) & {n.name for n in path}
    report = refit_consumers(graph, after, fit, layers, kept, dense_fit)
    if "skipped" in report:
        raise FloatUnsupported(report["skipped"])
    first = min(k for k, n in enumerate(after.nodes) if n.name in kept)
    values = dict(dense_held)
    for node in path:
        if after.nodes.index(node) >= first:
            run_node(after, node, values)
    return _centred(values[head])


def _search(cost: np.ndarray, kept: np.ndarray, terms, budget: float) -> np.ndarray:
    """Level index per group minimising the summed cost with count_macs <= budget (kept[group, level])."""
    groups, levels = cost.shape
    if levels ** groups <= SEARCH_LIMIT:
        combos = np.array(list(itertools.product(range(levels), repeat=groups)), np.int64)
        k = kept[np.arange(groups)[None, :], combos]
        ok = count_macs(terms, k) <= budget + 0.5
        total = cost[np.arange(groups)[None, :], combos].sum(axis=1)
        total[~ok] = np.inf
        return combos[int(np.argmin(total))]  # first of equals: the lower levels of the earlier groups
    pick = np.zeros(groups, np.int64)
    macs = count_macs(terms, kept[np.arange(groups), pick][None])[0]
    while macs > budget + 0.5:
        best, best_score = None, np.inf
        for gi in range(groups):
            if pick[gi] + 1 >= levels:
                continue
            trial = pick.copy()
            trial[gi] += 1
            m = count_macs(terms, kept[np.arange(groups), trial][None])[0]
            saved = macs - m
            if saved <= 0:
                continue
            score = (cost[gi, trial[gi]] - cost[gi, pick[gi]]) / saved
            if score < best_score:
                best, best_score = trial, score
        if best is None:
            break
        pick = best
        macs = count_macs(terms, kept[np.arange(groups), pick][None])[0]
    return pick


def allocate_channels(graph: Graph, producers: list[str], fraction: float, samples, chooser) -> dict:
    """The fraction of channels each group of `producers` (one name per group) loses under --prune-channels
    `fraction`, by measured sensitivity within the uniform removal's MACs (module docstring); `chooser(samples)`
    gives prune_group's `choose` from calibration samples (each fold's fitting share only). Returns {"fractions":
    {producer: fraction, every producer of each group}, "macs": [dense, uniform, allocated], "cost": [uniform,
    allocated] summed held-out NSRs, "levels", "measured": {producer: NSR per level}}, or {"skipped": reason} (the
    caller then removes `fraction` everywhere)."""
    groups = [channel_group(graph, next(n for n in graph.nodes if n.name == p)) for p in producers]
    if len(groups) < 2:
        return {"skipped": "fewer than two channel groups"}
    n = len(next(iter(_feeds(graph, samples).values())))
    if n < 2 * FOLDS:
        return {"skipped": f"{n} calibration samples: too few to hold some out"}
    levels = [0.0] + sorted({f for f in LEVELS if f <= MAX_SHARE * fraction + 1e-9} | {fraction})
    kept = np.array([[(g.channels - removed(g.channels, f)) / g.channels for f in levels] for g in groups])
    terms = _mac_terms(graph, groups)
    uniform = np.array([levels.index(fraction)] * len(groups))
    dense = count_macs(terms, np.ones((1, len(groups))))[0]
    budget = count_macs(terms, kept[np.arange(len(groups)), uniform][None])[0]
    try:
        cost = _measure(graph, groups, levels, samples, chooser)
    except FloatUnsupported as e:
        return {"skipped": str(e)}
    pick = _search(cost, kept, terms, budget)
    rows = np.arange(len(groups))
    if cost[rows, pick].sum() > cost[rows, uniform].sum():
        pick = uniform
    return {"fractions": {p.name: levels[k] for g, k in zip(groups, pick) for p in g.producers},
            "macs": [int(dense), int(budget), int(count_macs(terms, kept[rows, pick][None])[0])],
            "cost": [float(cost[rows, uniform].sum()), float(cost[rows, pick].sum())],
            "levels": levels, "measured": {p: [round(float(c), 5) for c in cost[gi]] for gi, p in enumerate(producers)}}


__all__ = ["allocate_channels", "count_macs", "nsr", "removed", "LEVELS", "FOLDS", "SEARCH_LIMIT"]
