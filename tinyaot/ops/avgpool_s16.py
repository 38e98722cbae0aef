"""AveragePool and GlobalAveragePool at 16 bits: the window sum in int32 (|sum| <= 32768 * kh * kw, bounded below
2**31), requantized onto its own output parameters when every window is full (as the int8 pool does), otherwise
divided by the count of real inputs, rounded half away from zero, keeping the input's parameters."""
from __future__ import annotations

import numpy as np

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from tinyaot.core.quant16 import Q16MAX, Q16MIN, activation_clamp16
from tinyaot.ops.pool import pool_windows
from tinyaot.ops.registry import Traits, register
from tinyaot.ops.s16_common import PoolS16, out16, require16


def avgpool_s16(x, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw, requant=False, mult=0,
                shift=0, act_min=Q16MIN, act_max=Q16MAX) -> np.ndarray:
    """int16 NHWC average pool. requant: full windows only, sum requantized by (mult, shift) = s_in / (s_out * k);
    otherwise sum / count of real inputs rounded half away from zero (input parameters kept)."""
    win, valid = pool_windows(np.asarray(x), 0, kernel_hw, stride_hw, pad_top_left, output_hw)
    total = win.sum(axis=(3, 4))
    if requant:
        if not valid.all():
            raise ValueError("avgpool_s16: a requantizing pool has no padding")
        out = multiply_by_quantized_multiplier(total, mult, shift)
    else:
        count = valid.sum(axis=(2, 3)).astype(np.int64)[None, :, :, None]
        if np.any(count == 0):
            raise ValueError("avgpool_s16: a window lies entirely in the padding")
        half = count // 2
        out = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    return np.clip(out, int(act_min), int(act_max)).astype(np.int16)


@register("AveragePoolS16", traits=Traits(fuses_activation=True, per_channel=True,
                                          int16_form_of=("AveragePool", "GlobalAveragePool"),
                                          kernels=("tinyaot_avgpool_s16",)))
class AveragePoolS16(PoolS16):
    """AveragePool / GlobalAveragePool at 16 bits (node.attrs["global"] for the latter)."""

    internal = True
    c_kernel = "tinyaot_avgpool_s16"
    onnx_pool = "AveragePool"
    oracle_attrs = {"count_include_pad": 0}

    def adopt(self, node):
        if node.op == "GlobalAveragePool":
            node.attrs["global"] = True
        super().adopt(node)

    def _geometry(self, node, graph):
        if node.attrs.get("global"):
            _, h, w, _ = graph.tensors[node.inputs[0]].shape
            return (h, w), (1, 1), [0, 0, 0, 0]
        a = node.attrs
        if tuple(a.get("dilations", (1, 1))) != (1, 1) or int(a.get("ceil_mode", 0)) or (
                int(a.get("count_include_pad", 0)) and any(a.get("pads", (0, 0, 0, 0)))):
            raise TinyaotError(f"AveragePool node {node.name!r}: dilation, ceil_mode or count_include_pad with "
                               "padding are not supported with --activation-bits 16")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0)))

    def quantize(self, node, graph, ranges):
        x = require16(graph, node)
        k, s, p = self._geometry(node, graph)
        o = graph.tensors[node.outputs[0]].shape
        full = not any(p) and all((o[1 + a] - 1) * s[a] + k[a] <= x.shape[1 + a] for a in range(2))
        if full and node.outputs[0] in ranges:
            qo = out16(node, graph, ranges)
            mult, shift = quantize_multiplier(np.float64(x.quant.s) / (np.float64(qo.s) * k[0] * k[1]))
            node.attrs.update(requant=1, mult=mult, shift=shift)
        else:
            graph.tensors[node.outputs[0]].quant = x.quant
            lo, hi = activation_clamp16(x.quant, node.attrs.get("activation"))
            node.attrs.update(requant=0, mult=0, shift=0, act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        a = node.attrs
        return [avgpool_s16(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]),
                            output_hw=graph.tensors[node.outputs[0]].shape[1:3], requant=bool(a["requant"]),
                            mult=a["mult"], shift=a["shift"], act_min=a["act_min"], act_max=a["act_max"])]

    def int_bounds(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return [(f"window sum of {k[0] * k[1]} int16 values", 32768 * k[0] * k[1])]

    def macs(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return int(np.prod(graph.tensors[node.outputs[0]].shape) * k[0] * k[1])

    def _requant_geometry(self, node):
        a = node.attrs
        return [a["requant"], a["mult"], a["shift"]]
