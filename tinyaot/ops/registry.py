"""Operator registry. Each op file defines one `OpSpec` subclass and registers it with
`@register("OpType", traits=Traits(...))`; importing `tinyaot.ops` imports every op file in the package.

An op file owns everything about its operator: its traits (how the layout pass, fusion and pruning treat it, which
kernel variants it has), shape inference, quantization of its parameters, the bit-exact numpy int8 reference, its
scratch size, the C kernel call it lowers to (as data: codegen renders it), its MAC count, and its float QDQ
equivalent for the onnxruntime oracle. Passes, compression, the planner and codegen only ask the registry, so
adding an operator is adding one op file (plus its kernel and test).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tinyaot.ir.verify import UnknownOp

if TYPE_CHECKING:
    from tinyaot.core.target import Target
    from tinyaot.ir import Graph, Node

_REGISTRY: dict[str, "OpSpec"] = {}


@dataclass(frozen=True)
class Traits:
    """What the passes, compression and planner need to know about an operator, declared where it is registered."""

    # How the layout pass (passes/to_nhwc.py) treats it: "spatial" (NCHW image semantics, run in NHWC),
    # "elementwise" (any layout, element by element; its operands follow the data's layout), "move" (data movement:
    # an alias or a transpose), or "fixed" (its own rule in the pass, or the logical layout).
    layout: str = "fixed"
    broadcast: bool = False  # elementwise with operands broadcast by numpy rules (constants are permuted too)
    sliding_window: bool = False  # kernel_shape / strides / pads / auto_pad of a conv or pooling window
    fuses_activation: bool = False  # ends in the int8 clamp a following Relu/Clip folds into (fuse_activation)
    per_channel: bool = False  # output channel c reads input channel c only: a pruned channel passes through
    weighted_layer: bool = False  # per-output-channel weights in input 1: pruning and compression act on them
    scratch: bool = False  # may need arena scratch (`scratch_bytes`)
    kernels: tuple[str, ...] = ()  # the C kernel variants it lowers to (templates/kernels/<name>.c)


@dataclass(frozen=True)
class Buffer:
    """A layer's arena buffer in a kernel call's arguments: input k (data inputs only, constants excluded), output
    k, or its scratch. Codegen resolves it to the address in the planned arena."""

    kind: str  # "in" | "out" | "scratch"
    index: int = 0


IN0, IN1, OUT0, SCRATCH = Buffer("in", 0), Buffer("in", 1), Buffer("out", 0), Buffer("scratch")


@dataclass(frozen=True)
class Variant:
    """One way to run a layer: `name` is what `node.attrs["variant"]` holds when it is chosen ("generic" is
    today's kernel); `cost` is the cost model's estimate of the instructions it executes for this layer on the
    target (None: unknown, never preferred over a known cost)."""

    name: str
    cost: float | None = None


GENERIC_VARIANT = "generic"


def variant_of(node: "Node") -> str:
    """The kernel variant chosen for `node` (pipeline/variants.choose_variants), "generic" if none was."""
    return node.attrs.get("variant", GENERIC_VARIANT)


@dataclass
class ConstArray:
    """Constant data in flash, as typed data: codegen writes `static const <ctype> <name>[N] = {...};`."""

    ctype: str  # int8_t | uint8_t | int16_t | int32_t
    name: str
    values: np.ndarray


@dataclass
class ConstStruct:
    """A constant struct in flash: `static const <ctype> <name> = {<fields>};` (fields: C expressions)."""

    ctype: str
    name: str
    fields: list


@dataclass
class KernelCall:
    """What one node executes, as data: codegen renders it through a layer template (templates/layers/).

    The generic template (layers/call.c.j2) writes `status |= <kernel>(<args>);` (`<kernel>(<args>);` for a kernel
    that returns void); an op whose call needs local parameter structs names its own template and gives its
    fields in `params`. Templates see `in0`, `in1`, ..., `out0`, `scratch`, `scratch_size` (the resolved buffers),
    `kernel`, `args` and `params`."""

    kernel: str  # the C kernel function, e.g. tinyaot_convolve_s8
    args: list = field(default_factory=list)  # arguments: Buffer, int, or a C expression (a constant's name)
    files: list[str] = field(default_factory=list)  # kernel .c files under templates/kernels/
    consts: list = field(default_factory=list)  # ConstArray / ConstStruct, defined at file scope (flash)
    template: str = "layers/call.c.j2"
    params: dict = field(default_factory=dict)  # fields an op-specific template uses
    returns_status: bool = True  # the kernel returns int (non-zero: it rejected its arguments)


@dataclass
class OracleLayer:
    """The float ONNX nodes equal to this layer, between DequantizeLinear of its inputs and QuantizeLinear of its
    output, in the IR's physical layout. Inputs are named by the IR input names; constants go in `initializers`."""

    nodes: list  # onnx.NodeProto
    initializers: list  # onnx.TensorProto
    output: str  # float output tensor name produced by `nodes`


class OpSpec:
    op_type: ClassVar[str] = ""
    traits: ClassVar[Traits] = Traits()
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

    def variants(self, node: "Node", graph: "Graph", target: "Target") -> tuple[Variant, ...]:
        """The kernel variants valid for this layer (its shapes, parameters and storage) on `target`, "generic"
        always among them. `render`, `scratch_bytes` and `inplace_offset` then follow `variant_of(node)`."""
        return (Variant(GENERIC_VARIANT),)

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

    def activation_range(self, node: "Node", graph: "Graph") -> tuple[float, float] | None:
        """(lo, hi) when this node is a clamp activation a producer's int8 clamp can absorb; None otherwise."""
        return None

    def oracle(self, node: "Node", graph: "Graph") -> OracleLayer | None:
        """Float ONNX equivalent for the per-layer onnxruntime check; None when nothing to check (aliases)."""
        return None


def register(op_type: str, traits: Traits | None = None):
    def deco(cls):
        cls.op_type = op_type
        if traits is not None:
            cls.traits = traits
        _REGISTRY[op_type] = cls()
        return cls

    return deco


def get_op(op_type: str) -> OpSpec:
    return _REGISTRY[op_type]


def is_registered(op_type: str) -> bool:
    return op_type in _REGISTRY


def registered_ops() -> list[str]:
    return sorted(_REGISTRY)


def traits_of(op_type: str) -> Traits:
    """The op's traits; default ones (layout "fixed", nothing else) for an op type tinyaot does not know."""
    spec = _REGISTRY.get(op_type)
    return spec.traits if spec is not None else Traits()


def ops_with(**wanted) -> tuple[str, ...]:
    """The registered op types whose traits have all the given values, e.g. ops_with(fuses_activation=True)."""
    return tuple(op for op in sorted(_REGISTRY) if all(getattr(_REGISTRY[op].traits, k) == v for k, v in wanted.items()))


def infer_shapes(node: "Node", graph: "Graph") -> list[tuple[int, ...]] | None:
    """The shape inference `ir.verify` is given (the IR does not import the ops): the op's output shapes, or None
    when it has none; UnknownOp for an op type nobody registered."""
    if node.op not in _REGISTRY:
        raise UnknownOp(node.op)
    return _REGISTRY[node.op].infer_shapes(node, graph)
