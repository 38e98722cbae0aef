"""From a scheduled int8 graph to planner buffers: each activation's lifetime in steps, scratch buffers, and
aliases (reshapes share their input's bytes; an elementwise op may write over an input read for the last time).

Step k is the k-th node of `graph.nodes`. The graph input is copied into the arena before step 0 and the
graph output is copied out after the last step, at step len(nodes).
"""
from __future__ import annotations

from tinyaot.ir import Graph

from .planner import Buffer


def scratch_name(node_name: str) -> str:
    return f"{node_name}::scratch"


def graph_buffers(graph: Graph, inplace: bool = True) -> list[Buffer]:
    from tinyaot.ops.registry import get_op

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
        s = spec.scratch_bytes(node, graph)
        if s:
            buffers[scratch_name(node.name)] = Buffer(scratch_name(node.name), int(s), k, k)
    for name in graph.activations():
        t = graph.tensors[name]
        buffers[name] = Buffer(name, t.nbytes, first[name], last.get(name, first[name]), alias_of=alias.get(name))
    return list(buffers.values())


def _root(alias: dict[str, str], name: str) -> str:
    while name in alias:
        name = alias[name]
    return name
