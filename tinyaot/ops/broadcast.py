"""The shared part of the elementwise binary ops Add, Sub and Mul: numpy broadcasting, constant operands, and the
one C kernel they lower to (`tinyaot_elementwise_binary_s8`).

Broadcasting in the C kernel is a walk over strides. `broadcast_geometry` turns two physical shapes into the output
dims and each input's element strides (0 along an axis where that input has size 1, so the value repeats), drops
unit axes and merges neighbouring axes that both inputs traverse contiguously (or both repeat), and pads to rank 4.
Any numpy broadcast of up to four alternating blocks fits: [H, W, C] x [1, 1, C] becomes [1, 1, H*W, C] with strides
(0, 0, C, 1) and (0, 0, 0, 1).

A constant operand (x * per-channel scale, x + constant) is quantized per tensor to int8 on its own min/max (range
widened to include 0, like an activation), stored in flash, and goes through the same kernel as an activation; the
numpy references broadcast with numpy itself, independently of the stride walk the C does.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.quant import activation_qparams, quantize_values
from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import activation_nodes, batch_reshape, oracle_operands, out_params, set_const
from tinyaot.ops.registry import BufferRef, ConstArray, KernelCall, OpSpec, OracleLayer

BINARY_OP_CODES = {"Add": 0, "Sub": 1, "Mul": 2}  # TINYAOT_BINARY_ADD/_SUB/_MUL in tinyaot_nn_types.h


def broadcast_geometry(a_shape, b_shape) -> tuple[list[int], list[int], list[int]]:
    """(dims, strides of a, strides of b), each of length 4, for the numpy broadcast of two C-contiguous shapes."""
    out = tuple(int(d) for d in np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    rank = len(out)

    def strides(shape) -> list[int]:
        shape = (1,) * (rank - len(shape)) + tuple(int(d) for d in shape)
        st, step = [0] * rank, 1
        for j in reversed(range(rank)):
            st[j] = step if shape[j] != 1 else 0
            step *= shape[j]
        return st

    sa, sb = strides(a_shape), strides(b_shape)
    merged: list[tuple[int, int, int]] = []
    for d, x, y in ((out[j], sa[j], sb[j]) for j in range(rank) if out[j] != 1):
        if merged and merged[-1][1] == x * d and merged[-1][2] == y * d:
            # the outer axis steps over exactly one run of the inner one in both inputs (or repeats in both)
            merged[-1] = (merged[-1][0] * d, x, y)
        else:
            merged.append((d, x, y))
    if len(merged) > 4:
        raise TinyaotError(f"broadcasting {list(a_shape)} with {list(b_shape)} alternates along {len(merged)} "
                           "blocks of axes; the elementwise kernel handles up to 4")
    merged = [(1, 0, 0)] * (4 - len(merged)) + merged
    return [m[0] for m in merged], [m[1] for m in merged], [m[2] for m in merged]


def quantize_operand(graph, node, k: int) -> None:
    """Input k of a binary op as int8: a constant is quantized per tensor on its own range (a pre-quantized int8
    constant with one scale is kept as it is); an activation is already int8."""
    t = graph.tensors[node.inputs[k]]
    if not t.is_const:
        return
    if t.dtype == "int8" and t.quant is not None and t.quant.axis is None:
        return
    real = t.quant.dequantize(t.data) if t.quant is not None else np.asarray(t.data, np.float64)
    if real.size == 0 or not np.all(np.isfinite(real)):
        raise TinyaotError(f"{node.op} node {node.name!r}: constant operand {t.name!r} is empty or not finite")
    qp = activation_qparams(float(real.min()), float(real.max()))
    node.inputs[k] = set_const(graph, f"{node.name}_operand{k}", quantize_values(real, qp), "int8", qp)


class BinaryOp(OpSpec):
    """ONNX Add/Sub/Mul of two int8 tensors (activations or constants) with numpy broadcasting, in NHWC after
    `to_nhwc` (which transposes constants and brings both activations into one layout)."""

    # Safe in place over an input of the output's shape: the kernel reads element k of it before writing k
    # (the planner only aliases an input with the output's byte size, which under broadcasting is that one).
    alias_output_to_input = True
    _KEYS: tuple[str, ...] = ()

    def params(self, s1: float, s2: float, s_out: float) -> dict:
        """Multipliers and shifts of this op (the per-op part of quantize)."""
        raise NotImplementedError

    def reference_fn(self, a: np.ndarray, b: np.ndarray, **kw) -> np.ndarray:
        raise NotImplementedError

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        a, b = (graph.tensors[i].shape for i in node.inputs[:2])
        return [tuple(np.broadcast_shapes(tuple(a), tuple(b)))]

    def quantize(self, node, graph, ranges):
        if len(node.inputs) != 2 or all(graph.tensors[i].is_const for i in node.inputs):
            raise TinyaotError(f"{node.op} node {node.name!r}: needs two inputs, at least one an activation")
        for k in (0, 1):
            quantize_operand(graph, node, k)
        a, b = (graph.tensors[i] for i in node.inputs)
        broadcast_geometry(a.shape, b.shape)  # refuse shapes the kernel cannot walk here, not in codegen
        qo, lo, hi = out_params(node, graph, ranges)
        node.attrs.update(self.params(a.quant.s, b.quant.s, qo.s), input1_offset=-a.quant.zp,
                          input2_offset=-b.quant.zp, output_offset=qo.zp, act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        out = self.reference_fn(inputs[0], inputs[1], **{k: node.attrs[k] for k in self._KEYS})
        return [batch_reshape(out, graph.tensors[node.outputs[0]].shape)]

    def batches_reference(self, node, graph):
        return True  # numpy broadcasting: activations of a batch of one each, stacked alike; constants broadcast

    def _operands(self, node, graph, cname) -> tuple[list[str], list[str]]:
        """C expressions of both inputs ({inK} placeholders count the activation inputs, duplicates included, as
        codegen fills them) and the flash definitions of the constant ones."""
        exprs, consts, j = [], [], 0
        for k, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.is_const:
                consts.append(ConstArray("int8_t", f"{cname}_operand{k}", t.data))
                exprs.append(f"{cname}_operand{k}")
            else:
                exprs.append(BufferRef("in", j))
                j += 1
        return exprs, consts

    def render(self, node, graph, cname):
        a = node.attrs
        x1, x2 = (graph.tensors[i].shape for i in node.inputs)
        dims, s1, s2 = broadcast_geometry(x1, x2)
        exprs, consts = self._operands(node, graph, cname)
        params = {"op_code": BINARY_OP_CODES[node.op], "input1_offset": a["input1_offset"],
                  "input2_offset": a["input2_offset"], "output_offset": a["output_offset"],
                  "output_mult": a["output_mult"], "output_shift": a["output_shift"],
                  "activation": [a["act_min"], a["act_max"]], "dims": dims, "strides1": s1, "strides2": s2,
                  "operands": exprs}
        params.update({k: a.get(k, 0) for k in ("input1_mult", "input1_shift", "input2_mult", "input2_shift",
                                                "left_shift")})
        return KernelCall("tinyaot_elementwise_binary_s8", files=["tinyaot_elementwise_binary_s8.c"], consts=consts,
                          template="layers/elementwise_binary.c.j2", params=params)

    def params_bytes(self, node, graph):
        # constant operands live in flash next to the code
        return int(sum(graph.tensors[i].nbytes for i in node.inputs if graph.tensors[i].is_const))

    def oracle(self, node, graph):
        nodes, inits, names = oracle_operands(graph, node, "operand")
        nodes.append(helper.make_node(node.op, names, ["binary_out"]))
        n2, i2, out = activation_nodes(node, "binary_out")
        return OracleLayer(nodes + n2, inits + i2, out)
