"""Div by a constant becomes Mul by its reciprocal (float32, as onnxruntime would compute 1 / c): the int8 Mul
kernel then does the work, and the exporters' `x / 6` (a hand-written hard-swish, a normalisation) costs nothing
new. Assumes `fold_constants` ran: a Div whose inputs are all constants is gone by then. Dividing by an activation
(or a constant by one) has no int8 kernel and is refused naming the node; so is a divisor holding a zero (the
quotient is infinite, which int8 cannot hold)."""
import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph


def div_to_mul(graph: Graph) -> Graph:
    for node in [n for n in graph.nodes if n.op == "Div"]:
        divisor = graph.tensors[node.inputs[1]]
        if not divisor.is_const or graph.tensors[node.inputs[0]].is_const or divisor.quant is not None:
            raise TinyaotError(f"Div node {node.name!r}: only division of an activation by a float constant is "
                               "supported (it becomes a multiplication by the reciprocal)")
        c = np.asarray(divisor.data, np.float32)
        if not np.all(np.isfinite(c)) or np.any(c == 0):
            raise TinyaotError(f"Div node {node.name!r}: the divisor {node.inputs[1]!r} holds zero or a non-finite "
                               "value")
        node.op = "Mul"
        node.inputs[1] = graph.add_const(f"{node.inputs[1]}_reciprocal", np.float32(1.0) / c)
    graph.remove_unused_tensors()
    return graph
