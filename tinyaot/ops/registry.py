"""Operator registry. Each op file defines one `OpSpec` subclass and registers it with
`@register("OpType", traits=Traits(...))`; importing `tinyaot.ops` imports every op file in the package.

An op file owns everything about its operator: its traits (how the layout pass, fusion and pruning treat it, which
kernel variants it has), shape inference, quantization of its parameters, the bit-exact numpy int8 reference, its
scratch size, the C kernel call it lowers to (as data: codegen renders it), its MAC count, and its float QDQ
equivalent for the onnxruntime oracle. Passes, compression, the planner and codegen only ask the registry, so
adding an operator is adding one op file (plus its kernel and test).

What the stages ask an op (each a method of `OpSpec` with a neutral default, overridden in the op file):
- float evaluation: `evaluate_float` (a batch of samples through the NHWC float graph: compress/refit.py);
- weighted layers (`Traits.weighted_layer`, per-output-channel weights in input 1, bias in input 2):
  `pre_activation`, `weight_row_inputs`, `compression_kind`, how compression and refitting see the layer;
- structured pruning (compress/prune.py): `out_channel_axis` (a producer's prune axis), `input_channels_prunable`
  and `prune_input_channels` (a consumer), `channel_ties`, `removed_channel_value` and `prune_tie` (an op that
  carries channels through);
- 16-bit form (compress/precision.py): `Traits.int16_form_of` on the 16-bit op names the ops it runs at 16 bits,
  `int16_form(op_type)` / `int16_forms()` answer, `adopt` rewrites a node into it, `output_bits` (a width of its
  own); `Traits.alias` (the output is input 0's bytes: its width is its input's);
- layout (passes/to_nhwc.py): `Traits.layout` picks a class rule, `layout(node, ctx)` is an op's own rule;
- 1-D lifting (passes/lower_1d.py): `lifts_1d` (`Traits.layer_1d`), `lifts_with_1d`, `lift_1d`; reshapes
  (`Traits.reshape`) read a lifted tensor directly;
- integer bounds (compress/bounds.py): `int_bounds`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

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
    alias: bool = False  # its output is always input 0's bytes under another shape: no code, shared memory
    reshape: bool = False  # it only changes the shape (the values keep their order): Reshape, Flatten, Squeeze...
    layer_1d: bool = False  # over a 3-D activation [N, C, L] it is a 1-D layer, run as the 2-D one (lower_1d)
    # reads its 2-D input 0 through weight columns, so it takes that input's columns in any order (the layout pass
    # leaves a flatten's NHWC byte order in place and permutes the weights instead)
    absorbs_column_order: bool = False
    broadcast: bool = False  # elementwise with operands broadcast by numpy rules (constants are permuted too)
    sliding_window: bool = False  # kernel_shape / strides / pads / auto_pad of a conv or pooling window
    fuses_activation: bool = False  # ends in the int8 clamp a following Relu/Clip folds into (fuse_activation)
    per_channel: bool = False  # output channel c reads input channel c only: a pruned channel passes through
    weighted_layer: bool = False  # per-output-channel weights in input 1: pruning and compression act on them
    # reads a constant input's Tensor.quant (dequantizes it or keeps its integers), so a pre-quantized model may
    # give it a quantized constant (passes/absorb_qdq.py)
    quantized_constants: bool = False
    scratch: bool = False  # may need arena scratch (`scratch_bytes`)
    kernels: tuple[str, ...] = ()  # the C kernel variants it lowers to (templates/kernels/<name>.c)
    # On a 16-bit op: the op types it computes at 16 bits (compress/precision.py gives a node at 16 bits this op).
    int16_form_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class BufferRef:
    """A layer's arena buffer in a kernel call's arguments: input k (data inputs only, constants excluded), output
    k, or its scratch. Codegen resolves it to the address in the planned arena."""

    kind: str  # "in" | "out" | "scratch"
    index: int = 0


IN0, IN1, OUT0, SCRATCH = BufferRef("in", 0), BufferRef("in", 1), BufferRef("out", 0), BufferRef("scratch")


@dataclass(frozen=True)
class Variant:
    """One way to run a layer: `name` is what `node.attrs["variant"]` holds when it is chosen ("generic" is
    today's kernel); `cost` is the cost model's estimate of the instructions it executes for this layer on the
    target (None: unknown, never preferred over a known cost)."""

    name: str
    cost: float | None = None


GENERIC_VARIANT = "generic"


@dataclass(frozen=True)
class RowWindow:
    """How a layer's output rows (NHWC, axis 1) depend on its data inputs' rows, for patch-based execution
    (plan/patch.py): output row r reads input rows r * stride - pad_top + i * dilation, i in [0, kernel), along the
    inputs' `axis` (1, or 2 for an NCHW input turned NHWC by a Transpose); rows outside the input are the layer's
    padding. An elementwise layer is (1, 1, 0, 1)."""

    kernel: int = 1
    stride: int = 1
    pad_top: int = 0
    dilation: int = 1
    axis: int = 1

    def needs(self, start: int, stop: int, in_rows: int) -> tuple[int, int]:
        """The input rows [a, b) that output rows [start, stop) read, clipped to the input's [0, in_rows)."""
        a = start * self.stride - self.pad_top
        b = (stop - 1) * self.stride - self.pad_top + (self.kernel - 1) * self.dilation + 1
        return max(a, 0), min(b, in_rows)


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

    The generic template (layers/call.c.j2) writes `TINYAOT_TRY(<kernel>(<args>));` (every kernel returns a
    tinyaot_status; the model file's TINYAOT_TRY leaves invoke at the first failure, recording the step); an op
    whose call needs local parameter structs names its own template and gives its
    fields in `params`. Templates see `in0`, `in1`, ..., `out0`, `scratch`, `scratch_size` (the resolved buffers),
    `kernel`, `args` and `params`."""

    kernel: str  # the C kernel function, e.g. tinyaot_convolve_s8
    args: list = field(default_factory=list)  # arguments: BufferRef, int, or a C expression (a constant's name)
    files: list[str] = field(default_factory=list)  # kernel .c files under templates/kernels/
    consts: list = field(default_factory=list)  # ConstArray / ConstStruct, defined at file scope (flash)
    template: str = "layers/call.c.j2"
    params: dict = field(default_factory=dict)  # fields an op-specific template uses


@dataclass
class OracleLayer:
    """The float ONNX nodes equal to this layer, between DequantizeLinear of its inputs and QuantizeLinear of its
    output, in the IR's physical layout. Inputs are named by the IR input names; constants go in `initializers`."""

    nodes: list  # onnx.NodeProto
    initializers: list  # onnx.TensorProto
    output: str  # float output tensor name produced by `nodes`


class LayoutContext(Protocol):
    """What the layout pass (passes/to_nhwc.py) offers an op's own layout rule (`OpSpec.layout`). Each tensor has a
    logical (ONNX) shape and a permutation: physical = logical.transpose(perm)."""

    graph: "Graph"
    perm: dict[str, tuple[int, ...]]  # tensor -> its physical permutation, once set
    logical: dict[str, tuple[int, ...]]  # tensor -> its ONNX shape

    def ensure(self, name: str, perm: tuple[int, ...], node: "Node") -> str:
        """`name` in physical layout `perm` (itself, or a converted copy, alias or transpose)."""

    def set_out(self, name: str, logical, perm) -> None:
        """Output `name` holds its logical shape `logical` in layout `perm`."""

    def spatial(self, node: "Node") -> None:
        """The "spatial" rule: input 0 in NHWC, the output NHWC, explicit pads; emits the node."""

    def emit(self, node: "Node") -> None:
        """The node, rewritten, goes into the graph (after the conversions its rule asked for)."""

    def readers(self, name: str) -> list:
        """The nodes that read tensor `name`."""

    def column_order(self, name: str) -> np.ndarray | None:
        """For a 2-D tensor whose columns stay in NHWC byte order, the physical column each logical one is in."""

    def const_transposed(self, name: str, suffix: str, perm) -> str:
        """A transposed copy of constant `name` (its quantization axis following)."""

    def const_operand(self, name: str, perm) -> str:
        """A broadcast constant operand in the data's layout `perm` (right-aligned to its rank, then permuted)."""


class FloatUnsupported(Exception):
    """An op, or this configuration of it, has no float evaluation (`OpSpec.evaluate_float`)."""


class OpSpec:
    op_type: ClassVar[str] = ""
    traits: ClassVar[Traits] = Traits()
    # True when the generated code may write the output over input 0 (same size, elementwise).
    alias_output_to_input: ClassVar[bool] = False
    # Its input 0 holds logits and its output probabilities (softmax): compression measures output noise on the
    # logits (compress/pipeline.py).
    logits_input: ClassVar[bool] = False
    # Set when the kernel's output parameters are fixed whatever the model gives (a pre-quantized model's own
    # output scale is then replaced, and this says why: compress/quantize.py); None: the op honours them or stops.
    fixed_output_note: ClassVar[str | None] = None
    # The output's width in bits when it is not the node's activation width (SoftmaxS16: int8 probabilities).
    output_bits: ClassVar[int | None] = None

    def infer_shapes(self, node: "Node", graph: "Graph") -> list[tuple[int, ...]] | None:
        """Output shapes from input shapes; None when this op has no inference (pre-layout ONNX-only ops)."""
        return None

    def quantize(self, node: "Node", graph: "Graph", ranges: dict[str, tuple[float, float]]) -> None:
        """Set the output tensors' quantization and the node's integer parameters (inputs already quantized)."""
        raise NotImplementedError(f"{self.op_type} cannot be quantized")

    def reference(self, node: "Node", graph: "Graph", inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError(f"{self.op_type} has no int8 reference")

    def batches_reference(self, node: "Node", graph: "Graph") -> bool:
        """Whether `reference` also takes several samples at once, stacked along axis 0 of every activation input
        and output (each a batch of one in the graph), and gives each sample exactly what a call of its own gives
        (compress/hessian.SampleRunner then runs the node once for a block of samples instead of once per sample:
        the per-call cost of the small numpy arrays is most of the reference's time). Declared per op, where its
        reference was read for it; tests/compress/test_hessian.py checks it on every op the test models hold."""
        return False

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

    def row_window(self, node: "Node", graph: "Graph") -> RowWindow | None:
        """The layer's RowWindow when it can run on a band of rows of its input (its kernel called with the band's
        dimensions and the padding the band keeps), None when it needs its whole input (patch-based execution
        leaves it out). By default elementwise layers whose data inputs all have the output's NHWC shape and whose
        constants do not vary along the rows."""
        if self.traits.layout != "elementwise" or len(node.outputs) != 1:
            return None
        out = graph.tensors[node.outputs[0]]
        if len(out.shape) != 4:
            return None
        for i in node.inputs:
            if not i:
                continue
            t = graph.tensors[i]
            if t.is_const:
                if len(t.shape) >= 3 and t.shape[-3] != 1:
                    return None
            elif t.shape != out.shape:
                return None
        return RowWindow()

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

    def adopt(self, node: "Node") -> None:
        """On a 16-bit op: make `node`, of one of the op types in `traits.int16_form_of`, this op (compress/
        precision.py); an op that serves several types records which one in the node's attributes."""
        node.op = self.op_type

    def layer_class(self, node: "Node") -> str:
        """The class the report's per-class speed figures group the layer in ("conv", "depthwise", "fully
        connected", "pooling", ...): by default the op type in lower case."""
        return node.op.lower()

    def int_bounds(self, node: "Node", graph: "Graph") -> list[tuple]:
        """(what, bound) for every int32 intermediate this node's kernel computes, for any input ((what, bound,
        limit) for a wider one, checked against `limit`); [] when it computes none (compress/bounds.py)."""
        return []

    # ---- float evaluation ----------------------------------------------------------------------------------
    def evaluate_float(self, node: "Node", graph: "Graph", inputs: list) -> list[np.ndarray]:
        """The node's outputs in float64 for a batch, on the float graph after the passes (NHWC): `inputs[k]` holds
        input k's values for N samples stacked on axis 0 (each sample a batch of one), None for a constant or
        absent input, which the op reads from the graph itself. Raises FloatUnsupported when the op, or this
        configuration of it, has no float evaluation."""
        raise FloatUnsupported(f"the float runner has no {node.op} (node {node.name!r})")

    def backward_float(self, node: "Node", graph: "Graph", inputs: list, outputs: list,
                       grad_out: list) -> tuple[list, dict]:
        """The gradients of `evaluate_float` for a batch (compress/distill.py): `inputs` and `outputs` as
        evaluate_float took and returned them, `grad_out[k]` the loss's gradient with respect to output k.
        Returns (per input, the gradient with respect to a data input, None for a constant or absent one;
        {input index: gradient} of the constant parameters a weighted layer trains, its weights (1) and bias (2)).
        Raises FloatUnsupported when the op, or this configuration of it, has no backward pass."""
        raise FloatUnsupported(f"no backward pass for {node.op} (node {node.name!r})")

    # ---- weighted layers (Traits.weighted_layer): weights in input 1, per output channel; bias in input 2 ----
    def compression_kind(self, node: "Node") -> str | None:
        """The layer kind compression specs select layers by ("conv", "depthwise", "fully_connected"); None for
        an op without weights."""
        return None

    def pre_activation(self, node: "Node", graph: "Graph", x: np.ndarray) -> np.ndarray:
        """The layer's float output before its fused activation, from input 0's values `x` for N samples."""
        raise FloatUnsupported(f"{node.op} node {node.name!r} has no float pre-activation")

    def weight_row_inputs(self, node: "Node", graph: "Graph", x: np.ndarray) -> np.ndarray | None:
        """The values each output channel's weight row multiplies, from input 0's values `x` (N samples, in the
        units wanted: real, or offset-applied integers; padding is 0): [M, row_len] shared by all channels, in
        the order of `compress/storage.rows`, or [M, taps, C] one row per channel (depthwise, multiplier 1);
        None where rows are not input channels (grouped convolution, depthwise with a multiplier)."""
        return None

    # ---- structured pruning (compress/prune.py) ------------------------------------------------------------
    def out_channel_axis(self, node: "Node", graph: "Graph") -> int | None:
        """The prune axis: the axis of the weights (input 1) holding the output channels when structured pruning
        may remove some (weights sliced on it, the bias with them); None when it may not."""
        return None

    def input_channels_prunable(self, node: "Node", graph: "Graph", t: str, channels: int) -> bool:
        """A layer with an out_channel_axis reading activation `t` (its last axis: positions x `channels`) as input
        0: whether each of those channels can be sliced out of its weights."""
        return False

    def prune_input_channels(self, node: "Node", graph: "Graph", channels: int, keep: np.ndarray, gone: np.ndarray,
                             value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(weights, bias) without input channels `gone` (of `channels`), whose constant per-channel `value`
        is folded into the bias."""
        raise NotImplementedError(f"{node.op} cannot lose input channels")

    def channel_ties(self, node: "Node", graph: "Graph", t: str, channels: int) -> list[str] | None:
        """The activations this node ties channel for channel to `t` (one of its inputs or its output), or None
        when it mixes or reshapes channels or holds weights that cannot follow them. By default an op with the
        `per_channel` trait reading one 4-D activation of `channels` channels ties its input and output."""
        if not self.traits.per_channel or t not in (node.inputs[0], node.outputs[0]):
            return None
        x, out = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
        acts = [i for i in node.inputs if i and not graph.tensors[i].is_const]
        if len(x) == 4 and x[-1] == channels and out[-1] == channels and acts == [node.inputs[0]]:
            return [node.inputs[0], node.outputs[0]]
        return None

    def position_mean(self, node: "Node", graph: "Graph") -> bool:
        """Its float output is the plain mean of its NHWC input over all spatial positions (a global average pool
        with no clamp), so an affine layer after it outputs the mean of its outputs at each position
        (compress/refit.py fits such a layer on the positions)."""
        return False

    def removed_channel_value(self, node: "Node", graph: "Graph", values: list, gone: np.ndarray) -> np.ndarray:
        """What the removed channels `gone` hold at this tie's output, given what they hold at its inputs
        (`values[k]`, None for an input outside the group). By default the value passes through."""
        return values[0]

    def prune_tie(self, node: "Node", graph: "Graph", channels: int, keep: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(input index, new constant) for the per-channel constants this tie holds, keeping channels `keep`."""
        return []

    # ---- 1-D layers (passes/lower_1d.py) -------------------------------------------------------------------
    # ---- layout (passes/to_nhwc.py) -------------------------------------------------------------------------
    def layout(self, node: "Node", ctx: LayoutContext) -> bool:
        """The op's own rule in the layout pass: put its inputs in the layouts it reads (ctx.ensure), say its
        outputs' (ctx.set_out), emit it (ctx.emit or ctx.spatial). False: the rule of its `traits.layout` class
        ("spatial", "elementwise", "move"; anything else keeps ONNX's layout)."""
        return False

    def lifts_1d(self, node: "Node", graph: "Graph") -> bool:
        """Over a 3-D activation [N, C, L] (input 0), the node is a 1-D layer that runs as the 2-D one over
        [N, C, 1, L] (`traits.layer_1d`; ReduceMean only over L)."""
        return self.traits.layer_1d

    def lifts_with_1d(self, node: "Node", graph: "Graph") -> bool:
        """Not a 1-D layer, but lifted with its 3-D neighbours for free (elementwise ops; Concat over channels)."""
        return self.traits.layout == "elementwise"

    def lift_1d(self, node: "Node", graph: "Graph") -> None:
        """Rewrite the node's attributes and constants for [N, C, 1, L] (its 3-D tensors already are 4-D). Nothing
        for ops that read per channel or per element; broadcast constants are the pass's (Traits.broadcast)."""


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


def int16_forms() -> dict[str, str]:
    """Op type -> the op type that computes it at 16 bits, as the 16-bit ops declare (Traits.int16_form_of)."""
    return {src: op for op in sorted(_REGISTRY) for src in _REGISTRY[op].traits.int16_form_of}


def int16_form(op_type: str) -> str | None:
    """The op type that computes `op_type` at 16 bits, or None when none does."""
    return int16_forms().get(op_type)


def traits_of(op_type: str) -> Traits:
    """The op's traits; default ones (layout "fixed", nothing else) for an op type tinyaot does not know."""
    spec = _REGISTRY.get(op_type)
    return spec.traits if spec is not None else Traits()


def ops_with(**wanted) -> tuple[str, ...]:
    """The registered op types whose traits have all the given values, e.g. ops_with(fuses_activation=True)."""
    return tuple(op for op in sorted(_REGISTRY)
                 if all(getattr(_REGISTRY[op].traits, k) == v for k, v in wanted.items()))


def infer_shapes(node: "Node", graph: "Graph") -> list[tuple[int, ...]] | None:
    """The shape inference `ir.verify` is given (the IR does not import the ops): the op's output shapes, or None
    when it has none; UnknownOp for an op type nobody registered."""
    if node.op not in _REGISTRY:
        raise UnknownOp(node.op)
    return _REGISTRY[node.op].infer_shapes(node, graph)
