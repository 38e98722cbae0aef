"""BatchMatMul: ONNX MatMul of two activations (attention scores Q @ K^T, weights @ V), s8 x s8 -> s8.

out[b, m, n] = requant(sum_k (lhs[b, m, k] + lhs_offset) * (rhs[b, k, n] + rhs_offset)), one per-tensor multiplier
for the real factor s_lhs * s_rhs / s_out, CMSIS-NN's batch_matmul semantics (offsets are negated zero points, the
output offset is the plain zero point). Up to two batch dimensions, broadcast by numpy rules (a batch stride of 0
re-reads the broadcast operand); adj_x / adj_y (transpose of the last two dimensions, TFLite's BATCH_MATMUL flags)
are only strides too, so no operand is ever transposed in memory.

Overflow: each term is at most 255 * 255 = 65025 in magnitude (offsets are in [-127, 128]), so the int32
accumulator holds K <= 33025 terms; a longer K is refused at compile time by the node's name.
Kernel: templates/kernels/tinyaot_batch_matmul_s8.c. `fuse_fully_connected` hands a MatMul whose right operand is
not a constant to this op (a constant one becomes FullyConnected).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import exact_matmul, quantize_multiplier, requantize_to_int8
from tinyaot.ops.common import activation_nodes, out_params
from tinyaot.ops.registry import IN0, IN1, OUT0, KernelCall, OpSpec, OracleLayer, Traits, register

KERNEL = "tinyaot_batch_matmul_s8"
MAX_K = (2**31 - 1) // (255 * 255)  # 33025 terms of |(x + off)(y + off)| <= 65025 fit int32


def batch_matmul_s8(lhs: np.ndarray, rhs: np.ndarray, *, lhs_offset: int, rhs_offset: int, output_offset: int,
                    output_mult: int, output_shift: int, adj_x: int = 0, adj_y: int = 0, act_min: int = -128,
                    act_max: int = 127) -> np.ndarray:
    """int8 [..., M, K] (adj_x: [..., K, M]) x int8 [..., K, N] (adj_y: [..., N, K]) -> int8 [..., M, N]; the batch
    dimensions broadcast as numpy's matmul does."""
    a = np.asarray(lhs).astype(np.int64) + int(lhs_offset)
    b = np.asarray(rhs).astype(np.int64) + int(rhs_offset)
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    acc = exact_matmul(a, b)  # exact: sums of at most MAX_K int8 products
    return requantize_to_int8(acc, np.int64(output_mult), np.int64(output_shift), output_offset, act_min, act_max)


def geometry(lhs_shape, rhs_shape, adj_x: int = 0, adj_y: int = 0) -> list[int]:
    """The kernel's 13 integers: out batch dims d0, d1; M, N, K; lhs strides (batch0, batch1, m, k); rhs strides
    (batch0, batch1, k, n). A broadcast batch dimension has stride 0."""
    if len(lhs_shape) < 2 or len(rhs_shape) < 2 or len(lhs_shape) > 4 or len(rhs_shape) > 4:
        raise ValueError(f"batch matmul of shapes {tuple(lhs_shape)} x {tuple(rhs_shape)}: ranks 2 to 4 only")
    ls = (1,) * (4 - len(lhs_shape)) + tuple(int(d) for d in lhs_shape)
    rs = (1,) * (4 - len(rhs_shape)) + tuple(int(d) for d in rhs_shape)
    m, k = (ls[3], ls[2]) if adj_x else (ls[2], ls[3])
    k2, n = (rs[3], rs[2]) if adj_y else (rs[2], rs[3])
    if k != k2:
        raise ValueError(f"batch matmul: inner dimensions {k} and {k2} differ")
    d = []
    for a in range(2):
        if ls[a] != rs[a] and 1 not in (ls[a], rs[a]):
            raise ValueError(f"batch matmul: batch dimensions {ls[:2]} and {rs[:2]} do not broadcast")
        d.append(max(ls[a], rs[a]))
    l_mat, r_mat = ls[2] * ls[3], rs[2] * rs[3]
    l_strides = [0 if ls[0] == 1 else ls[1] * l_mat, 0 if ls[1] == 1 else l_mat]
    r_strides = [0 if rs[0] == 1 else rs[1] * r_mat, 0 if rs[1] == 1 else r_mat]
    lsm, lsk = (1, ls[3]) if adj_x else (ls[3], 1)  # element (m, k) of op_x(lhs)
    rsk, rsn = (1, rs[3]) if adj_y else (rs[3], 1)  # element (k, n) of op_y(rhs)
    return [d[0], d[1], m, n, k, *l_strides, lsm, lsk, *r_strides, rsk, rsn]


@register("BatchMatMul", traits=Traits(fuses_activation=True, kernels=(KERNEL,)))
class BatchMatMul(OpSpec):
    """ONNX MatMul with two activation operands (numpy semantics, no adj flags: ONNX has none)."""

    internal = True  # made by fuse_fully_connected from MatMul

    def layer_class(self, node):
        return "fully connected"

    def infer_shapes(self, node, graph):
        a, b = (graph.tensors[i].shape for i in node.inputs[:2])
        try:
            g = geometry(a, b)
        except ValueError as e:
            raise TinyaotError(f"MatMul node {node.name!r}: {e}") from None
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
        return [tuple(batch) + (g[2], g[3])]

    def quantize(self, node, graph, ranges):
        x, y = (graph.tensors[i].quant for i in node.inputs[:2])
        k = graph.tensors[node.inputs[0]].shape[-1]
        if k > MAX_K:
            raise TinyaotError(f"MatMul node {node.name!r}: inner dimension {k} > {MAX_K} would overflow int32")
        qo, lo, hi = out_params(node, graph, ranges)
        mult, shift = quantize_multiplier(float(np.float64(x.s) * np.float64(y.s) / np.float64(qo.s)))
        node.attrs.update(lhs_offset=-x.zp, rhs_offset=-y.zp, output_offset=qo.zp, output_mult=mult,
                          output_shift=shift, act_min=lo, act_max=hi)

    def _args(self, node) -> dict:
        return {k: node.attrs[k] for k in ("lhs_offset", "rhs_offset", "output_offset", "output_mult", "output_shift",
                                           "act_min", "act_max")}

    def reference(self, node, graph, inputs):
        return [batch_matmul_s8(inputs[0], inputs[1], **self._args(node))]

    def macs(self, node, graph):
        g = geometry(graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape)
        return int(g[0] * g[1] * g[2] * g[3] * g[4])

    def render(self, node, graph, cname):
        a = self._args(node)
        g = geometry(graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape)
        return KernelCall(KERNEL, [IN0, IN1, OUT0, *g, a["lhs_offset"], a["rhs_offset"], a["output_offset"],
                                   a["output_mult"], a["output_shift"], a["act_min"], a["act_max"]], [KERNEL + ".c"])

    def oracle(self, node, graph):
        mm = helper.make_node("MatMul", list(node.inputs[:2]), ["bmm_out"])
        n2, i2, out = activation_nodes(node, "bmm_out")
        return OracleLayer([mm] + n2, i2, out)
