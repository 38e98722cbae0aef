"""ONNX shape plumbing (Shape, Size, Gather, Expand, ConstantOfShape, Slice, Split, Range, Cast, Equal, Where):
accepted at import because with static shapes it is compile-time arithmetic. `passes/fold_constants.py` turns
Shape/Size of an activation into constants and evaluates every node whose inputs are then all constants, so none of
these reaches code generation. Slice, Split, Gather and Expand of real data become IndexCopy moves
(passes/index_moves.py); any other one that reads an activation (a Cast or Range of run-time values) has no
kernel: the shape check after the layout pass names it, as a one-line error, instead of failing later."""
from __future__ import annotations

from tinyaot.core.errors import TinyaotError

from .registry import OpSpec, register

SHAPE_OPS = ("Shape", "Size", "Gather", "Expand", "ConstantOfShape", "Slice", "Split", "Range", "Cast", "Equal",
             "Where")


class _FoldedOnly(OpSpec):
    def infer_shapes(self, node, graph):
        # Before the layout pass the node may still be waiting for its constants (verify runs after import, too);
        # once the layout is physical, fold_constants has had its chance.
        if graph.layout == "NHWC":
            reads = [i for i in node.inputs if i and not graph.tensors[i].is_const]
            raise TinyaotError(f"{node.op} node {node.name!r} reads activation(s) {reads}, not only constants or "
                               f"static shapes; tinyaot folds {node.op} at compile time and has no kernel for it")
        return None


for _op in SHAPE_OPS:
    register(_op)(type(_op, (_FoldedOnly,), {"__doc__": f"ONNX {_op}: folded at compile time (static shapes)."}))
