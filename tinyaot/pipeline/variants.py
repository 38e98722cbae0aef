"""Choosing each layer's kernel variant, before the memory plan (a variant's scratch and in-place offset change it).

Every op lists the variants valid for a layer on a target (`OpSpec.variants`, "generic" always among them). The
choice, written to `node.attrs["variant"]`:
- `target.optimize == "size"`: "generic" everywhere (the generic kernels are shared by every layer, so the fewest
  kernel bytes);
- a layer named in `choices` (from `--tune` or a `--tuning-log`) with a variant still offered: that one;
- otherwise the lowest `cost` (None counts as unknown, never preferred over a known cost; ties and all-unknown take
  the first listed);
- and either only where the arena allows: a variant needing more scratch than the layer's generic kernel is taken
  only if the planned arena does not grow by it (ops list every variant valid for a layer; what the arena can
  afford is decided here, so `--tune` and the speed benchmark's check measure every variant).
With the GENERIC target no op offers anything but "generic", so the generated C is today's, byte for byte.
"""
from __future__ import annotations

from tinyaot.core.target import Target
from tinyaot.errors import InternalError
from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import GENERIC_VARIANT, Variant, get_op
from tinyaot.plan import plan
from tinyaot.plan.liveness import graph_buffers


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
    return preference(listed)[0]


def choose_variants(graph: Graph, target: Target, choices: dict[str, str] | None = None) -> dict[str, str]:
    """Set `node.attrs["variant"]` on every node; returns {node name: variant}.

    A variant that needs more scratch than the layer's generic kernel (an im2col column where the generic kernel
    reads its windows in place) is taken only where the planned arena stays as it is with each such layer on its
    best variant without that scratch: a faster kernel is not bought with RAM the schedule did not need."""
    chosen: dict[str, str] = {}
    growing: list[tuple[Node, str]] = []  # (layer, preferred variant needing more scratch than its fallback)
    for node in graph.nodes:
        if target.optimize == "size":
            pick = GENERIC_VARIANT
        else:
            listed = candidates(node, graph, target)
            wanted = (choices or {}).get(node.name)
            # a choice for a variant no longer offered (a tuning log from another version) falls back to the
            # cost model rather than failing the deploy
            order = preference(listed, wanted)
            pick = order[0]
            if len(order) > 1:
                base = _scratch(node, graph, GENERIC_VARIANT)
                fallback = next(v for v in order if _scratch(node, graph, v) <= base)
                if fallback != pick:
                    growing.append((node, pick))
                    pick = fallback
        node.attrs["variant"] = pick
        chosen[node.name] = pick
    if growing:
        cap = plan(graph_buffers(graph)).arena_bytes
        for node, pick in growing:
            before = node.attrs["variant"]
            node.attrs["variant"] = pick
            if plan(graph_buffers(graph)).arena_bytes > cap:
                node.attrs["variant"] = before
            chosen[node.name] = node.attrs["variant"]
    return chosen


def preference(listed: tuple[Variant, ...], wanted: str | None = None) -> list[str]:
    """The variants in the order they are preferred: `wanted` (if offered), then by known cost, lowest first
    (ties and unknown costs in the order listed, unknown after known), so the first is cost_choice's pick."""
    names = [v.name for v in listed]
    known = sorted((v for v in listed if v.cost is not None), key=lambda v: (v.cost, names.index(v.name)))
    order = [v.name for v in known] + [v.name for v in listed if v.cost is None]
    if wanted in names:
        order = [wanted] + [n for n in order if n != wanted]
    return order


def _scratch(node: Node, graph: Graph, variant: str) -> int:
    """The layer's arena scratch with `variant` chosen (the op's scratch_bytes follows node.attrs["variant"])."""
    saved = node.attrs.get("variant")
    node.attrs["variant"] = variant
    try:
        return int(get_op(node.op).scratch_bytes(node, graph))
    finally:
        if saved is None:
            node.attrs.pop("variant", None)
        else:
            node.attrs["variant"] = saved
