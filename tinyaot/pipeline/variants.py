"""Choosing each layer's kernel variant, before the memory plan (a variant's scratch and in-place offset change it).

Every op lists the variants valid for a layer on a target (`OpSpec.variants`, "generic" always among them). The
choice, written to `node.attrs["variant"]`:
- `target.optimize == "size"`: "generic" everywhere (the generic kernels are shared by every layer, so the fewest
  kernel bytes);
- a layer named in `choices` (from `--tune` or a `--tuning-log`) with a variant still offered: that one;
- otherwise the lowest `cost` (None counts as unknown, never preferred over a known cost; ties and all-unknown take
  the first listed).
With the GENERIC target no op offers anything but "generic", so the generated C is today's, byte for byte.
"""
from __future__ import annotations

import math

from tinyaot.core.target import Target
from tinyaot.errors import InternalError
from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import GENERIC_VARIANT, Variant, get_op


def candidates(node: Node, graph: Graph, target: Target) -> tuple[Variant, ...]:
    """The variants `node` may run on `target`, checked: non-empty, unique names, "generic" among them."""
    listed = tuple(get_op(node.op).variants(node, graph, target))
    names = [v.name for v in listed]
    if GENERIC_VARIANT not in names or len(set(names)) != len(names):
        # a bug in the op file, not the user's input: say which op and what it listed
        raise InternalError(f"{node.op} node {node.name!r} lists kernel variants {names}: 'generic' must be "
                           "among them, each once (a tinyaot bug)")
    return listed


def cost_choice(listed: tuple[Variant, ...]) -> str:
    """The cost model's pick: the lowest known cost, the first listed on ties or when no cost is known."""
    best, best_cost = listed[0].name, math.inf if listed[0].cost is None else listed[0].cost
    for v in listed[1:]:
        if v.cost is not None and v.cost < best_cost:
            best, best_cost = v.name, v.cost
    return best


def choose_variants(graph: Graph, target: Target, choices: dict[str, str] | None = None) -> dict[str, str]:
    """Set `node.attrs["variant"]` on every node; returns {node name: variant}."""
    chosen: dict[str, str] = {}
    for node in graph.nodes:
        if target.optimize == "size":
            pick = GENERIC_VARIANT
        else:
            listed = candidates(node, graph, target)
            wanted = (choices or {}).get(node.name)
            # a choice for a variant no longer offered (a tuning log from another version) falls back to the
            # cost model rather than failing the deploy
            pick = wanted if wanted in {v.name for v in listed} else cost_choice(listed)
        node.attrs["variant"] = pick
        chosen[node.name] = pick
    return chosen
