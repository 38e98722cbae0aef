"""Compile-time evaluation of everything constant, at import, by onnxruntime.

With the graph inputs' shapes pinned, every Shape and Size of an activation is a constant, and so is every node
computed only from constants: exporters' shape arithmetic (Shape -> Gather -> Div -> Concat -> Reshape, the
`channels // 2` of ShuffleNet's `chunk`), weight transformations (Transpose, Reshape, Cast, Mul of initializers),
ConstantOfShape, Range, Where... `fold_constant_subgraphs` marks all of them in one walk (a node is constant when
each input is an initializer or a constant node's output; Shape/Size of a statically shaped tensor are replaced by
their values), runs the whole constant subgraph in one onnxruntime session under the model's own opsets, so the
arithmetic is ONNX's as onnxruntime implements it, whatever the ops, and turns the values the rest of the graph
reads into initializers. Shape inference then runs again (folding can resolve shapes it could not), and the walk
repeats until nothing more folds. It runs before the importer checks which operators tinyaot supports, so an op
that only ever computes constants (Div on shapes, say) is no reason to refuse a model.

Left alone: QuantizeLinear/DequantizeLinear (`absorb_qdq` reads them as quantization parameters), random and
training-only ops, ops of other domains and control flow (If/Loop/Scan, whose subgraphs may read outer values).
Should onnxruntime refuse the constant subgraph (an opset it does not know), ONNX's reference evaluator runs it
instead. A graph output that folds to a constant is an error: no int8 layer would compute it.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tinyaot.errors import TinyaotError
from tinyaot.oracle.sessions import session_options

KEEP = {"QuantizeLinear", "DequantizeLinear", "RandomNormal", "RandomUniform", "RandomNormalLike",
        "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout", "If", "Loop", "Scan"}
MAX_ROUNDS = 8


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value whose shape inference gave all dimensions as positive integers."""
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def has_unknown_shapes(model: onnx.ModelProto) -> bool:
    known = static_shapes(model) | {i.name: () for i in model.graph.initializer}
    return any(o and o not in known for n in model.graph.node if n.op_type != "Constant" for o in n.output)


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """Shape (with ONNX's start/end, negative ones counted from the end) or Size of a static shape."""
    s = np.asarray(shape, np.int64)
    if node.op_type == "Size":
        return np.asarray(np.prod(s), np.int64)
    a = {x.name: x.i for x in node.attribute}
    rank = len(s)
    start, end = a.get("start", 0), a.get("end", rank)
    return s[slice(start + rank if start < 0 else start, end + rank if end < 0 else end)]


def _foldable(node: onnx.NodeProto) -> bool:
    return (node.domain in ("", "ai.onnx") and node.op_type not in KEEP
            and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute))


def evaluate(nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto], outputs: list[str],
             opset_imports, ir_version: int | None = None) -> dict[str, np.ndarray]:
    """The values of `outputs` of the constant subgraph `nodes` (reading `initializers`), computed by onnxruntime
    (graph optimisations off: the ops as written), or by ONNX's reference evaluator if onnxruntime refuses it."""
    g = helper.make_graph(nodes, "constants", [], [helper.make_empty_tensor_value_info(o) for o in outputs],
                          initializers)
    kw = {} if ir_version is None else {"ir_version": ir_version}
    sub = helper.make_model(g, opset_imports=list(opset_imports), **kw)
    try:
        opts = session_options()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 4
        values = ort.InferenceSession(sub.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            outputs, {})
    except Exception:  # noqa: BLE001 - onnxruntime's pybind errors share no base class; ONNX's evaluator next
        values = ReferenceEvaluator(sub).run(outputs, {})
    return {o: np.asarray(v) for o, v in zip(outputs, values)}


def _evaluate(model: onnx.ModelProto, nodes: list[onnx.NodeProto], outputs: list[str]) -> dict[str, np.ndarray]:
    read = {i for n in nodes for i in n.input if i}
    return evaluate(nodes, [i for i in model.graph.initializer if i.name in read], outputs, model.opset_import,
                    model.ir_version)


def fold_constant_subgraphs(model: onnx.ModelProto, infer) -> onnx.ModelProto:
    """`model` shape-inferred with static inputs -> the model with its constant subgraphs replaced by initializers,
    inferred again by `infer` (the importer's shape inference) after each round that folded something."""
    for _ in range(MAX_ROUNDS):
        shapes = static_shapes(model)
        const = {i.name for i in model.graph.initializer}
        graph_outputs = {o.name for o in model.graph.output}
        folded: list[onnx.NodeProto] = []  # the model's nodes that become initializers
        run: list[onnx.NodeProto] = []  # what onnxruntime evaluates (Shape/Size as Constants of their value)
        for n in model.graph.node:
            if not _foldable(n):
                continue
            if n.op_type in ("Shape", "Size") and n.input[0] not in const and n.input[0] in shapes:
                value = numpy_helper.from_array(_shape_value(n, shapes[n.input[0]]))
                run.append(helper.make_node("Constant", [], [n.output[0]], value=value))
            elif (n.op_type == "Constant" and n.output[0] not in graph_outputs) or \
                    (n.input and all(not i or i in const for i in n.input)):
                run.append(n)
            else:
                continue
            folded.append(n)
            const.update(o for o in n.output if o)
        if not any(n.op_type != "Constant" for n in folded):
            return model
        made = {o for n in folded for o in n.output if o}
        constant_outputs = [o for o in graph_outputs if o in made]
        if constant_outputs:
            name = constant_outputs[0]
            value = _evaluate(model, run, [name])[name]
            raise TinyaotError(f"graph output {name!r} does not depend on the input data (it folds to the constant "
                               f"{value.tolist()!r} at compile time); tinyaot compiles models whose outputs are "
                               "computed from their inputs")
        gone = {id(n) for n in folded}
        kept = [n for n in model.graph.node if id(n) not in gone]
        needed = [o for o in dict.fromkeys(i for n in kept for i in n.input if i) if o in made]
        values = _evaluate(model, run, needed) if needed else {}
        del model.graph.node[:]
        model.graph.node.extend(kept)
        model.graph.initializer.extend(numpy_helper.from_array(values[o], o) for o in needed)
        kept_vi = [vi for vi in model.graph.value_info if vi.name not in made]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept_vi)
        model = infer(model)
    return model


__all__ = ["evaluate", "fold_constant_subgraphs", "has_unknown_shapes", "static_shapes", "KEEP"]
