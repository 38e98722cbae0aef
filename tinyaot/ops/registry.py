"""Operator registry. Each op file defines one `OpSpec` subclass and registers it with `@register("OpType")`.

An op file owns everything about its operator: shape inference, quantization of its parameters, the bit-exact
numpy int8 reference, its scratch size, the C kernel call it lowers to, its MAC count, and its float QDQ
equivalent for the onnxruntime oracle. Passes and codegen only ask the registry.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from tinyaot.ir import Graph, Node

_REGISTRY: dict[str, "OpSpec"] = {}


@dataclass
class KernelCall:
    """What codegen pastes into the schedule for one node: C statements plus the constant data they use."""

    kernel: str  # the C kernel function, e.g. tinyaot_convolve_s8 ("" for pure aliases)
    code: str  # C statements; refer to buffers via {in0}, {in1}, {out0}, {scratch} placeholders
    files: list[str] = field(default_factory=list)  # kernel .c files under templates/kernels/
    consts: list[str] = field(default_factory=list)  # C definitions of constant data (flash)


@dataclass
class OracleLayer:
    """The float ONNX nodes equal to this layer, between DequantizeLinear of its inputs and QuantizeLinear of its
    output, in the IR's physical layout. Inputs are named by the IR input names; constants go in `initializers`."""

    nodes: list  # onnx.NodeProto
    initializers: list  # onnx.TensorProto
    output: str  # float output tensor name produced by `nodes`


class OpSpec:
    op_type: ClassVar[str] = ""
    # True when the generated code may write the output over input 0 (same size, elementwise).
    alias_output_to_input: ClassVar[bool] = False

    def infer_shapes(self, node: "Node", graph: "Graph") -> list[tuple[int, ...]] | None:
        """Output shapes from input shapes; None when this op has no inference (pre-layout ONNX-only ops)."""
        return None

    def quantize(self, node: "Node", graph: "Graph", ranges: dict[str, tuple[float, float]]) -> None:
        """Set the output tensors' quantization and the node's integer parameters (inputs already quantized)."""
        raise NotImplementedError(f"{self.op_type} cannot be quantized")

    def reference(self, node: "Node", graph: "Graph", inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError(f"{self.op_type} has no int8 reference")

    def scratch_bytes(self, node: "Node", graph: "Graph") -> int:
        return 0

    def inplace_offset(self, node: "Node", graph: "Graph") -> int | None:
        """Bytes d >= 0 such that the kernel may write its output starting d bytes before input 0, the two
        overlapping, without overwriting an input byte it has yet to read; None when it never may. Liveness uses
        it (plan/liveness.py) only where this node is the last reader of that input and the arena shrinks."""
        return None

    def is_alias(self, node: "Node", graph: "Graph") -> bool:
        """True when the output is the input's bytes reinterpreted (reshape): no code, shared memory."""
        return False

    def render(self, node: "Node", graph: "Graph", cname: str) -> KernelCall:
        raise NotImplementedError(f"{self.op_type} has no C kernel")

    def macs(self, node: "Node", graph: "Graph") -> int:
        return 0

    def weights_bytes(self, node: "Node", graph: "Graph") -> int:
        return 0

    def params_bytes(self, node: "Node", graph: "Graph") -> int:
        return 0

    def oracle(self, node: "Node", graph: "Graph") -> OracleLayer | None:
        """Float ONNX equivalent for the per-layer onnxruntime check; None when nothing to check (aliases)."""
        return None


def register(op_type: str):
    def deco(cls):
        cls.op_type = op_type
        _REGISTRY[op_type] = cls()
        return cls

    return deco


def _load_all() -> None:
    # Importing the package imports every op file, which registers itself.
    import tinyaot.ops  # noqa: F401


def get_op(op_type: str) -> OpSpec:
    _load_all()
    return _REGISTRY[op_type]


def is_registered(op_type: str) -> bool:
    _load_all()
    return op_type in _REGISTRY


def registered_ops() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)
