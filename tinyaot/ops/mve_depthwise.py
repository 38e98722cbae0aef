"""The Helium (MVE) variant of depthwise convolution, "mve_dw" (templates/kernels/tinyaot_depthwise_conv_s8_mve.c).

Offered by Conv.variants on targets with MVE for a depthwise layer with channel multiplier 1, dense int8 weights
and int8 activations. At compile time the input offset is folded into the bias (ops/common.py fold_input_offset:
bias + input_offset * sum of the channel's weights), so for a window wholly inside the input the kernel multiplies
raw int8 activations by raw int8 weights in int16 lanes (VMULLB/VMULLT into int32 accumulators); a window reaching
into the padding starts from the plain bias and visits its valid taps on x - zero point. The kernel computes the
generic kernel's integers exactly (the reference is ops/conv.py depthwise_conv2d_s8); tests/mve/test_mve_dw.py
checks it under QEMU on mps3-an547 and its plain C fallback on the host.

The weights are the generic kernel's array; bias, multipliers and shifts become one table laid out for the vector
lanes (`dw_table`: folded bias, bias, multiplier and shift per channel, 16 bytes per channel instead of 12). No
scratch; the output may overlap the input exactly as for the generic depthwise kernel (pixels in raster order, one
or two at a time, each reading only its window).
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.common import fold_input_offset
from tinyaot.ops.compressed import is_compressed
from tinyaot.ops import decoded
from tinyaot.ops.registry import ConstArray, KernelCall, Variant

MVE_DW = "mve_dw"
KERNEL = "tinyaot_depthwise_conv_s8_mve"

MAX_TAPS = 64  # DWM_MAX_TAPS: the kernel's per-layer table of tap steps lives on the stack

# Cost model: instructions per multiply-accumulate under QEMU on mps3-an547 (3x3 layers of the shared models' shapes,
# measured with random data and the shorter requantization: 25x5x64 1.77, 24x24x32 1.61, 6x6x128 1.64; 48x48x8,
# whose channels do not fill a 16-channel block, 1.84).
PER_MAC = {True: 1.7, False: 1.85}  # keyed by "channels a multiple of 16"


def mve_dw_variants(node, graph, target, macs: int) -> list:
    """[Variant("mve_dw", cost)] where the kernel applies, else []."""
    a = node.attrs
    if not target.has_mve or not a.get("depthwise"):
        return []
    x = graph.tensors[node.inputs[0]]
    w = graph.tensors[node.inputs[1]]
    o = graph.tensors[node.outputs[0]].shape
    comp = is_compressed(w)  # int4 / clustered weights decoded into the scratch (ops/decoded.py)
    if (x.dtype != "int8" or w.dtype != "int8" or (comp and not (_decodable(w) and decoded.stack_ok(target)))
            or o[3] != x.shape[3]
            or not -128 <= a["input_offset"] <= 128 or w.shape[1] * w.shape[2] > MAX_TAPS):
        return []
    return [Variant(MVE_DW, macs * PER_MAC[o[3] % 16 == 0] + (decoded.decode_cost(w, True) if comp else 0.0))]


def _decodable(w) -> bool:
    """The 1HWC layout's regions are runs of one codebook group's channels: the groups must tile the channels."""
    return decoded.decodable(w, 1) and (decoded.group_size(w) >= w.shape[3]
                                        or w.shape[3] % decoded.group_size(w) == 0)


def _regions(w) -> tuple[int, int, int]:
    """(region, div, mod) of the 1HWC layout: tap rows of C channels, a region per codebook group's channels."""
    g = decoded.group_size(w)
    c = w.shape[3]
    return (c, 1, 1) if g >= c else (g, 1, c // g)


def scratch_bytes(node, graph) -> int:
    """The decoded weights of a compressed layer (kh * kw * channels bytes) unless they fit the kernel's stack tile
    (ops/decoded.py); dense weights need none."""
    w = graph.tensors[node.inputs[1]]
    return int(w.size) if is_compressed(w) and not decoded.on_stack(int(w.size)) else 0


GROUP = 16  # table entries per group of four lanes: folded bias, bias, multiplier, shift


def table_slots(channels: int) -> np.ndarray:
    """slot[c]: where channel c's folded bias sits in the kernel's table (its bias, multiplier and shift 4, 8 and 12
    entries later); the C twin is tinyaot_depthwise_conv_s8_mve_table_slot. Lanes: per
    16-channel block the groups c + {0,2,4,6}, {1,3,5,7}, {8,10,12,14}, {9,11,13,15}; then an 8-channel block's two
    groups if at least eight channels remain; then groups of four in order, the last one padded."""
    c = np.arange(channels)
    c16 = channels - channels % 16
    c8 = c16 + 8 if channels % 16 >= 8 else c16
    r = c % 16
    s16 = (c // 16) * 4 * GROUP + ((r >= 8) * 2 + (r & 1)) * GROUP + ((r & 7) >> 1)
    r8 = c - c16
    s8 = c16 // 4 * GROUP + (r8 & 1) * GROUP + (r8 >> 1)
    r4 = c - c8
    s4 = c8 // 4 * GROUP + (r4 // 4) * GROUP + r4 % 4
    return np.where(c < c16, s16, np.where(c < c8, s8, s4))


def dw_table(folded_bias, bias, mult, shift) -> np.ndarray:
    """The kernel's per-channel table: per group of four lanes, the lanes' folded bias (for windows inside the
    input), bias (for windows reaching into the padding), multiplier and shift; unused lanes of the last group hold
    zeros and shift -1."""
    fb = np.asarray(folded_bias, np.int64).reshape(-1)
    channels = fb.size
    b = np.zeros(channels, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    m = np.broadcast_to(np.asarray(mult, np.int64).reshape(-1), (channels,))
    sh = np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), (channels,))
    slots = table_slots(channels)
    table = np.zeros(GROUP * -(-channels // 4), np.int64)
    # unused lanes of the last group: shift -1, so that the kernel's scan for the largest shift (which picks its
    # shorter requantizations) sees only the real channels' signs
    table.reshape(-1, GROUP)[:, 12:16] = -1
    for k, values in enumerate((fb, b, m, sh)):
        table[slots + 4 * k] = values
    return table.astype(np.int32)


def layer_table(node, graph) -> np.ndarray:
    """dw_table of a layer: its bias with the input offset folded in (ops/common.py fold_input_offset)."""
    a = node.attrs
    w = graph.tensors[node.inputs[1]].data  # [1, kh, kw, C]
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    folded = fold_input_offset(bias, np.asarray(w).reshape(-1, w.shape[3]).T, a["input_offset"])
    return dw_table(folded, bias, a["output_mult"], a["output_shift"])


def render_node(node, graph, cname: str, geometry) -> KernelCall:
    """Conv.render for a layer whose variant is mve_dw: the conv layer template with the folded bias."""
    a = node.attrs
    k, s, p, d = geometry
    x = graph.tensors[node.inputs[0]].shape
    w = graph.tensors[node.inputs[1]]
    o = graph.tensors[node.outputs[0]].shape
    consts = [ConstArray("int8_t", f"{cname}_weights", w.data),
              ConstArray("int32_t", f"{cname}_table", layer_table(node, graph))]
    kernel, files, filt = KERNEL, [KERNEL + ".c", "tinyaot_mve_support.h"], f"{cname}_weights"
    if is_compressed(w):  # the codes in the 1HWC layout, decoded into the scratch first
        codes = decoded.layout_codes(w, w.data, *_regions(w), cname)
        consts = codes.consts + consts[1:]
        kernel, files, filt = KERNEL + "_decoded", [KERNEL + "_decoded.c", *decoded.FILES, *files], codes.arg
    params = {"ptype": "tinyaot_dw_conv_params", "context": True, "input_offset": a["input_offset"],
              "output_offset": a["output_offset"], "stride": s[:2], "padding": p[:2], "dilation": d[:2],
              "activation": [a["act_min"], a["act_max"]], "ch_mult": 1, "mult": "NULL", "shift": "NULL",
              "input_dims": list(x), "filter_dims": list(w.shape),
              "bias_dims": [1, 1, 1, o[3]], "output_dims": list(o), "filter": filt,
              "bias": f"{cname}_table"}
    return KernelCall(kernel, files=files, consts=consts, template="layers/conv.c.j2", params=params)
