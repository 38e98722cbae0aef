"""Remove nodes none of whose outputs is read (walking back from the graph outputs), then unused tensors."""
from tinyaot.ir import Graph


def remove_dead(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    graph.nodes = list(reversed(kept))
    graph.remove_unused_tensors()
    return graph
