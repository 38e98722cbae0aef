"""From a scheduled int8 graph to planner buffers: each activation's lifetime in steps, scratch buffers, and
aliases (reshapes share their input's bytes; an elementwise op may write over an input read for the last time; a
convolution may write its output partly over its input, trailing the bytes it still has to read).

Step k is the k-th node of `graph.nodes`. The graph input is copied into the arena before step 0 and the
graph output is copied out after the last step, at step len(nodes).
"""
from __future__ import annotations

from dataclasses import replace

from tinyaot.ir import Graph
from tinyaot.ops.registry import get_op

from .planner import Buffer, plan


ALIGNMENT = 4  # the planner's default alignment: an overlap distance must be a multiple of it


def scratch_name(node_name: str) -> str:
    return f"{node_name}::scratch"


def graph_buffers(graph: Graph, inplace: bool = True) -> list[Buffer]:
    buffers, overlaps = _buffers(graph, inplace)
    if not overlaps:
        return buffers
    # An overlapping output merges input and output into one block that lives from the input's first step to the
    # output's last, and is larger than either: at the step that runs the conv it saves memory, at the steps
    # before and after it costs some. So each possible overlap (in schedule order) is kept only if the planned
    # arena shrinks. VWW's first conv is the case that needs it: its output trailing the 27,648-byte input lets
    # the packing reach the liveness bound (55,296 B) where the greedy planners otherwise leave 64,512 B.
    best = plan(buffers).arena_bytes
    for out, src, d in overlaps:
        trial = [replace(b, alias_of=src, offset_in_alias=-d) if b.name == out else b for b in buffers]
        if not _still_safe(trial, out, src):
            continue
        arena = plan(trial).arena_bytes
        if arena < best:
            buffers, best = trial, arena
    return buffers


def _still_safe(buffers: list[Buffer], out: str, src: str) -> bool:
    """An overlap may land on any byte of the input's alias group (an earlier accepted overlap grows the group):
    each member written before this step, other than the input and its exact reshapes, must be dead by the step
    that writes `out`. (Members written at this step or later are `out` and what aliases it.)"""
    by_name = {b.name: b for b in buffers}

    def root(n: str) -> str:
        while by_name[n].alias_of is not None:
            n = by_name[n].alias_of
        return n

    step = by_name[out].first
    r = root(src)
    for b in buffers:
        if b.name == src or b.first >= step or root(b.name) != r:
            continue
        same_bytes = b.alias_of == src and b.offset_in_alias == 0 and b.size == by_name[src].size
        if b.last > step or (b.last == step and not same_bytes):
            return False
    return True


def _buffers(graph: Graph, inplace: bool) -> tuple[list[Buffer], list[tuple[str, str, int]]]:
    """The buffers with exact in-place aliases, and the possible overlapping outputs (output, input, bytes the
    output starts before the input)."""
    steps = len(graph.nodes)
    last: dict[str, int] = {}
    first: dict[str, int] = {name: 0 for name in graph.inputs}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            if i and not graph.tensors[i].is_const:
                last[i] = k
        for o in node.outputs:
            first[o] = k
    for o in graph.outputs:
        last[o] = steps
    buffers: dict[str, Buffer] = {}
    alias: dict[str, str] = {}
    overlaps: list[tuple[str, str, int]] = []
    for k, node in enumerate(graph.nodes):
        spec = get_op(node.op)
        out = node.outputs[0]
        if spec.is_alias(node, graph):
            alias[out] = node.inputs[0]
        elif inplace and spec.alias_output_to_input:
            # Writing over an input is safe when this node is the last reader of every tensor sharing that
            # input's bytes, and the sizes match. The graph input is left alone so its bytes stay inspectable.
            for i in node.inputs:
                if i and not graph.tensors[i].is_const and graph.tensors[i].nbytes == graph.tensors[out].nbytes:
                    group = [n for n in list(first) if _root(alias, n) == _root(alias, i)]
                    if all(last.get(n, -1) <= k and n not in graph.inputs and n not in graph.outputs
                           for n in group):
                        alias[out] = i
                        break
        if inplace and out not in alias:
            d = spec.inplace_offset(node, graph)
            data = [i for i in node.inputs if i and not graph.tensors[i].is_const]
            if d is not None and len(data) == 1:
                i = data[0]
                group = [n for n in list(first) if _root(alias, n) == _root(alias, i)]
                # The graph input's arena copy may be overwritten (invoke copies the caller's input in first); a
                # graph output may not, nor anything read after this step.
                if all(last.get(n, -1) <= k and n not in graph.outputs for n in group):
                    overlaps.append((out, i, -(-d // ALIGNMENT) * ALIGNMENT))
        s = spec.scratch_bytes(node, graph)
        if s:
            buffers[scratch_name(node.name)] = Buffer(scratch_name(node.name), int(s), k, k)
    for name in graph.activations():
        t = graph.tensors[name]
        buffers[name] = Buffer(name, t.nbytes, first[name], last.get(name, first[name]), alias_of=alias.get(name))
    return list(buffers.values()), overlaps


def _root(alias: dict[str, str], name: str) -> str:
    while name in alias:
        name = alias[name]
    return name
