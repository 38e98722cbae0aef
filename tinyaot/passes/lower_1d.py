"""1-D layers (Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, ReduceMean over L, BatchNormalization,
Pad, Resize over [N, C, L]) become the 2-D layers over [N, C, 1, L]: every kernel, compression option and layout
rule that exists for images then applies unchanged, and no 1-D kernel is needed.

The lift is done per tensor, not per node: a 3-D activation that a 1-D layer reads or writes is given the shape
[N, C, 1, L] in place, and so is every 3-D activation connected to one through elementwise ops (Relu, Clip, Add
of two such tensors...) and channel Concats. A chain conv -> relu -> pool -> conv therefore stays 4-D from end to
end, with no reshape between its layers: in NHWC the bytes of [N, C, 1, L] are [N, L, C], the order every 1-D
layer reads. Where a lifted tensor meets something that is not lifted (a graph input or output, a Flatten, a
Transpose...), a Reshape between [N, C, L] and [N, C, 1, L] is inserted; `to_nhwc` makes it an alias or a
transpose exactly as it would for any other reshape.

Attributes move with the axes: a 1-D kernel of size k is a 1 x k kernel, pads [b, e] become [0, b, 0, e],
strides/dilations gain a leading 1, a weight [O, I/g, k] becomes [O, I/g, 1, k] (the same bytes).
"""
from __future__ import annotations

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, Tensor
from tinyaot.ops.registry import get_op, traits_of

# Which ops are 1-D layers over [N, C, L] (`lifts_1d`, from Traits.layer_1d: convolutions, pooling, batch norm,
# Pad, Resize; ReduceMean over L), which lift with them (`lifts_with_1d`: elementwise ops, channel Concat) and how
# each one's attributes move (`lift_1d`) their op files say (ops/registry.py).


def _is_3d(graph: Graph, name: str) -> bool:
    return bool(name) and not graph.tensors[name].is_const and len(graph.tensors[name].shape) == 3


def _is_1d_layer(graph: Graph, node: Node) -> bool:
    return bool(node.inputs) and _is_3d(graph, node.inputs[0]) and get_op(node.op).lifts_1d(node, graph)


def _liftable_elementwise(graph: Graph, node: Node) -> bool:
    """An elementwise op (or a Concat over channels) whose activations are all 3-D: lifting it is free."""
    if not get_op(node.op).lifts_with_1d(node, graph):
        return False
    acts = [i for i in node.inputs if i and not graph.tensors[i].is_const] + list(node.outputs[:1])
    return all(_is_3d(graph, i) for i in acts)


def lower_1d(graph: Graph) -> Graph:
    layers = [n for n in graph.nodes if _is_1d_layer(graph, n)]
    if not layers:
        return graph
    # The tensors to lift: those of the 1-D layers, grown through elementwise neighbours to a fixed point.
    lift: set[str] = set()
    lifted_nodes = {id(n) for n in layers}
    for n in layers:
        lift.add(n.inputs[0])
        lift.update(o for o in n.outputs[:1] if _is_3d(graph, o))
    changed = True
    while changed:
        changed = False
        for n in graph.nodes:
            if id(n) in lifted_nodes or not _liftable_elementwise(graph, n):
                continue
            acts = [i for i in n.inputs if i and not graph.tensors[i].is_const] + list(n.outputs[:1])
            if any(a in lift for a in acts):
                lift.update(acts)
                lifted_nodes.add(id(n))
                changed = True
    # Graph inputs/outputs keep their 3-D shape, and so do tensors written by a node that is not lifted (a Concat
    # along L of a constant state and the input, say): a lifted one gets a 4-D twin joined by a Reshape.
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    unlifted = {name for name in lift if name in producers and id(producers[name]) not in lifted_nodes}
    renamed: dict[str, str] = {}
    for name in list(lift):
        if graph.is_graph_io(name) or name in unlifted:
            renamed[name] = graph.add_tensor(name + "_2d", (1,))
            lift.discard(name)
            lift.add(renamed[name])
    old_shapes = {}
    for name in lift:
        src = next((k for k, v in renamed.items() if v == name), name)
        n_, c, length = graph.tensors[src].shape
        old_shapes[name] = (n_, c, length)
        graph.tensors[name].shape = (n_, c, 1, length)
        graph.tensors[name].quant = graph.tensors[src].quant
    new_nodes: list[Node] = []
    back: dict[str, str] = {}  # lifted tensor -> its 3-D twin for readers that are not lifted
    for name, twin in renamed.items():
        if name in graph.inputs:
            new_nodes.append(Node("Reshape", graph.fresh_node_name(f"{name}_to_2d"), [name], [twin], {}))
    for node in graph.nodes:
        lifted = id(node) in lifted_nodes
        node.inputs = [renamed.get(i, i) for i in node.inputs]
        if lifted:
            node.outputs = [renamed.get(o, o) for o in node.outputs]
        if lifted:
            _lift_attrs(graph, node)
        elif traits_of(node.op).reshape and node.inputs[0] in lift:
            # [N, C, 1, L] holds its values in the order of [N, C, L]: a reshape of either is the same reshape
            # (dynamo's adaptive pooling Unsqueezes to 4-D and back), so it reads the lifted tensor directly.
            node.op, node.inputs, node.attrs = "Reshape", node.inputs[:1], {}
        else:
            for k, i in enumerate(node.inputs):
                orig = next((a for a, b in renamed.items() if b == i), None)
                if orig is not None and (orig in graph.inputs or orig in unlifted):
                    node.inputs[k] = orig  # its 3-D original is there already
                elif i in lift:
                    if i not in back:
                        back[i] = graph.add_tensor(f"{i}_1d", old_shapes[i])
                        graph.tensors[back[i]].quant = graph.tensors[i].quant
                        new_nodes.append(Node("Reshape", graph.fresh_node_name(f"{i}_to_1d",
                                                                                [m.name for m in new_nodes]),
                                              [i], [back[i]], {}))
                    node.inputs[k] = back[i]
        new_nodes.append(node)
        for o in node.outputs if not lifted else ():
            if o in unlifted:  # a node that is not lifted wrote it in 3-D: its 4-D twin follows
                new_nodes.append(Node("Reshape", graph.fresh_node_name(f"{o}_to_2d", [m.name for m in new_nodes]),
                                      [o], [renamed[o]], {}))
        for o in node.outputs:
            orig = next((k for k, v in renamed.items() if v == o), None)
            if orig is not None and orig in graph.outputs:
                new_nodes.append(Node("Reshape", graph.fresh_node_name(f"{orig}_to_1d",
                                                                        [m.name for m in new_nodes]),
                                      [o], [orig], {}))
    graph.nodes = new_nodes
    graph.remove_unused_tensors()
    return graph


def _lift_attrs(graph: Graph, node: Node) -> None:
    get_op(node.op).lift_1d(node, graph)  # the op's own attributes and constants
    if traits_of(node.op).broadcast:
        where = f"{node.op} node {node.name!r}"
        # broadcast constants: right-aligned to rank 3, then the new H axis of size 1 before L
        for k, i in enumerate(node.inputs):
            t = graph.tensors[i] if i else None
            if t is None or not t.is_const or t.data.ndim == 0:
                continue
            if t.data.ndim > 3:
                raise TinyaotError(f"{where}: constant {i!r} has a higher rank than the 1-D data")
            lead = 3 - t.data.ndim
            c = t.data.reshape((1,) * lead + t.data.shape)
            name = graph.fresh_name(i + "_2d")
            c = c.reshape(c.shape[:2] + (1,) + c.shape[2:])
            quant = t.quant
            if quant is not None and quant.axis is not None:
                axis = quant.axis + lead
                quant = type(quant)(quant.scale, quant.zero_point, axis + 1 if axis >= 2 else axis)
            graph.tensors[name] = Tensor(name, c.shape, t.dtype, c, quant)
            node.inputs[k] = name
