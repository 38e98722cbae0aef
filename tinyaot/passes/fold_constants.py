"""Evaluate nodes whose inputs are all constants (e.g. Reshape of a weight) with onnxruntime, as the importer does
for the model's constant subgraphs (frontend/fold_constants.py, which leaves little for this pass: what the passes
before it expose), so folding follows ONNX semantics for every op, not a re-implementation of each.

DequantizeLinear of a constant is left alone: it marks integer weights of a pre-quantized model, which
`absorb_qdq` keeps as integers with their quantization instead of as the float values folding would give.

Shape and Size of an activation are constants too, since every shape is static after import: they fold to their
values, and the shape arithmetic exporters build on them (Gather, Concat, Unsqueeze, Expand's shape,
ConstantOfShape, Range, Cast, Equal/Where...) then folds like any other all-constant node, in the same walk, so the
generated C never computes a shape. Nodes are evaluated under the model's own opset (Split, Slice, ReduceMean
changed signatures across opsets)."""
import numpy as np
from onnx import helper, numpy_helper

from tinyaot.errors import TinyaotError
from tinyaot.frontend.fold_constants import evaluate
from tinyaot.ir import Graph, Tensor


def fold_constants(graph: Graph) -> Graph:
    opset = int(graph.meta.get("opset", 13))
    for node in list(graph.nodes):
        if node.op in ("Shape", "Size") and node.inputs and not graph.tensors[node.inputs[0]].is_const:
            shape = np.asarray(graph.tensors[node.inputs[0]].shape, np.int64)
            if node.op == "Size":
                value = np.asarray(np.prod(shape), np.int64)
            else:
                rank = len(shape)
                start = int(node.attrs.get("start", 0))
                end = int(node.attrs.get("end", rank))
                value = shape[slice(start if start >= 0 else start + rank, end if end >= 0 else end + rank)]
            graph.nodes.remove(node)
            out = node.outputs[0]
            graph.tensors[out] = Tensor(out, tuple(value.shape), "int64", value)
            continue
        ins = [i for i in node.inputs if i]
        if node.op == "DequantizeLinear" or not ins or not all(graph.tensors[i].is_const for i in ins):
            continue
        values = evaluate_node(node, {i: graph.tensors[i].data for i in ins}, opset)
        graph.nodes.remove(node)
        for name, value in zip(node.outputs, values):
            graph.tensors[name] = Tensor(name, tuple(value.shape), _dtype(value, graph.tensors[name].dtype), value)
    constant = [o for o in graph.outputs if graph.tensors[o].is_const]
    if constant:
        # e.g. a Cast of Shape(x): every value is known at compile time and no int8 layer computes it
        raise TinyaotError(f"graph output {constant[0]!r} does not depend on the input data (it folds to the "
                           f"constant {graph.tensors[constant[0]].data.tolist()!r} at compile time); tinyaot "
                           "compiles models whose outputs are computed from their inputs")
    graph.remove_unused_tensors()
    return graph


def evaluate_node(node, feeds: dict[str, np.ndarray], opset: int = 13) -> list[np.ndarray]:
    proto = helper.make_node(node.op, node.inputs, node.outputs, **node.attrs)
    inits = [numpy_helper.from_array(v, k) for k, v in feeds.items()]
    values = evaluate([proto], inits, [o for o in node.outputs if o], [helper.make_opsetid("", opset)])
    return [values[o] for o in node.outputs if o]


def _dtype(value: np.ndarray, declared: str) -> str:
    # shape arithmetic is int64 (or bool); the IR's declared dtype for it may say float32
    return {"int64": "int64", "bool": "bool", "int32": "int32", "int8": "int8"}.get(str(value.dtype), declared)


__all__ = ["evaluate_node", "fold_constants", "numpy_helper"]
