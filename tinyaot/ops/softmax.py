"""Softmax: bit-exact numpy reference of TFLite's integer int8 softmax (s8 in, s8 out, scale 1/256, zero point -128).

Per row: d = x - max(x) <= 0; differences below diff_min give exp = 0 (output -128); the others are rescaled to
Q5.26 by (input_mult, input_left_shift) (see `fixedpoint.softmax_params`), exponentiated in fixed point
(`exp_on_negative_values`, Q0.31), summed as Q12.19, and each exp is multiplied by the fixed-point reciprocal of the
sum and rounded to 1/256 steps. The fixed-point exponent approximates exp within 2.2e-7 absolute (measured over the
whole Q5.26 range) and the reciprocal within 3e-9, far below the 1/256 output step: against a float softmax on the same
int8 input the result differs by at most one output step (measured on random rows in tests/ops).
"""
from __future__ import annotations

import numpy as np

from tinyaot.core.fixedpoint import (
    SOFTMAX_ACCUM_INTEGER_BITS,
    exp_on_negative_values,
    get_reciprocal,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from onnx import helper, numpy_helper
from tinyaot.core.errors import TinyaotError
from tinyaot.ir import QuantParams
from tinyaot.core.fixedpoint import softmax_params
from tinyaot.ops.intbounds import SOFTMAX_TERM_MAX
from tinyaot.ops.registry import IN0, KernelCall, OpSpec, OracleLayer, OUT0, register, Traits

# Each exp term is at most 1.0 = 2**19 in Q12.19, so 4095 terms keep the int32 sum below 2**31.
MAX_ROW_SIZE = (1 << SOFTMAX_ACCUM_INTEGER_BITS) - 1


def softmax_s8(input: np.ndarray, *, input_mult: int, input_left_shift: int, diff_min: int) -> np.ndarray:
    """int8 [rows, row_size] -> int8 [rows, row_size], softmax along the last axis."""
    x = np.asarray(input).astype(np.int64)
    if x.ndim != 2:
        raise ValueError(f"softmax_s8 expects [rows, row_size], got shape {x.shape}")
    if x.shape[1] > MAX_ROW_SIZE:
        raise ValueError(f"softmax_s8: row size {x.shape[1]} > {MAX_ROW_SIZE} would overflow the Q12.19 sum")
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= int(diff_min)
    # diff >= diff_min guarantees diff * 2**left_shift fits int32 (diff_min is chosen for that), so the
    # "greater than one" multiply needs no saturation before the high multiply.
    scaled = saturating_rounding_doubling_high_mul(np.where(used, diff, 0) << int(input_left_shift), int(input_mult))
    exps = exp_on_negative_values(scaled)  # Q0.31
    # sum of exps in Q12.19: each term is divided by 2**12 with rounding (gemmlowp Rescale)
    sum_of_exps = np.where(used, rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS), 0).sum(axis=1, keepdims=True)
    scale, num_bits_over_unit = get_reciprocal(sum_of_exps, SOFTMAX_ACCUM_INTEGER_BITS)
    # exp * (1/sum) in Q0.31, then down to units of 2**-8 (the 1/256 output scale)
    out = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scale, exps), num_bits_over_unit + 31 - 8) - 128
    out = np.where(used, np.clip(out, -128, 127), -128)
    return out.astype(np.int8)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
@register("Softmax", traits=Traits(kernels=("tinyaot_softmax_s8", "tinyaot_softmax_strided_s8")))
class Softmax(OpSpec):
    """ONNX Softmax over any axis (opset 13+ semantics: that one axis; `to_nhwc` maps it to the physical axis).
    Over the innermost axis the rows are contiguous (tinyaot_softmax_s8); over another one the strided kernel reads
    each row `inner` elements apart, so no transpose is ever emitted. The output parameters are TFLite's fixed ones,
    scale 1/256 and zero point -128, so the 256 levels span [0, 1)."""

    logits_input = True
    fixed_output_note = "the int8 softmax kernel outputs scale 1/256, zero point -128"

    alias_output_to_input = True  # each row is read (max, sum) before any of it is written
    # Measured against onnxruntime's float softmax on the shared models' real inputs (see tests/ops):
    # the fixed-point exponent keeps every output within one step of round-half-to-even of the float value.
    oracle_tolerance = 1

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        axis = int(node.attrs.get("axis", -1)) % len(x.shape)
        if x.shape[axis] > MAX_ROW_SIZE:
            raise TinyaotError(f"Softmax node {node.name!r}: axis of {x.shape[axis]} > {MAX_ROW_SIZE} elements would "
                               "overflow the Q12.19 sum")
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(1.0 / 256, -128)
        # beta: TFLite's SOFTMAX option (softmax(beta * x)); ONNX's Softmax has none
        mult, shift, diff_min = softmax_params(x.quant.s, float(node.attrs.get("beta", 1.0)))
        node.attrs.update(input_mult=mult, input_left_shift=shift, diff_min=diff_min)

    def _rows(self, node, graph):
        """(outer, axis_len, inner): the tensor seen as [outer, axis_len, inner], softmax along the middle."""
        x = graph.tensors[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", -1)) % len(x)
        return int(np.prod(x[:axis])), int(x[axis]), int(np.prod(x[axis + 1:]))

    def reference(self, node, graph, inputs):
        _, n, inner = self._rows(node, graph)
        outer = inputs[0].size // (n * inner)  # the graph's, or that times the samples of a batch
        a = node.attrs
        rows = inputs[0].reshape(outer, n, inner).transpose(0, 2, 1).reshape(-1, n)
        y = softmax_s8(rows, input_mult=a["input_mult"], input_left_shift=a["input_left_shift"],
                       diff_min=a["diff_min"])
        return [y.reshape(outer, inner, n).transpose(0, 2, 1).reshape(inputs[0].shape)]

    def batches_reference(self, node, graph):
        # rows along any axis but the batch's
        return int(node.attrs.get("axis", -1)) % len(graph.tensors[node.inputs[0]].shape) != 0

    def layout(self, node, ctx):
        """Its input's layout, whatever it is: the axis made physical (the strided kernel needs no transpose)."""
        x = node.inputs[0]
        logical = ctx.logical[x]
        axis = int(node.attrs.get("axis", -1)) % len(logical)
        perm = ctx.perm[x]
        if int(ctx.graph.meta.get("opset", 13)) < 13 and any(d != 1 for d in logical[axis + 1:]):
            # opset < 13 normalises the block of all axes from `axis` on as one row; tinyaot has no such kernel
            raise TinyaotError(f"Softmax node {node.name!r}: opset < 13 softmax over several trailing axes (flattened "
                               "from axis) is not supported")
        node.attrs["axis"] = perm.index(axis)
        ctx.set_out(node.outputs[0], ctx.graph.tensors[node.outputs[0]].shape, perm)
        ctx.emit(node)
        return True

    def int_bounds(self, node, graph):
        """The sum of exponentials in Q12.19, each term at most 2**19 (rounded from Q0.31): row * 2**19."""
        x = graph.tensors[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", -1)) % len(x)
        row = int(np.prod(x[axis:]))
        return [(f"sum of {row} exponentials in Q12.19", row * SOFTMAX_TERM_MAX)]

    def render(self, node, graph, cname):
        outer, n, inner = self._rows(node, graph)
        a = node.attrs
        q = [a["input_mult"], a["input_left_shift"], a["diff_min"], OUT0]
        if inner == 1:
            return KernelCall("tinyaot_softmax_s8", [IN0, outer, n, *q], ["tinyaot_softmax_s8.c"])
        return KernelCall("tinyaot_softmax_strided_s8", [IN0, outer, n, inner, *q],
                          ["tinyaot_softmax_strided_s8.c"])

    def oracle(self, node, graph):
        axis = int(node.attrs.get("axis", -1)) % len(graph.tensors[node.inputs[0]].shape)
        beta = float(node.attrs.get("beta", 1.0))
        if beta == 1.0:
            return OracleLayer([helper.make_node("Softmax", [node.inputs[0]], ["sm_out"], axis=axis)], [], "sm_out")
        b = numpy_helper.from_array(np.asarray(beta, np.float32), node.name + "_beta")
        return OracleLayer([helper.make_node("Mul", [node.inputs[0], b.name], ["sm_scaled"]),
                            helper.make_node("Softmax", ["sm_scaled"], ["sm_out"], axis=axis)], [b], "sm_out")
