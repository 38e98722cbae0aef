"""MatMul (+ Add of a constant bias) and Gemm become one FullyConnected op.

FullyConnected(X[M,K], W[N,K], B[N]) = X @ W.T + B: weights are stored [out, in] (CMSIS's layout) at compile
time, never transposed at run time. Assumes the MatMul's right operand is constant and 2-D.
"""
import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, QuantParams

from ._util import real_value, single_consumer


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
    if not wt.is_const and not graph.tensors[a].is_const:
        node.op = "BatchMatMul"  # two activations: tinyaot/ops/batch_matmul.py
        return
    if not wt.is_const or wt.data.ndim != 2 or len(graph.tensors[a].shape) != 2:
        raise TinyaotError(f"MatMul node {node.name!r}: only X[M,K] @ constant W[K,N] is supported")
    n_out = wt.data.shape[1]
    bias = np.zeros(n_out, np.float32)
    outputs = list(node.outputs)
    add = single_consumer(graph, outputs[0])
    if add is not None and add.op == "Add":
        other = add.inputs[1] if add.inputs[0] == outputs[0] else add.inputs[0]
        # a pre-quantized model stores this constant as int8: the fused bias is its real value
        c = real_value(graph, other) if graph.tensors[other].is_const else None
        if c is not None and c.size == n_out and c.shape[-1:] == (n_out,):
            bias = c.reshape(n_out)
            graph.nodes.remove(add)
            # The fused layer writes the Add's output: its calibrated range (or given quantization) includes
            # the bias, which the MatMul's output lacks.
            outputs = list(add.outputs)
    fc = Node("FullyConnected", node.name,
              [a, _weight(graph, f"{node.name}_weight", wt, transpose=True),
               graph.add_const(f"{node.name}_bias", bias)], outputs, {})
    _replace(graph, node, fc)


def _weight(graph: Graph, name: str, wt, transpose: bool, alpha: float = 1.0) -> str:
    """The [N, K] weight constant. Float weights are scaled by alpha; a pre-quantized model's integer weights
    stay integers with their quantization, whose channel axis moves with the transpose."""
    if wt.quant is None:
        w = wt.data.astype(np.float64)
        return graph.add_const(name, (alpha * (w.T if transpose else w)).astype(np.float32))
    if alpha != 1.0:
        raise TinyaotError(f"{name}: Gemm alpha={alpha} on pre-quantized weights is not supported")
    q = wt.quant
    axis = None if q.axis is None else (1 - q.axis if transpose else q.axis)
    new = graph.add_const(name, np.ascontiguousarray(wt.data.T if transpose else wt.data))
    graph.tensors[new].quant = QuantParams(q.scale, q.zero_point, axis)
    return new


def _from_gemm(graph: Graph, node: Node) -> None:
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    if int(node.attrs.get("transA", 0)) or not graph.tensors[b].is_const:
        raise TinyaotError(f"Gemm node {node.name!r}: only transA=0 with a constant B is supported")
    wt = graph.tensors[b]
    w = _weight(graph, f"{node.name}_weight", wt, not int(node.attrs.get("transB", 0)), alpha)  # -> [N, K]
    n_out = graph.tensors[w].shape[0]
    bias = graph.add_const(f"{node.name}_bias", np.zeros(n_out, np.float32))
    if c:
        ct = graph.tensors[c]
        if not ct.is_const:
            raise TinyaotError(f"Gemm node {node.name!r}: C must be a constant")
        if ct.data.size not in (1, n_out):
            raise TinyaotError(f"Gemm node {node.name!r}: C must broadcast along the output features only")
        if ct.quant is not None and ct.dtype == "int32" and beta == 1.0 and ct.data.shape == (n_out,):
            bias = c  # a pre-quantized model's int32 bias: kept bit for bit
        else:
            cv = real_value(graph, c)
            bias = graph.add_const(f"{node.name}_bias", (beta * np.broadcast_to(cv.reshape(-1), (n_out,)))
                                   .astype(np.float32))
    fc = Node("FullyConnected", node.name, [a, w, bias], list(node.outputs), {})
    _replace(graph, node, fc)
