"""Remove Identity and Dropout (inference mode). Assumes Dropout's optional mask output is unused."""
from tinyaot.ir import Graph

from ._util import replace_uses


def drop_identity(graph: Graph) -> Graph:
    for node in [n for n in graph.nodes if n.op in ("Identity", "Dropout")]:
        src, dst = node.inputs[0], node.outputs[0]
        graph.nodes.remove(node)
        replace_uses(graph, dst, src)
    graph.remove_unused_tensors()
    return graph
