"""Small graph-editing helpers shared by passes."""
import numpy as np

from tinyaot.ir import Graph, Node


def replace_uses(graph: Graph, old: str, new: str) -> None:
    """Every reader of `old` reads `new` instead. When `old` is a graph output, the producer of `new` is renamed
    to write `old`, so the model's output names stay what the user knows. When `new` is itself a graph input or
    another graph output (a model returning its input, or one value under two output names), it cannot be
    renamed: `old` stays, written by a Reshape of `new` to its own shape (an alias: no code, no bytes), so every
    graph input and output keeps its own name."""
    if old in graph.outputs and (new in graph.inputs or new in graph.outputs):
        graph.nodes.append(Node("Reshape", graph.fresh_node_name(f"{old}_copy"), [new], [old], {}))
        return
    if old in graph.outputs:
        rename_tensor(graph, new, old)
        return
    for n in graph.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
    graph.outputs = [new if o == old else o for o in graph.outputs]


def rename_tensor(graph: Graph, old: str, new: str) -> None:
    """Rename tensor `old` to `new` everywhere (the tensor `new`, if any, is replaced)."""
    t = graph.tensors.pop(old)
    t.name = new
    graph.tensors[new] = t
    for n in graph.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
        n.outputs = [new if o == old else o for o in n.outputs]
    graph.inputs = [new if i == old else i for i in graph.inputs]
    graph.outputs = [new if o == old else o for o in graph.outputs]


def single_consumer(graph: Graph, tensor: str):
    """The only node reading `tensor`, or None if it has several readers or is a graph output."""
    if tensor in graph.outputs:
        return None
    cons = graph.consumers(tensor)
    return cons[0] if len(cons) == 1 and cons[0].inputs.count(tensor) == 1 else None


def real_value(graph: Graph, name: str) -> np.ndarray:
    """A constant's real values as float32: a pre-quantized model's integer constant is dequantized."""
    t = graph.tensors[name]
    return (t.quant.dequantize(t.data) if t.quant is not None else t.data).astype(np.float32)
