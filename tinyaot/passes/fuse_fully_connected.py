"""MatMul (+ Add of a constant bias) and Gemm become one FullyConnected op.

FullyConnected(X[M,K], W[N,K], B[N]) = X @ W.T + B: weights are stored [out, in] (CMSIS's layout) at compile
time, never transposed at run time. Assumes the MatMul's right operand is constant and 2-D.
"""
import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node

from ._util import replace_uses, single_consumer


def fuse_fully_connected(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "MatMul":
            _from_matmul(graph, node)
        elif node.op == "Gemm":
            _from_gemm(graph, node)
    graph.remove_unused_tensors()
    return graph


def _replace(graph: Graph, old: Node, new: Node) -> None:
    graph.nodes[graph.nodes.index(old)] = new


def _from_matmul(graph: Graph, node: Node) -> None:
    a, b = node.inputs
    wt = graph.tensors[b]
    if not wt.is_const or wt.data.ndim != 2 or len(graph.tensors[a].shape) != 2:
        raise TinyaotError(f"MatMul node {node.name!r}: only X[M,K] @ constant W[K,N] is supported")
    w = wt.data.astype(np.float32).T.copy()
    n_out = w.shape[0]
    bias = np.zeros(n_out, np.float32)
    out = node.outputs[0]
    add = single_consumer(graph, out)
    if add is not None and add.op == "Add":
        other = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
        c = graph.tensors[other].data if graph.tensors[other].is_const else None
        if c is not None and c.size == n_out and c.shape[-1:] == (n_out,):
            bias = c.reshape(n_out).astype(np.float32)
            graph.nodes.remove(add)
            replace_uses(graph, add.outputs[0], out)
    fc = Node("FullyConnected", node.name,
              [a, graph.add_const(f"{node.name}_weight", w), graph.add_const(f"{node.name}_bias", bias)],
              list(node.outputs), {})  # the MatMul may have been renamed to the Add's output just above
    _replace(graph, node, fc)


def _from_gemm(graph: Graph, node: Node) -> None:
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    if int(node.attrs.get("transA", 0)) or not graph.tensors[b].is_const:
        raise TinyaotError(f"Gemm node {node.name!r}: only transA=0 with a constant B is supported")
    w = graph.tensors[b].data.astype(np.float64)
    w = w if int(node.attrs.get("transB", 0)) else w.T  # -> [N, K]
    w = (alpha * w).astype(np.float32)
    n_out = w.shape[0]
    bias = np.zeros(n_out, np.float32)
    if c:
        if not graph.tensors[c].is_const:
            raise TinyaotError(f"Gemm node {node.name!r}: C must be a constant")
        cv = graph.tensors[c].data
        if cv.size not in (1, n_out):
            raise TinyaotError(f"Gemm node {node.name!r}: C must broadcast along the output features only")
        bias = (beta * np.broadcast_to(cv.reshape(-1), (n_out,))).astype(np.float32)
    fc = Node("FullyConnected", node.name,
              [a, graph.add_const(f"{node.name}_weight", w), graph.add_const(f"{node.name}_bias", bias)],
              list(node.outputs), {})
    _replace(graph, node, fc)
