"""Kernel choice and flash constants for weights kept in a compressed storage (tinyaot/compress/storage.py).

Conv and FullyConnected call `compressed_filter()` from render(): for a weight tensor whose storage is not dense it
names the kernel of that kind (templates/kernels/tinyaot_*_{s4,s8_clustered,s8_sparse,s8_rle}.c), and gives the C
constants that hold the storage's arrays as they are (nothing is decoded at compile time: the kernels decode on
the fly) plus the expression to pass as the kernel's filter argument. `None` for dense weights, whose code path
is unchanged.

Planner facts of these kernels (tinyaot_nn.h) are kept here beside their C: the conv kernels' scratch (a
four-pixel im2col column) and the pixel groups both conv and depthwise produce at once, which bound how far an
output may overlap its input.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinyaot.ops.registry import ConstArray, ConstStruct

SUFFIX = {"int4": "s4", "clustered": "s8_clustered", "sparse_bitmap": "s8_sparse", "sparse_rle": "s8_rle"}
BASE = {"conv": "tinyaot_convolve", "depthwise": "tinyaot_depthwise_conv", "fc": "tinyaot_fully_connected"}
HEADER = "tinyaot_nn_compressed.h"
CONV_PIXELS_AT_ONCE = 4  # TINYAOT_MAC4's four column lanes
DW_PIXELS_AT_ONCE = 16  # TINYAOT_DW_GROUP


@dataclass
class CompressedFilter:
    kernel: str  # C function
    files: list[str]  # kernel file and the shared header, under templates/kernels/
    consts: list  # the storage's arrays (and struct), flash: ConstArray / ConstStruct
    arg: str  # what to pass as the kernel's `filter` argument


def is_compressed(tensor) -> bool:
    st = getattr(tensor, "storage", None)
    return st is not None and st.kind != "dense"


def kernel_name(kind: str, op: str) -> str:
    """op: "conv", "depthwise" or "fc"; kind: a storage kind other than dense."""
    if kind not in SUFFIX:
        raise ValueError(f"no kernel for weight storage kind {kind!r}")
    return f"{BASE[op]}_{SUFFIX[kind]}"


def conv_scratch_bytes(kernel_hw, in_ch_per_group: int) -> int:
    """= tinyaot_convolve_<kind>_get_buffer_size: a column of K = kh*kw*in_ch/groups positions (rounded up to
    even), each four pixels as int16. Optional for the kernel (it falls back to a 16-position stack column)."""
    k = int(kernel_hw[0]) * int(kernel_hw[1]) * int(in_ch_per_group)
    return 8 * (k + k % 2)


def compressed_filter(tensor, cname: str, op: str) -> CompressedFilter | None:
    """Kernel, constants and filter argument for `tensor`'s storage; None when it is dense (or has none)."""
    if not is_compressed(tensor):
        return None
    st = tensor.storage
    if "depthwise" in st.meta and bool(st.meta["depthwise"]) != (op == "depthwise"):
        raise ValueError(f"{tensor.name!r}: storage rows taken {'across' if st.meta['depthwise'] else 'along'} "
                         f"the filter do not fit a {op} kernel")  # rows() differ: a compression bug
    kernel = kernel_name(st.kind, op)
    a = st.arrays
    name = f"{cname}_weights"
    if st.kind == "int4":
        consts = [ConstArray("uint8_t", f"{name}_packed", a["packed"])]
        arg = f"{name}_packed"
    elif st.kind == "clustered":
        m = st.meta
        consts = [ConstArray("int8_t", f"{name}_codebooks", np.asarray(a["codebooks"]).reshape(-1)),
                  ConstArray("uint8_t", f"{name}_packed", a["packed"]),
                  ConstStruct("tinyaot_clustered_weights", name, [f"{name}_codebooks", f"{name}_packed", int(m["bits"]),
                                                                  int(m["k"]), int(m["group_size"]),
                                                                  int(m["row_bytes"])])]
        arg = f"&{name}"
    elif st.kind == "sparse_bitmap":
        consts = [ConstArray("uint8_t", f"{name}_bitmap", a["bitmap"]),
                  ConstArray("int8_t", f"{name}_values", a["values"]),
                  ConstArray("int32_t", f"{name}_rows", a["row_offsets"]),
                  ConstStruct("tinyaot_sparse_weights", name, [f"{name}_bitmap", f"{name}_values", f"{name}_rows"])]
        arg = f"&{name}"
    else:  # sparse_rle
        consts = [ConstArray("uint8_t", f"{name}_runs", a["runs"]), ConstArray("int8_t", f"{name}_values", a["values"]),
                  ConstArray("int32_t", f"{name}_rows", a["row_offsets"]),
                  ConstStruct("tinyaot_rle_weights", name, [f"{name}_runs", f"{name}_values", f"{name}_rows"])]
        arg = f"&{name}"
    # HEADER includes tinyaot_dw3_support.h (the 3x3 depthwise requantization it shares with the dense kernel)
    return CompressedFilter(kernel, [kernel + ".c", HEADER, "tinyaot_dw3_support.h"], consts, arg)


__all__ = ["CompressedFilter", "compressed_filter", "conv_scratch_bytes", "is_compressed", "kernel_name",
           "CONV_PIXELS_AT_ONCE", "DW_PIXELS_AT_ONCE"]
