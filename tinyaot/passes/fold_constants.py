"""Evaluate nodes whose inputs are all constants (e.g. Reshape of a weight) with ONNX's own reference evaluator,
so folding follows ONNX semantics exactly for every op, not a re-implementation of each.

DequantizeLinear of a constant is left alone: it marks integer weights of a pre-quantized model, which
`absorb_qdq` keeps as integers with their quantization instead of as the float values folding would give."""
import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tinyaot.ir import Graph, Tensor


def fold_constants(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        ins = [i for i in node.inputs if i]
        if node.op == "DequantizeLinear" or not ins or not all(graph.tensors[i].is_const for i in ins):
            continue
        values = _evaluate(node, {i: graph.tensors[i].data for i in ins})
        graph.nodes.remove(node)
        for name, value in zip(node.outputs, values):
            graph.tensors[name] = Tensor(name, tuple(value.shape), graph.tensors[name].dtype, value)
    graph.remove_unused_tensors()
    return graph


def _evaluate(node, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    proto = helper.make_node(node.op, node.inputs, node.outputs, **node.attrs)
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.outputs]
    model = helper.make_model(helper.make_graph([proto], "fold", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 13)])
    result = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r) for r in result]


__all__ = ["fold_constants", "numpy_helper"]
