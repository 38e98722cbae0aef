"""MaxPool at 16 bits: the input's parameters kept, comparisons only, a fused activation as a clamp."""
from __future__ import annotations

import numpy as np

from tinyaot.core.errors import TinyaotError
from tinyaot.core.quant16 import Q16MAX, Q16MIN, activation_clamp16
from tinyaot.ops.pool import pool_windows
from tinyaot.ops.registry import Traits, register
from tinyaot.ops.s16_common import PoolS16, require16


def maxpool_s16(x, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw, act_min=Q16MIN,
                act_max=Q16MAX) -> np.ndarray:
    """int16 NHWC max pool (input parameters kept; padded taps never win)."""
    win, valid = pool_windows(np.asarray(x), Q16MIN - 1, kernel_hw, stride_hw, pad_top_left, output_hw)
    if not np.all(valid.any(axis=(2, 3))):
        raise ValueError("maxpool_s16: a window lies entirely in the padding")
    return np.clip(win.max(axis=(3, 4)), int(act_min), int(act_max)).astype(np.int16)


@register("MaxPoolS16", traits=Traits(fuses_activation=True, per_channel=True, int16_form_of=("MaxPool",),
                                      kernels=("tinyaot_max_pool_s16",)))
class MaxPoolS16(PoolS16):
    """MaxPool at 16 bits: the input's parameters kept, a fused activation as a clamp."""

    internal = True
    c_kernel = "tinyaot_max_pool_s16"
    onnx_pool = "MaxPool"

    def _geometry(self, node, graph):
        a = node.attrs
        if tuple(a.get("dilations", (1, 1))) != (1, 1) or int(a.get("ceil_mode", 0)):
            raise TinyaotError(f"MaxPool node {node.name!r}: dilation or ceil_mode are not supported with "
                               "--activation-bits 16")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), list(a.get("pads", (0, 0, 0, 0)))

    def quantize(self, node, graph, ranges):
        x = require16(graph, node)
        graph.tensors[node.outputs[0]].quant = x.quant
        lo, hi = activation_clamp16(x.quant, node.attrs.get("activation"))
        node.attrs.update(act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        return [maxpool_s16(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]),
                            output_hw=graph.tensors[node.outputs[0]].shape[1:3], act_min=node.attrs["act_min"],
                            act_max=node.attrs["act_max"])]
