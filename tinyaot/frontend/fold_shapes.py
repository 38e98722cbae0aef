"""Import-time folding of shape arithmetic that ONNX shape inference leaves unresolved.

Shape inference (even with data propagation) gives up on some exporter idioms, e.g. a ConstantOfShape or Expand
whose target comes from Size -> Unsqueeze -> Concat, and the IR needs every activation's shape. With the graph
inputs' shapes pinned, every Shape/Size is a constant and so is everything computed only from constants: this
evaluates those nodes (ONNX's reference evaluator, the model's opset), turns their outputs into initializers, and
runs shape inference again, until nothing more folds. It only runs when inference left a shape unknown, so models
that infer fully are imported exactly as before. Q/DQ nodes are left alone (`absorb_qdq` reads them as
quantization parameters)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

KEEP = {"QuantizeLinear", "DequantizeLinear", "RandomNormal", "RandomUniform", "RandomNormalLike",
        "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def has_unknown_shapes(model: onnx.ModelProto) -> bool:
    known = _static_shapes(model) | {i.name: () for i in model.graph.initializer}
    return any(o and o not in known for n in model.graph.node if n.op_type != "Constant" for o in n.output)


def fold_shape_arithmetic(model: onnx.ModelProto, infer) -> onnx.ModelProto:
    """`infer(model)` is the importer's shape inference; returns the re-inferred model after folding."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    for _ in range(8):  # each round resolves at least one more level of the shape subgraph, or stops
        if not has_unknown_shapes(model):
            return model
        shapes = _static_shapes(model)
        consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        folded = []
        for n in model.graph.node:
            if n.domain not in ("", "ai.onnx") or n.op_type in KEEP:
                continue
            value = None
            if n.op_type == "Constant":
                value = [numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"]
                value = value or None
            elif n.op_type in ("Shape", "Size") and n.input[0] in shapes and n.input[0] not in consts:
                s = np.asarray(shapes[n.input[0]], np.int64)
                if n.op_type == "Size":
                    value = [np.asarray(np.prod(s), np.int64)]
                else:
                    a = {x.name: x.i for x in n.attribute}
                    value = [s[slice(a.get("start", 0), a.get("end", len(s)) if "end" in a else None)]]
            elif n.input and all(not i or i in consts for i in n.input):
                feeds = {i: consts[i] for i in n.input if i}
                g = helper.make_graph(
                    [n], "fold",
                    [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                     for k, v in feeds.items()],
                    [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in n.output if o])
                value = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
                                           ).run(None, feeds)
            if value is None:
                continue
            for o, v in zip([o for o in n.output if o], value):
                consts[o] = np.asarray(v)
            if n.op_type != "Constant":
                folded.append(n)
        if not folded:
            return model
        outs = {o for n in folded for o in n.output if o}
        keep = [n for n in model.graph.node if n not in folded]
        del model.graph.node[:]
        model.graph.node.extend(keep)
        graph_outputs = {o.name for o in model.graph.output}
        model.graph.initializer.extend(numpy_helper.from_array(consts[o], o) for o in outs
                                       if o not in graph_outputs)
        kept_vi = [vi for vi in model.graph.value_info if vi.name not in outs]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept_vi)
        model = infer(model)
    return model


__all__ = ["fold_shape_arithmetic", "has_unknown_shapes", "shape_inference"]
