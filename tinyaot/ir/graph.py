"""The IR: plain data. Tensors with static shapes, nodes, a graph, and `verify()` run between passes.

Shapes are always concrete. Before the `to_nhwc` pass shapes follow ONNX (NCHW for images); after it
`graph.layout == "NHWC"` and every shape is the physical layout the generated C uses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinyaot.core.quant import QuantParams


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"  # "float32" | "int8" | "int16" | "int32" | "int64"
    data: np.ndarray | None = None  # constants only
    quant: QuantParams | None = None
    storage: Any = None  # weights only: a tinyaot.compress.storage.WeightStorage once compression decided it

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "int64": 8}[self.dtype]


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]  # "" marks an absent optional input, as in ONNX
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    layout: str = "NCHW"
    quantized: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    # --- queries -------------------------------------------------------------------------
    def t(self, name: str) -> Tensor:
        return self.tensors[name]

    def producer(self, tensor: str) -> Node | None:
        for n in self.nodes:
            if tensor in n.outputs:
                return n
        return None

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def is_graph_io(self, tensor: str) -> bool:
        return tensor in self.inputs or tensor in self.outputs

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        t = self.tensors[name]
        return t.data

    def activations(self) -> list[str]:
        """Non-constant tensors in schedule order: graph inputs, then each node's outputs."""
        seen = list(self.inputs)
        for n in self.nodes:
            seen.extend(o for o in n.outputs if o)
        return seen

    def fresh_name(self, name: str) -> str:
        """`name`, or `name_1`, `name_2`... whichever no tensor has yet."""
        base, k = name, 0
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        return name

    def fresh_node_name(self, name: str, also_taken=()) -> str:
        """`name`, or `name_1`, `name_2`... whichever no node of the graph (nor any name in `also_taken`, e.g. the
        nodes a pass is building beside `self.nodes`) has yet. Passes name the nodes they create with it, so a
        generated name never collides with one from the model (`ir.verify` checks that names stay unique)."""
        taken = {n.name for n in self.nodes} | set(also_taken)
        base, k = name, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        return name

    def add_tensor(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> str:
        """Adds an activation tensor under a fresh name derived from `name`; returns the name used."""
        name = self.fresh_name(name)
        self.tensors[name] = Tensor(name, tuple(shape), dtype)
        return name

    def add_const(self, name: str, data: np.ndarray) -> str:
        """Adds a constant under a fresh name derived from `name`; returns the name used."""
        name = self.fresh_name(name)
        dtype = {np.dtype(np.float32): "float32", np.dtype(np.int8): "int8",
                 np.dtype(np.int32): "int32"}.get(np.asarray(data).dtype, "float32")
        arr = np.asarray(data)
        if dtype == "float32":
            arr = arr.astype(np.float32)
        self.tensors[name] = Tensor(name, tuple(arr.shape), dtype, arr)
        return name

    def remove_unused_tensors(self) -> None:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(n.inputs)
            used.update(n.outputs)
        for name in [k for k in self.tensors if k not in used]:
            del self.tensors[name]
