"""Invariants of the IR, checked between every two passes so a broken pass is caught where it broke.

The IR knows no operators: the caller passes the shape inference in (`infer`, e.g. tinyaot.ops.registry's
`infer_shapes`), so `ir` depends on nothing above it."""
from __future__ import annotations

from typing import Callable, Optional

from .graph import Graph, Node

# (node, graph) -> output shapes, or None when the op has no inference; raises UnknownOp for an unknown op type.
ShapeInference = Callable[[Node, Graph], Optional[list]]


class IRError(AssertionError):
    """An IR invariant is broken: a bug in tinyaot, never the user's input."""


class UnknownOp(LookupError):
    """Raised by a shape inference for an op type nobody registered."""


def verify(graph: Graph, after: str = "", infer: ShapeInference | None = None) -> Graph:
    """Check the structural invariants; with `infer`, also that every op is known and every output has the shape
    inference gives."""
    where = f" (after pass '{after}')" if after else ""

    def fail(msg: str) -> None:
        raise IRError(f"IR check failed{where}: {msg}")

    for key, t in graph.tensors.items():
        if t.name != key:
            fail(f"tensor stored under {key!r} is named {t.name!r}")
        if not key:
            fail("a tensor has an empty name")
        if not t.is_const and any(d < 1 for d in t.shape):
            fail(f"activation {key!r} has shape {list(t.shape)}: every dimension must be >= 1")
    # Node names key per-layer data (compression settings, refits, report rows, oracle sessions): they must be
    # non-empty and unique, so a pass that names a new node after an existing one is caught here.
    seen_names: set[str] = set()
    for node in graph.nodes:
        if not node.name:
            fail(f"a {node.op} node has an empty name")
        if node.name in seen_names:
            fail(f"node name {node.name!r} is used by more than one node")
        seen_names.add(node.name)
    for what, names in (("input", graph.inputs), ("output", graph.outputs)):
        if len(set(names)) != len(names):
            fail(f"graph {what}s {names} repeat a name")
    defined = {n for n, t in graph.tensors.items() if t.is_const} | set(graph.inputs)
    for name in graph.inputs:
        if name not in graph.tensors:
            fail(f"graph input {name!r} has no tensor")
    produced: set[str] = set()
    for node in graph.nodes:
        for i in node.inputs:
            if i and i not in defined:
                fail(f"node {node.name!r} reads {i!r} before it is produced")
        for o in node.outputs:
            if not o:  # an optional output the model left out
                continue
            if o in produced or (o in graph.tensors and graph.tensors[o].is_const):
                fail(f"tensor {o!r} is produced twice")
            if o in graph.inputs:
                fail(f"node {node.name!r} writes graph input {o!r}")
            if o not in graph.tensors:
                fail(f"node {node.name!r} output {o!r} has no tensor")
            produced.add(o)
            defined.add(o)
        if infer is None:
            continue
        try:
            shapes = infer(node, graph)
        except UnknownOp:
            fail(f"node {node.name!r} has unregistered op {node.op}")
        if shapes is not None:
            for o, s in zip(node.outputs, shapes):
                if o and tuple(graph.tensors[o].shape) != tuple(s):
                    fail(f"node {node.name!r} ({node.op}) output {o!r} has shape "
                         f"{graph.tensors[o].shape}, shape inference says {tuple(s)}")
    for name in graph.outputs:
        if name not in defined:
            fail(f"graph output {name!r} is never produced")
    if graph.quantized:
        for name in graph.activations():
            t = graph.tensors[name]
            if t.dtype not in ("int8", "int16") or t.quant is None or t.quant.axis is not None:
                fail(f"activation {name!r} is not per-tensor int8 (or int16) after quantization")
    return graph
