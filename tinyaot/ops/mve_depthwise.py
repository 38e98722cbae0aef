"""The Helium (MVE) variant of depthwise convolution, "mve_dw" (templates/kernels/tinyaot_depthwise_conv_s8_mve.c).

Offered by Conv.variants on targets with MVE for a depthwise layer with channel multiplier 1, dense int8 weights
and int8 activations. At compile time the input offset is folded into the bias (ops/common.py fold_input_offset:
bias + input_offset * sum of the channel's weights), so the kernel multiplies raw int8 activations by raw int8
weights in int16 lanes (VMULLB/VMULLT into int32 accumulators) and a padded tap stands for the input zero point.
The kernel computes the generic kernel's integers exactly (the reference is ops/conv.py depthwise_conv2d_s8);
tests/mve/test_mve_dw.py checks it under QEMU on mps3-an547 and its plain C fallback on the host.

Weights, multipliers and shifts are the generic kernel's arrays; the folded bias replaces the bias (same size), so
flash does not grow beyond the kernel's own code. No scratch; the output may overlap the input exactly as for the
generic depthwise kernel (pixels in raster order, one at a time).
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.common import fold_input_offset
from tinyaot.ops.compressed import is_compressed
from tinyaot.ops.registry import ConstArray, KernelCall, Variant

MVE_DW = "mve_dw"
KERNEL = "tinyaot_depthwise_conv_s8_mve"

# Cost model: instructions per multiply-accumulate under QEMU on mps3-an547 (tests/mve bench of the shared models'
# 3x3 layers: 25x5x64 3.14, 24x24x32 3.17, 12x12x64 s2 3.12, 6x6x128 3.05; 48x48x8, whose channels do not fill
# a 16-channel block, 4.29).
PER_MAC = {True: 3.15, False: 4.3}  # keyed by "channels a multiple of 16"


def mve_dw_variants(node, graph, target, macs: int) -> list:
    """[Variant("mve_dw", cost)] where the kernel applies, else []."""
    a = node.attrs
    if not target.has_mve or not a.get("depthwise"):
        return []
    x = graph.tensors[node.inputs[0]]
    w = graph.tensors[node.inputs[1]]
    o = graph.tensors[node.outputs[0]].shape
    if x.dtype != "int8" or w.dtype != "int8" or is_compressed(w) or o[3] != x.shape[3]:
        return []
    return [Variant(MVE_DW, macs * PER_MAC[o[3] % 16 == 0])]


def folded_bias(node, graph) -> np.ndarray:
    w = graph.tensors[node.inputs[1]].data  # [1, kh, kw, C]
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    return fold_input_offset(bias, np.asarray(w).reshape(-1, w.shape[3]).T, node.attrs["input_offset"])


def render_node(node, graph, cname: str, geometry) -> KernelCall:
    """Conv.render for a layer whose variant is mve_dw: the conv layer template with the folded bias."""
    a = node.attrs
    k, s, p, d = geometry
    x = graph.tensors[node.inputs[0]].shape
    w = graph.tensors[node.inputs[1]]
    o = graph.tensors[node.outputs[0]].shape
    consts = [ConstArray("int8_t", f"{cname}_weights", w.data),
              ConstArray("int32_t", f"{cname}_bias", folded_bias(node, graph)),
              ConstArray("int32_t", f"{cname}_mult", a["output_mult"]),
              ConstArray("int32_t", f"{cname}_shift", a["output_shift"])]
    params = {"ptype": "tinyaot_dw_conv_params", "context": True, "input_offset": a["input_offset"],
              "output_offset": a["output_offset"], "stride": s[:2], "padding": p[:2], "dilation": d[:2],
              "activation": [a["act_min"], a["act_max"]], "ch_mult": 1, "mult": f"{cname}_mult",
              "shift": f"{cname}_shift", "input_dims": list(x), "filter_dims": list(w.shape),
              "bias_dims": [1, 1, 1, o[3]], "output_dims": list(o), "filter": f"{cname}_weights",
              "bias": f"{cname}_bias"}
    return KernelCall(KERNEL, files=[KERNEL + ".c", "tinyaot_mve_support.h"], consts=consts,
                      template="layers/conv.c.j2", params=params)
