"""Slice, Split, Gather (constant indices) and Expand that read an activation become IndexCopy nodes: pure data
movement whose source map is found by running the ONNX op itself (the reference evaluator, the model's opset) on
the element indices 0..n-1 laid out in the input's shape, so every axis, step, negative index and broadcast rule
is ONNX's own. Runs after `fold_constants`, so only the nodes that really move data are left (shape arithmetic is
constant by then). Assumes the other inputs (starts, ends, indices, split sizes, target shape) are constants; a
node whose are not is left to the shape-op check, which names it."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tinyaot.ir import Graph, Node

MOVING = ("Slice", "Split", "Gather", "Expand")


def index_moves(graph: Graph) -> Graph:
    opset = int(graph.meta.get("opset", 13))
    out: list[Node] = []
    for node in graph.nodes:
        x = node.inputs[0] if node.inputs else ""
        rest = [i for i in node.inputs[1:] if i]
        if (node.op not in MOVING or not x or graph.tensors[x].is_const
                or not all(graph.tensors[i].is_const for i in rest)):
            out.append(node)
            continue
        shape = graph.tensors[x].shape
        idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
        feeds = {x: idx} | {i: np.asarray(graph.tensors[i].data) for i in rest}
        maps = _evaluate(node, feeds, opset)
        taken = [n.name for n in out]
        for k, (o, src) in enumerate(zip(node.outputs, maps)):
            if not o:
                continue
            name = node.name if k == 0 else graph.fresh_node_name(f"{node.name}_{k}", taken)
            taken.append(name)
            out.append(Node("IndexCopy", name, [x], [o], {"src": np.asarray(src, np.int64).reshape(-1)}))
    graph.nodes = out
    graph.remove_unused_tensors()
    return graph


def _evaluate(node: Node, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    proto = helper.make_node(node.op, node.inputs, node.outputs, **node.attrs)
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.outputs if o]
    model = helper.make_model(helper.make_graph([proto], "moves", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]
