"""The schedule that meets the arena budget: layer by layer when it fits, else the fastest patch stage that does.

Budget: `--arena-budget BYTES`, else the board's RAM minus its stack (pipeline/compile.check_fits). A model whose
layer-by-layer plan fits keeps it (no patch stage, the same code and instructions as without a budget). Otherwise
every patch stage (plan/patch.py: a split point after which one tensor crosses, and a number of row stripes) is
considered: its arena's lower bound (the largest bytes live at one step) is computed for all of them, its
instructions estimated (each layer's cost-model estimate scaled by the rows it computes over all stripes, halo
recomputation included, plus a call's set-up per extra call), and the stages whose bound fits are planned in order of
estimated instructions until one's planned arena fits: the fastest schedule found that fits. When none fits, the
error names the smallest arena found and by how much it misses.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tinyaot.core.target import Target
from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph
from tinyaot.ops.registry import GENERIC_VARIANT, get_op, variant_of
from tinyaot.plan import Plan, lower_bound, plan
from tinyaot.plan.patch import (PatchStage, band_bytes, make_stage, schedule_buffers, split_points, stage_macs,
                                step_of, tile)

from .variants import candidates, preference

# Instructions one more call of a layer costs beyond its work (parameter structs, kernel entry and set-up, the
# partial blocks at the band's edges): a rough figure for ranking stages, not a measurement.
PER_CALL = 300
# Stages planned exactly (in order of estimated instructions) before giving up on the budget.
MAX_PLANNED = 16


@dataclass
class Fit:
    """The chosen schedule: `stage` (None: layer by layer), the planner's buffers and step labels, the plan and the
    schedule's lower bound, and the estimated instructions relative to layer by layer."""

    stage: PatchStage | None
    buffers: list
    labels: list[str]
    plan: Plan
    lower_bound: int
    peak_step: int | None
    peak_names: tuple[str, ...]
    estimate: float = 0.0  # estimated extra instructions over layer by layer


def layer_cost(node, graph: Graph, target: Target) -> float:
    """The cost model's estimate of the layer's instructions with its chosen variant; where it has none, a rough
    2 per MAC and 2 per output value."""
    for v in candidates(node, graph, target) if target.optimize != "size" else ():
        if v.name == variant_of(node) and v.cost is not None:
            return float(v.cost)
    out = sum(graph.tensors[o].size for o in node.outputs if o)
    return 2.0 * get_op(node.op).macs(node, graph) + 2.0 * out


def estimate(graph: Graph, stage: PatchStage, costs: list[float]) -> float:
    """Extra instructions of running `stage` against layer by layer: each stage layer's cost scaled by the rows it
    computes over all stripes, PER_CALL per extra call, and the input's copy (a word per 4 bytes)."""
    extra = 0.0
    for j in range(stage.nodes):
        out = graph.nodes[j].outputs[0]
        h = graph.tensors[out].shape[1]
        rows = sum(r[out][1] - r[out][0] for r in stage.rows)
        extra += costs[j] * (rows - h) / h + PER_CALL * (stage.stripes - 1)
    return extra


def _stage_bound(graph: Graph, stage: PatchStage, scratch: dict[int, int], rest_bound: int) -> int:
    """The schedule's lower bound, quickly: the stage's bands (no aliases among them) swept step by step, with the
    stage output live from its first band, against the rest of the graph's own bound (`rest_bound`)."""
    k, n = stage.nodes, stage.stripes
    x = graph.inputs[0]
    live = [0] * (n * k + 1)
    for s in range(n):
        last: dict[str, int] = {x: 0}
        first: dict[str, int] = {x: 0}
        root: dict[str, str] = {}  # an alias's band is its input's bytes
        for j in range(k):
            node = graph.nodes[j]
            for i in node.inputs:
                if root.get(i, i) in last:
                    last[root.get(i, i)] = j
            if scratch.get(j):
                live[step_of(stage, s, j)] += scratch[j]
            if get_op(node.op).is_alias(node, graph):
                root[node.outputs[0]] = root.get(node.inputs[0], node.inputs[0])
            elif node.outputs[0] != stage.output:
                first[node.outputs[0]] = last[node.outputs[0]] = j
        for name in first:
            size = band_bytes(graph, stage, s, name)
            for j in range(first[name], last[name] + 1):
                live[step_of(stage, s, j)] += size
    out = graph.tensors[stage.output].nbytes
    peak = max(v + (out if t >= k - 1 else 0) for t, v in enumerate(live[:-1]))
    return max(peak, rest_bound)


def _rest_bound(graph: Graph, k: int) -> int:
    """The lower bound of the layers after a split at k (one stripe: the stage's bands do not matter after it)."""
    stage = make_stage(graph, k, 1)
    buffers, _ = schedule_buffers(graph, stage, scratch={})
    rest = [replace(b, first=max(b.first, k)) for b in buffers if b.last >= k]
    return lower_bound(rest).bytes if rest else 0


def _valid_variants(graph: Graph, stage: PatchStage, target: Target) -> None:
    """Keep each stage layer on a variant its kernel accepts for every band (a variant listed for the whole layer
    may not be for a band's shape): the first in its preference order that every band lists."""
    if target.optimize == "size":
        return
    for j in range(stage.nodes):
        node = graph.nodes[j]
        chosen = variant_of(node)
        offered = [{v.name for v in candidates(tile(graph, stage, s, j).node, tile(graph, stage, s, j).graph,
                                               target)} for s in range(stage.stripes)]
        if all(chosen in o for o in offered):
            continue
        for name in preference(candidates(node, graph, target)):
            if all(name in o for o in offered):
                node.attrs["variant"] = name
                break
        else:
            node.attrs["variant"] = GENERIC_VARIANT


def exact(graph: Graph, stage: PatchStage | None) -> Fit:
    """Plan `stage` (None: layer by layer) exactly: the bands' own scratch, every heuristic of the planner."""
    buffers, labels = schedule_buffers(graph, stage)
    lb = lower_bound(buffers)
    return Fit(stage, buffers, labels, plan(buffers), lb.bytes, lb.step, lb.names)


MISS = ("no schedule fits the arena budget of {budget} B: the smallest found ({how}) needs an arena of {arena} B, "
        "{over} bytes over")


def fit_budget(graph: Graph, target: Target, budget: int | None, layer_by_layer: Fit, miss: str = MISS) -> Fit:
    """The schedule for `budget` bytes of arena (None: no budget): `layer_by_layer` if it fits, else the patch stage
    with the fewest estimated instructions whose planned arena fits. Raises TinyaotError when none does: `miss`
    formatted with the budget, the smallest arena found, by how much it misses, and how it runs."""
    if budget is None or layer_by_layer.plan.arena_bytes <= budget:
        return layer_by_layer
    costs = [layer_cost(n, graph, target) for n in graph.nodes]
    options = []  # (estimated extra instructions, bound, k, stripes)
    for k in split_points(graph):
        rest = _rest_bound(graph, k)
        scratch = {j: int(get_op(graph.nodes[j].op).scratch_bytes(graph.nodes[j], graph)) for j in range(k)}
        h = graph.tensors[graph.nodes[k - 1].outputs[0]].shape[1]
        for n in range(2, h + 1):
            stage = make_stage(graph, k, n)
            if stage is not None:
                options.append((estimate(graph, stage, costs), _stage_bound(graph, stage, scratch, rest), k, n))
    best: Fit | None = None
    smallest: Fit | None = None
    fitting = sorted(o for o in options if o[1] <= budget)
    for est, _, k, n in fitting[:MAX_PLANNED]:
        stage = make_stage(graph, k, n)
        _valid_variants(graph, stage, target)
        f = exact(graph, stage)
        f.estimate = est
        if f.plan.arena_bytes <= budget:
            best = f
            break
        if smallest is None or f.plan.arena_bytes < smallest.plan.arena_bytes:
            smallest = f
    if best is not None:
        return best
    # nothing fits: plan the stages with the smallest bounds, to say by how much the smallest schedule misses
    for _, _, k, n in sorted(options, key=lambda o: (o[1], o[0]))[:4]:
        stage = make_stage(graph, k, n)
        _valid_variants(graph, stage, target)
        f = exact(graph, stage)
        if smallest is None or f.plan.arena_bytes < smallest.plan.arena_bytes:
            smallest = f
    if smallest is None or smallest.plan.arena_bytes >= layer_by_layer.plan.arena_bytes:
        smallest = layer_by_layer
    raise TinyaotError(miss.format(budget=budget, arena=smallest.plan.arena_bytes, how=describe(graph, smallest.stage),
                                   over=smallest.plan.arena_bytes - budget))


def describe(graph: Graph, stage: PatchStage | None) -> str:
    if stage is None:
        return "layer by layer"
    return (f"the first {stage.nodes} layers in {stage.stripes} stripes of "
            f"{graph.tensors[stage.output].shape[1]} rows")


def patch_record(graph: Graph, stage: PatchStage | None, estimate: float, layer_by_layer_arena: int) -> dict | None:
    """report.json's memory.patch: the stage's layers, its stripes (a grid of stripes x 1) and the rows each tensor
    computes per stripe, the MACs the halo recomputes, the estimate the schedule was chosen by."""
    if stage is None:
        return None
    done, once = stage_macs(graph, stage)
    return {"layers": [n.name for n in graph.nodes[:stage.nodes]], "stripes": stage.stripes,
            "grid": [stage.stripes, 1], "output": stage.output,
            "rows": {t: [list(r[t]) for r in stage.rows] for t in stage.rows[0]},
            "macs": done, "macs_layer_by_layer": once, "macs_recomputed": done - once,
            "instructions_estimate_extra": round(estimate), "arena_layer_by_layer_bytes": layer_by_layer_arena}
