"""ReduceMean over H and W of an NCHW image is GlobalAveragePool: the TorchScript exporter writes
`adaptive_avg_pool2d(x, 1)` as GlobalAveragePool and the dynamo exporter as ReduceMean (axes [-1, -2], keepdims),
and the same network must compile to the same kernels. With keepdims = 0 (`x.mean([2, 3])`) a Reshape to [N, C]
follows the pool (an alias: no code). Assumes a 4-D input and constant axes (an attribute before opset 18, an
input since); other reductions are left to the ReduceMean op."""
import numpy as np

from tinyaot.ir import Graph, Node


def _axes(graph: Graph, node: Node) -> list[int] | None:
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        t = graph.tensors[node.inputs[1]]
        axes = [int(v) for v in np.asarray(t.data).reshape(-1)] if t.is_const else None
    return None if not axes else sorted(int(a) % 4 for a in axes)


def mean_to_pool(graph: Graph) -> Graph:
    if graph.meta.get("prequantized"):  # an int8 .tflite model: its own ops' arithmetic, bit for bit
        return graph
    out: list[Node] = []
    for node in graph.nodes:
        x = node.inputs[0] if node.inputs else ""
        if (node.op != "ReduceMean" or not x or graph.tensors[x].is_const or len(graph.tensors[x].shape) != 4
                or _axes(graph, node) != [2, 3]):
            out.append(node)
            continue
        y = node.outputs[0]
        n, c = graph.tensors[x].shape[:2]
        if int(node.attrs.get("keepdims", 1)):
            out.append(Node("GlobalAveragePool", node.name, [x], [y], {}))
            continue
        pooled = graph.add_tensor(f"{y}_pooled", (n, c, 1, 1))
        out.append(Node("GlobalAveragePool", node.name, [x], [pooled], {}))
        out.append(Node("Reshape", graph.fresh_node_name(f"{node.name}_flat", [m.name for m in out]), [pooled], [y],
                        {}))
    graph.nodes = out
    graph.remove_unused_tensors()
    return graph
