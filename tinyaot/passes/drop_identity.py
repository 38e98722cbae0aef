"""Remove Identity and Dropout (inference mode). Assumes Dropout's optional mask output is unused."""
import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph

from ._util import replace_uses


def drop_identity(graph: Graph) -> Graph:
    for node in [n for n in graph.nodes if n.op in ("Identity", "Dropout")]:
        if node.op == "Dropout":
            _check_inference_dropout(node, graph)
        src, dst = node.inputs[0], node.outputs[0]
        graph.nodes.remove(node)
        replace_uses(graph, dst, src)
    graph.remove_unused_tensors()
    return graph


def _check_inference_dropout(node, graph: Graph) -> None:
    """Dropout is an identity only in inference mode: with training_mode = true (opset 12+) and a ratio above 0 it
    zeroes a random mask, which no compiled model can reproduce."""
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    if not training:
        return
    t = graph.tensors[training]
    ratio_name = node.inputs[1] if len(node.inputs) > 1 else ""
    ratio = graph.tensors[ratio_name].data if ratio_name else np.float32(0.5)
    if t.is_const and not bool(np.asarray(t.data)):
        return
    if t.is_const and ratio is not None and float(np.asarray(ratio)) == 0.0:
        return
    raise TinyaotError(f"Dropout node {node.name!r} is in training mode (training_mode "
                       f"{'= true' if t.is_const else 'is not a constant'}): its output is random; export the model "
                       "for inference (training_mode = false)")
