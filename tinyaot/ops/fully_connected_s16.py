"""FullyConnected at 16 bits (16x8): int16 input, int8 per-channel weights, int64 bias and accumulator, TFLite's
int64 requantization to int16. Shared plumbing in s16_common.py."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.quant import QuantParams
from tinyaot.core.quant16 import Q16MAX, Q16MIN, requantize_to_int16
from tinyaot.ops.common import activation_nodes, dequantized_const
from tinyaot.ops.fully_connected import fc_weight_row_inputs
from tinyaot.ops.registry import IN0, OUT0, KernelCall, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, WeightedS16, ptr


def fully_connected_s16(x, w, bias, reduced, total_shift, *, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 [batches, depth] x int8 [out, depth] + int64 bias -> int16 [batches, out]."""
    acc = np.asarray(x, np.int64) @ np.asarray(w, np.int64).T + np.asarray(bias, np.int64)
    return requantize_to_int16(acc, reduced, total_shift, act_min, act_max)


@register("FullyConnectedS16", traits=Traits(fuses_activation=True, weighted_layer=True,
                                             int16_form_of=("FullyConnected",),
                                             kernels=("tinyaot_fully_connected_s16",)))
class FullyConnectedS16(WeightedS16):
    """FullyConnected at 16 bits: Y[M, N] = X[M, K] @ W[N, K].T + B[N]."""

    internal = True

    def compression_kind(self, node):
        return "fully_connected"

    def weight_row_inputs(self, node, graph, x):
        return fc_weight_row_inputs(node, graph, x)

    def infer_shapes(self, node, graph):
        return [(graph.tensors[node.inputs[0]].shape[0], graph.tensors[node.inputs[1]].shape[0])]

    def quantize(self, node, graph, ranges):
        self._quantize_weights(node, graph, ranges, 0, f"MatMul/Gemm node {node.name!r}")

    def reference(self, node, graph, inputs):
        a = node.attrs
        return [fully_connected_s16(inputs[0], inputs[1], inputs[2], a["reduced_mult"], a["total_shift"],
                                    act_min=a["act_min"], act_max=a["act_max"])]

    def macs(self, node, graph):
        return int(graph.tensors[node.inputs[0]].shape[0] * graph.tensors[node.inputs[1]].size)

    def render(self, node, graph, cname):
        a = node.attrs
        m, k = graph.tensors[node.inputs[0]].shape
        n = graph.tensors[node.inputs[1]].shape[0]
        geom = [m, k, n, a["act_min"], a["act_max"]]
        args = [ptr("const int16_t *", IN0), f"{cname}_weights", f"{cname}_bias", f"{cname}_mult",
                f"{cname}_shift", f"{cname}_geom", ptr("int16_t *", OUT0)]
        return KernelCall("tinyaot_fully_connected_s16",
                          files=["tinyaot_fully_connected_s16.c", "tinyaot_s16_support.h"],
                          consts=self._consts(node, graph, cname, geom), template=TEMPLATE, params={"args": args})

    def oracle(self, node, graph):
        w = graph.tensors[node.inputs[1]]
        wq = QuantParams(w.quant.scale, w.quant.zero_point, 1)  # W.T is [K, N]: channels on axis 1
        n1, i1, wf = dequantized_const(node.name + "_w", np.ascontiguousarray(w.data.T), wq)
        bias = self._bias_init(node, graph, node.name + "_bf")
        mm = helper.make_node("MatMul", [node.inputs[0], wf], ["mm_out"])
        add = helper.make_node("Add", ["mm_out", bias.name], ["fc_out"])
        n3, i3, out = activation_nodes(node, "fc_out")
        return OracleLayer(n1 + [mm, add] + n3, i1 + [bias] + i3, out)
