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

import copy
from dataclasses import dataclass

import numpy as np

from tinyaot.core.fixedpoint import requantize_to_int8
from tinyaot.ops.common import fold_input_offset, fold_requant_table
from tinyaot.ops.registry import ConstArray, ConstStruct

SUFFIX = {"int4": "s4", "int5": "s5", "clustered": "s8_clustered", "sparse_bitmap": "s8_sparse",
          "sparse_rle": "s8_rle", "sparse_block": "s8_block"}
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
    requant: tuple | None = None  # (bias, mult, shift) the kernel takes instead of the layer's own (block kernels)


def is_compressed(tensor) -> bool:
    st = getattr(tensor, "storage", None)
    return st is not None and st.kind != "dense"


def kernel_name(kind: str, op: str, bits: int | None = None) -> str:
    """op: "conv", "depthwise" or "fc"; kind: a storage kind other than dense; bits: a clustered layer's index
    width (5-bit fully connected layers have an entry of their own, so the 4-bit one links without its code)."""
    if kind not in SUFFIX:
        raise ValueError(f"no kernel for weight storage kind {kind!r}")
    return f"{BASE[op]}_{SUFFIX[kind]}" + ("5" if kind == "clustered" and op == "fc" and bits == 5 else "")


def block_scratch_bytes(k: int) -> int:
    """= tinyaot_convolve_s8_block_get_buffer_size / tinyaot_fully_connected_s8_block_...: the int16 column of two
    pixels (or input rows), K rounded up to whole groups of four positions."""
    return 4 * 2 * (-(-int(k) // 4) * 4)


# Cost model of the block kernels, instructions under QEMU per unit of work, keyed by target.has_dsp (fitted to
# kws_dscnn's and ad_fc_autoencoder's layers at --prune 0.5 --prune-pattern block on mps2-an386 and mps2-an385):
# per stored multiply-accumulate (a stored block's 16 products per pixel), per output value (bias, the block-row's
# call and requantization), per window value copied into the two-pixel column.
_BLOCK_COST = {True: (1.22, 28.0, 1.9), False: (2.6, 36.0, 3.0)}
# the 2x1 kernel (tinyaot_convolve_s8_block2x1.c): per stored multiply-accumulate (two per kept position and pixel),
# per output value, per window value copied
_BLOCK2X1_COST = {True: (1.9, 30.0, 2.5), False: (3.0, 36.0, 3.0)}


# Board-independent estimates the compression's choices use under --prune-pattern block2x1 (each convolution's
# sparsity, and whether it is stored in 2x1 blocks or dense: compress/pipeline.py), instructions fitted to
# ic_resnet8's 3x3 layers on mps2-an386 (the fold kernel dense; the 2x1 kernel at 44-72 % sparsity): dense 1.37 per
# multiply-accumulate and 36 per output value; 2x1 1.63 per kept multiply-accumulate, 41 per output value (bias,
# requantization, the calls per channel pair) and 2.1 per window value copied into the two-pixel column.
DENSE_CONV_ESTIMATE = (1.37, 36.0)
BLOCK2X1_CONV_ESTIMATE = (1.63, 41.0, 2.1)


def conv_estimate(pixels: int, k: int, out_c: int, kept: float | None = None) -> float:
    """Estimated instructions of a convolution of `pixels` output pixels, rows of k positions and out_c channels:
    dense (kept None), or in 2x1 blocks keeping that fraction of its weights (BLOCK2X1_CONV_ESTIMATE)."""
    macs, outs = float(pixels) * k * out_c, float(pixels) * out_c
    if kept is None:
        return macs * DENSE_CONV_ESTIMATE[0] + outs * DENSE_CONV_ESTIMATE[1]
    per_mac, per_out, per_value = BLOCK2X1_CONV_ESTIMATE
    return macs * kept * per_mac + outs * per_out + float(pixels) * k * per_value


def block_shape(st) -> tuple[int, int]:
    """(output channels, positions) of a sparse_block storage's blocks (compress/storage.py: meta "block", else 4x4)."""
    return tuple(int(v) for v in st.meta.get("block", (4, 4)))


def block_positions(st) -> list[np.ndarray]:
    """Per block-row the absolute block column of each stored block (the deltas summed; 2x1: the bitmap's set bits,
    without an odd pair's filler block)."""
    if block_shape(st) == (2, 1):
        bits = np.unpackbits(st.arrays["bitmap"].reshape(-1, int(st.meta["row_bytes"])), axis=1, bitorder="little")
        return [np.flatnonzero(b) for b in bits]
    deltas, counts = st.arrays["deltas"].astype(np.int64), st.arrays["counts"].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return [np.cumsum(deltas[starts[r]:starts[r + 1]]) for r in range(counts.size)]


def is_2x1(tensor) -> bool:
    """Whether the tensor's storage is sparse_block in 2x1 blocks (the block2x1 pattern's convolutions)."""
    st = getattr(tensor, "storage", None)
    return st is not None and st.kind == "sparse_block" and block_shape(st) == (2, 1)


def block2x1_scratch_bytes(k: int, decoded: int = 0) -> int:
    """= what tinyaot_convolve_s8_block2x1 uses of its scratch: one int16 word of two pixels per window position, then
    `decoded` bytes of positions decoded from the bitmaps once per call (block2x1_arrays)."""
    return 4 * int(k) + int(decoded)


def _pair_counts(st) -> np.ndarray:
    """Per channel pair of a 2x1 storage its stored blocks, an odd count's filler included."""
    n = np.array([c.size for c in block_positions(st)], np.int64)
    return n + n % 2


def block2x1_arrays(st) -> tuple[np.ndarray, np.ndarray, int]:
    """The DSP/C layout of a 2x1 sparse_block storage (tinyaot_convolve_s8_block2x1.c): the storage's own arrays
    (values, bitmap) and the bytes of scratch the kernel decodes the bitmaps into once per call: per channel pair a
    uint16 count (to whole words), then the positions, fillers included (uint16 past 256 positions, else uint8),
    and 4 bytes its word stores may pass."""
    k = 8 * int(st.meta["row_bytes"])  # > 256 exactly when the row is (positions < row length <= k)
    n = _pair_counts(st)
    decoded = 4 * -(-n.size // 2) + -(-(int(n.sum()) * (2 if k > 256 else 1) + 4) // 4) * 4
    return np.asarray(st.arrays["values"], np.int8), np.asarray(st.arrays["bitmap"], np.uint8), decoded


def stored_blocks(tensor) -> int:
    """Blocks a sparse_block storage keeps (zero blocks bridging long gaps or filling odd pairs included: the kernels
    run them too)."""
    if is_2x1(tensor):
        return int(tensor.storage.arrays["values"].size) // 2
    return int(tensor.storage.arrays["deltas"].size)


def block_cost(tensor, pixels: int, dsp: bool, column: bool) -> float:
    """Cost-model instructions of the block kernel (tinyaot_convolve_s8_block / fully_connected) for `pixels`
    output pixels (rows); `column`: whether the windows are copied into the int16 column."""
    per_mac, per_out, per_value = _BLOCK_COST[dsp]
    out_c = tensor.shape[0]
    k = int(np.prod(tensor.shape[1:]))
    if is_2x1(tensor):
        per_mac, per_out, per_value = _BLOCK2X1_COST[dsp]
        return (2 * stored_blocks(tensor) * pixels * per_mac + pixels * out_c * per_out
                + (pixels * k * per_value if column else 0.0))
    return (16 * stored_blocks(tensor) * pixels * per_mac + pixels * out_c * per_out
            + (pixels * k * per_value if column else 0.0))


def mve_block_stream(st) -> np.ndarray:
    """The Helium layout of a sparse_block storage (tinyaot_mve_block.h): per block-row its number of groups of four
    blocks (one byte, at least 1), then per group the blocks' absolute block columns (one byte each), then the
    blocks' values channel by channel. The storage's blocks, reordered (index bytes absolute, not deltas), each
    row filled to whole groups with zero blocks at column 0 (an empty row to one group): the kernels run whole
    groups only, and the first one of a row starts its sums (17 bytes of flash per filler block)."""
    blocks = np.asarray(st.arrays["values"], np.int8).reshape(-1, 4, 4)  # [block, channel, position]
    counts = st.arrays["counts"].astype(np.int64)
    deltas = st.arrays["deltas"].astype(np.int64)
    out, b = [], 0
    for n in counts:
        cols = np.cumsum(deltas[b:b + n])
        if cols.size and cols.max() > 255:
            raise ValueError("the Helium block kernels index block columns in one byte (rows of at most 1024 values)")
        row = blocks[b:b + n]
        fill = -int(n) % 4 if n else 4
        b += int(n)
        n = int(n) + fill  # zero blocks at column 0 (a word every row has): products 0
        cols = np.concatenate([cols, np.zeros(fill, np.int64)])
        row = np.concatenate([row, np.zeros((fill, 4, 4), np.int8)])
        out.append(np.array([n // 4], np.uint8).view(np.int8))  # the row's groups: at most 64 (256 columns)
        for g in range(0, int(n), 4):
            out.append(cols[g:g + 4].astype(np.uint8).view(np.int8))
            out.append(row[g:g + 4].transpose(1, 0, 2).reshape(-1))  # channel by channel
    return np.concatenate(out).astype(np.int8) if out else np.zeros(0, np.int8)


def mve_block2x1_values(st, segmented: bool = False) -> tuple[np.ndarray, int]:
    """The Helium layout of a 2x1 sparse_block storage (tinyaot_mve_block2x1.h): its values reordered, per channel pair
    cut into a first group of m stored blocks (1 .. 16) and F whole groups of 16, first the first group's weights
    (the first channel's m, then the second's), then per whole group the first channel's 16 weights and the
    second's; and the bytes of scratch the kernel decodes the bitmaps into once per call (per block-row two channel
    pairs, a missing second one included: 2 + its stored blocks each, and 20 bytes written past them). `segmented`
    (rows past 256 positions, tinyaot_convolve_s8_block2x1_mve_long): the same per segment of 256 positions (no
    filler block; the storage's odd-pair fillers go last, not read, so flash holds what the storage counts), and
    per pair and segment one byte more."""
    vals = np.asarray(st.arrays["values"], np.int8).reshape(-1, 2)
    n = _pair_counts(st)
    if segmented:
        return _mve_block2x1_segmented(st, vals, n)
    if 8 * int(st.meta["row_bytes"]) > 256:
        raise ValueError("the Helium 2x1 kernel indexes positions in one byte (rows of at most 256 values)")
    out, b = [], 0
    for c in n:
        v = vals[b:b + c]
        b += int(c)
        m = int(c) - 16 * ((int(c) - 1) // 16) if c else 0
        out += [v[:m, 0], v[:m, 1]]
        for g in range(m, int(c), 16):
            out += [v[g:g + 16, 0], v[g:g + 16, 1]]
    decoded = 2 * (n.size + n.size % 2) + int(n.sum()) + 20
    return (np.concatenate(out).astype(np.int8) if out else np.zeros(0, np.int8)), decoded


MVE_2X1_CONST_ROW = 255  # = TINYAOT_MVE_B2X1_CONST_ROW (tinyaot_mve_block2x1.h)


def mve_block2x1_stream(st, segmented: bool = False, constants: np.ndarray | None = None) -> np.ndarray:
    """The position stream the Helium 2x1 kernel decodes a storage's bitmaps into (tinyaot_mve_b2x1_positions, or
    _long when `segmented`; tinyaot_mve_block2x1.h), byte for byte, with the 16 zero bytes after it it reads: per
    channel pair (a last block-row's missing one included) m, the first group's m positions, F and the 16 * F
    others (short rows: an odd count's filler, the last position again); segmented, that per segment of 256
    positions (relative to it, no filler) and a byte 0 before each later segment, S after the last. Its length is
    mve_block2x1_values' decoded - 4. `constants` (short rows; int8 per output channel, mve_block2x1_constants):
    every whole block-row with nothing kept is MVE_2X1_CONST_ROW and its four outputs instead (the in-flash
    stream's form, read by the kernel's _const loops: one byte more than its four zeros)."""
    pairs = int(st.arrays["bitmap"].size // int(st.meta["row_bytes"]))
    padded = 2 * -(-(2 * pairs) // 4)
    segs = -(-int(st.meta["row_bytes"]) // 32) if segmented else 1
    pos = block_positions(st)
    out: list[int] = []

    def group(p: list[int]) -> None:
        m = len(p) - 16 * ((len(p) - 1) // 16) if p else 0
        out.extend([m, *p[:m], (len(p) - m) // 16, *p[m:]])

    cols = [[int(c) for c in pos[i]] if i < len(pos) else [] for i in range(padded)]
    for i in range(0, padded, 2):  # block-rows: two pairs
        if segmented:
            for p in cols[i:i + 2]:
                for sg in range(segs):
                    group([c - 256 * sg for c in p if c // 256 == sg])
                    out.append(0 if sg + 1 < segs else segs)
        elif constants is not None and 2 * i + 4 <= len(constants) and not cols[i] and not cols[i + 1]:
            out.extend([MVE_2X1_CONST_ROW, *(int(v) & 255 for v in constants[2 * i:2 * i + 4])])
        else:
            for p in cols[i:i + 2]:
                group(p + p[-1:] if len(p) % 2 else p)
    return np.array(out + [0] * 16, np.uint8)


def mve_2x1_const_rows(shape, segmented: bool) -> bool:
    """Whether a Helium 2x1 layer's in-flash stream takes constant block-rows (and the _const entry,
    tinyaot_convolve_s8_block2x1_mve_const): 1x1 convolutions of short rows (vww's very sparse pointwise layers),
    whose loop is instantiated once (the in-place / column form; no bands)."""
    return len(shape) == 4 and int(shape[1]) * int(shape[2]) == 1 and not segmented


def mve_block2x1_constants(params: np.ndarray, out_c: int, output_offset: int) -> np.ndarray:
    """Per output channel the int8 output of a channel pair with nothing kept (its sum 0): the folded bias of the
    Helium requantization words (mve_block_params) requantized, plus the output offset, saturated to int8; the
    kernel clamps it to the activation bounds (so the saturation first changes nothing)."""
    w = np.asarray(params, np.int64).reshape(-1, 4, 4)  # rows, (bias, left shift, mult, right shift), channels
    bias, shift, mult = (w[:, k, :].reshape(-1)[:out_c] for k in (0, 1, 2))
    shift = shift + w[:, 3, :].reshape(-1)[:out_c]
    return requantize_to_int8(bias, mult, shift, output_offset, -128, 127).astype(np.int8)


def mve_block2x1_positions(st, segmented: bool = False, in_flash: bool | None = None,
                           constants: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """What the Helium 2x1 kernel's filter->bitmap holds, and its filter->decoded: the storage's bitmaps and the
    scratch bytes they decode into once per call, or (decoded 0) the position stream itself (mve_block2x1_stream,
    with constant block-rows when `constants` are given: 1x1 layers, mve_2x1_const_rows) where that takes no more flash
    than the bitmaps (`in_flash` None; True / False force it): a layer keeping fewer than about one position in 8
    (vww_mobilenetv1_025's last 1x1 layers at 90-99 % sparsity), where the per-call decode cost as much as a third
    of the layer (on mps3-an547 113K of the 7 layers' 459K instructions)."""
    stream = mve_block2x1_stream(st, segmented, None if segmented else constants)
    if in_flash is None:
        in_flash = stream.size <= st.arrays["bitmap"].size
    if in_flash:
        return stream, 0
    return np.asarray(st.arrays["bitmap"], np.uint8), mve_block2x1_values(st, segmented)[1]


MVE_BAND_MIN_IN_C = 8  # = TINYAOT_MVE_BAND_MIN_IN_C (tinyaot_mve_im2col.h): thinner inputs keep OHWI columns


def mve_window_order(shape) -> np.ndarray:
    """Per OHWI window position (ky, kx, c) of a [out, kh, kw, in_c] filter its index in the Helium 2x1 kernel's
    kernel-column-major window order (kx, ky, c): tinyaot_mve_im2col.h band_fill lays windows out so."""
    kh, kw, c = (int(v) for v in shape[1:])
    ky, kx, ci = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(c), indexing="ij")
    return (kx * kh * c + ky * c + ci).reshape(-1)


def mve_block2x1_storage(st, shape):
    """A 2x1 sparse_block storage of a [out, kh, kw, in_c] filter with its window positions in the Helium kernel's
    band order (mve_window_order; from MVE_BAND_MIN_IN_C input channels on, as the kernel reads bands): per channel
    pair the bitmap's bits and the kept blocks' weights permuted alike (an odd pair's filler block still last). The
    same bytes and blocks, so the same masks and products; only the order in flash differs from the DSP kernel's."""
    if len(shape) != 4 or int(shape[1]) * int(shape[2]) == 1 or int(shape[3]) < MVE_BAND_MIN_IN_C:
        return st  # one kernel position (the orders agree), or a thin input: OHWI columns
    order = mve_window_order(shape)
    rb = int(st.meta["row_bytes"])
    vals = np.asarray(st.arrays["values"], np.int8).reshape(-1, 2)
    n = _pair_counts(st)
    bits = np.zeros((n.size, 8 * rb), np.uint8)
    out, b = [], 0
    for p, (cols, c) in enumerate(zip(block_positions(st), n)):
        new = order[cols]
        bits[p, new] = 1
        out += [vals[b:b + cols.size][np.argsort(new, kind="stable")], vals[b + cols.size:b + int(c)]]
        b += int(c)
    permuted = copy.copy(st)
    permuted.arrays = {**st.arrays, "bitmap": np.packbits(bits, axis=1, bitorder="little").reshape(-1),
                       "values": (np.concatenate(out) if out else np.zeros((0, 2), np.int8)).reshape(-1)}
    return permuted


def _mve_block2x1_segmented(st, vals, n) -> tuple[np.ndarray, int]:
    segs = -(-int(st.meta["row_bytes"]) // 32)
    out, b, decoded, fillers = [], 0, 20, []
    for cols, c in zip(block_positions(st), n):
        v = vals[b:b + cols.size]
        fillers.append(vals[b + cols.size:b + int(c)].reshape(-1))
        b += int(c)
        for s in range(segs):
            vs = v[cols // 256 == s]
            k = vs.shape[0]
            m = k - 16 * ((k - 1) // 16) if k else 0
            out += [vs[:m, 0], vs[:m, 1]]
            for g in range(m, k, 16):
                out += [vs[g:g + 16, 0], vs[g:g + 16, 1]]
            decoded += 3 + k
    decoded += (n.size % 2) * 3 * segs  # a last block-row's missing pair: empty segments
    out += fillers
    return (np.concatenate(out).astype(np.int8) if out else np.zeros(0, np.int8)), decoded


def mve_2x1_segmented(tensor) -> bool:
    """Whether a 2x1 layer's rows pass 256 positions: the segmented Helium stream and its _long entry."""
    return int(np.prod(tensor.shape[1:])) > 256


def mve_block_params(bias, weights, input_offset: int, mult, shift) -> np.ndarray:
    """The Helium block kernels' requantization words: per block-row of four channels the folded biases, the left
    shifts (max(shift, 0)), the multipliers and the right shifts (min(shift, 0)) of its channels (four each, zero
    past the last channel), 16 int32."""
    out_c = np.asarray(weights).shape[0]
    pad = -out_c % 4
    folded = np.concatenate([fold_input_offset(bias, weights, input_offset), np.zeros(pad, np.int64)])
    mult, shift = (np.asarray(v, np.int64).reshape(-1) for v in (mult, shift))
    if mult.size == 1:
        mult, shift = np.repeat(mult, out_c), np.repeat(shift, out_c)
    mult, shift = (np.concatenate([v, np.zeros(pad, np.int64)]) for v in (mult, shift))
    parts = [folded, np.maximum(shift, 0), mult, np.minimum(shift, 0)]
    rows = np.stack([v.reshape(-1, 4) for v in parts], axis=1)  # [rows, 4, 4]
    return rows.reshape(-1).astype(np.int32)


def block_requant(bias, weights, input_offset: int, mult, shift, output_offset: int):
    """(folded bias, mult, shift, fold_table) of a block kernel: the input offset folded into the bias, and the fold
    kernels' requantization table where it is exact (tinyaot_fold_support.h), else one multiplier and shift per
    channel."""
    out_c = np.asarray(weights).shape[0]
    mult = np.asarray(mult, np.int64).reshape(-1)
    shift = np.asarray(shift, np.int64).reshape(-1)
    if mult.size == 1:  # per tensor: one entry per channel all the same, what the kernels index
        mult, shift = np.repeat(mult, out_c), np.repeat(shift, out_c)
    table = fold_requant_table(bias, weights, input_offset, mult, shift, output_offset)
    if table is not None:
        return table[0], table[1], table[2], 1
    return fold_input_offset(bias, weights, input_offset), mult.astype(np.int32), shift.astype(np.int32), 0


def conv_scratch_bytes(kernel_hw, in_ch_per_group: int) -> int:
    """= tinyaot_convolve_<kind>_get_buffer_size: a column of K = kh*kw*in_ch/groups positions (rounded up to
    even), each four pixels as int16. Optional for the kernel (it falls back to a 16-position stack column)."""
    k = int(kernel_hw[0]) * int(kernel_hw[1]) * int(in_ch_per_group)
    return 8 * (k + k % 2)


def compressed_filter(tensor, cname: str, op: str, layer: dict | None = None,
                      helium: bool = False) -> CompressedFilter | None:
    """Kernel, constants and filter argument for `tensor`'s storage; None when it is dense (or has none). `layer`:
    the layer's bias, input_offset, mult, shift and output_offset, which the block kernels take transformed;
    `helium`: the block kernels' Helium variant (MVE_BLOCK)."""
    if not is_compressed(tensor):
        return None
    st = tensor.storage
    if "depthwise" in st.meta and bool(st.meta["depthwise"]) != (op == "depthwise"):
        raise ValueError(f"{tensor.name!r}: storage rows taken {'across' if st.meta['depthwise'] else 'along'} "
                         f"the filter do not fit a {op} kernel")  # rows() differ: a compression bug
    kernel = kernel_name(st.kind, op, st.meta.get("bits"))
    a = st.arrays
    name = f"{cname}_weights"
    if st.kind == "int4":
        consts = [ConstArray("uint8_t", f"{name}_packed", a["packed"])]
        arg = f"{name}_packed"
    elif st.kind == "int5":  # fully connected only (compress/pipeline.py grid_layers)
        if op != "fc":
            raise ValueError(f"{tensor.name!r}: int5 storage has no {op} kernel (a compression bug)")
        consts = [ConstArray("uint32_t", f"{name}_packed", a["packed"])]
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
    elif st.kind == "sparse_block" and block_shape(st) == (2, 1) and helium:
        params = mve_block_params(layer["bias"], tensor.data.reshape(tensor.shape[0], -1), layer["input_offset"],
                                  layer["mult"], layer["shift"])
        seg = mve_2x1_segmented(tensor)  # rows past 256 positions: segments, the _long entry
        st = mve_block2x1_storage(st, tensor.shape)  # the kernel's window order (kernel-column-major)
        values = mve_block2x1_values(st, seg)[0]
        # the bitmaps, or the stream itself (decoded 0), a 1x1 layer's with its constant block-rows (the _const entry)
        const = mve_2x1_const_rows(tensor.shape, seg)
        positions, decoded = mve_block2x1_positions(st, seg, constants=mve_block2x1_constants(
            params, tensor.shape[0], layer["output_offset"]) if const else None)
        kernel = "tinyaot_convolve_s8_block2x1_mve" + ("_long" if seg else "_const" if const and not decoded else "")
        consts = [ConstArray("int8_t", f"{name}_values", values),
                  ConstArray("uint8_t", f"{name}_bitmap", positions),
                  ConstStruct("tinyaot_block2x1_weights", name, [f"{name}_values", f"{name}_bitmap", decoded, 0])]
        return CompressedFilter(kernel, ["tinyaot_convolve_s8_block2x1_mve.c", "tinyaot_mve_block2x1.h",
                                         "tinyaot_mve_block_conv.h", "tinyaot_mve_block.h", "tinyaot_nn_mve.h",
                                         "tinyaot_mve_gemm.h", "tinyaot_mve_support.h", "tinyaot_mve_im2col.h",
                                         "tinyaot_block2x1_decode.h"],
                                consts, f"&{name}", (params, np.zeros(0, np.int32), np.zeros(0, np.int32)))
    elif st.kind == "sparse_block" and block_shape(st) == (2, 1):
        bias, mult, shift, table = block_requant(layer["bias"], tensor.data.reshape(tensor.shape[0], -1),
                                                 layer["input_offset"], layer["mult"], layer["shift"],
                                                 layer["output_offset"])
        kernel = "tinyaot_convolve_s8_block2x1"
        values, bitmap, decoded = block2x1_arrays(st)
        consts = [ConstArray("int8_t", f"{name}_values", values), ConstArray("uint8_t", f"{name}_bitmap", bitmap),
                  ConstStruct("tinyaot_block2x1_weights", name, [f"{name}_values", f"{name}_bitmap", decoded, table])]
        return CompressedFilter(kernel, [kernel + ".c", "tinyaot_block_support.h", "tinyaot_fold_support.h",
                                         "tinyaot_block2x1_decode.h"], consts, f"&{name}", (bias, mult, shift))
    elif st.kind == "sparse_block":
        if helium:  # the Helium layout, folded bias, one multiplier and shift per channel, padded to fours
            stream = mve_block_stream(st)
            params = mve_block_params(layer["bias"], tensor.data.reshape(tensor.shape[0], -1), layer["input_offset"],
                                      layer["mult"], layer["shift"])
            consts = [ConstArray("int8_t", f"{name}_stream", stream),
                      ConstStruct("tinyaot_block_weights", name, [f"{name}_stream", 0, 0, 0])]
            kernel += "_mve"
            return CompressedFilter(kernel, [kernel + ".c", "tinyaot_mve_block.h", "tinyaot_mve_block_conv.h",
                                             "tinyaot_nn_mve.h", "tinyaot_mve_gemm.h", "tinyaot_mve_support.h",
                                             "tinyaot_mve_im2col.h"],
                                    consts, f"&{name}", (params, np.zeros(0, np.int32), np.zeros(0, np.int32)))
        bias, mult, shift, table = block_requant(layer["bias"], tensor.data.reshape(tensor.shape[0], -1),
                                                 layer["input_offset"], layer["mult"], layer["shift"],
                                                 layer["output_offset"])
        consts = [ConstArray("int8_t", f"{name}_values", a["values"]),
                  ConstArray("uint8_t", f"{name}_deltas", a["deltas"]),
                  ConstArray("uint16_t", f"{name}_counts", a["counts"]),
                  ConstStruct("tinyaot_block_weights", name, [f"{name}_values", f"{name}_deltas", f"{name}_counts",
                                                              table])]
        return CompressedFilter(kernel, [kernel + ".c", "tinyaot_block_support.h", "tinyaot_fold_support.h"],
                                consts, f"&{name}", (bias, mult, shift))
    else:  # sparse_rle
        consts = [ConstArray("uint8_t", f"{name}_runs", a["runs"]), ConstArray("int8_t", f"{name}_values", a["values"]),
                  ConstArray("int32_t", f"{name}_rows", a["row_offsets"]),
                  ConstStruct("tinyaot_rle_weights", name, [f"{name}_runs", f"{name}_values", f"{name}_rows"])]
        arg = f"&{name}"
    # HEADER includes tinyaot_dw3_support.h (the 3x3 depthwise requantization it shares with the dense kernel)
    return CompressedFilter(kernel, [kernel_name(st.kind, op) + ".c", HEADER, "tinyaot_dw3_support.h"], consts, arg)


MVE_BLOCK = "mve_block"  # the Helium variant of the block kernels


def mve_block_ok(tensor, target) -> bool:
    """The Helium block variant fits: MVE, block storage, block columns below 256 (one index byte)."""
    st = getattr(tensor, "storage", None)
    if is_2x1(tensor):  # past 256 positions the segmented stream (its end byte: at most 255 segments)
        return bool(target.has_mve) and MVE_2X1 and int(np.prod(tensor.shape[1:])) <= 255 * 256
    return bool(target.has_mve) and st is not None and st.kind == "sparse_block" and \
        -(-int(np.prod(tensor.shape[1:])) // 4) <= 256


MVE_2X1 = True  # the Helium 2x1 kernel is in


def mve_block_cost(tensor, pixels: int, column: bool) -> float:
    """Cost-model instructions of the Helium block kernels (tinyaot_mve_block.h), fitted to kws_dscnn --prune 0.5
    --prune-pattern block on mps3-an547: per group of four stored blocks and pixel pair 17 (gathers, weight loads,
    VMLADAVA, loop), per block-row and pixel pair 36 (count, VMOVs, requantization, stores: 4.5 per output value),
    per pixel 40 (the pair's call and bookkeeping) and, with the im2col column, 11 per window tap and the copy of
    its values."""
    out_c = tensor.shape[0]
    k = int(np.prod(tensor.shape[1:]))
    taps = int(np.prod(tensor.shape[1:-1])) if len(tensor.shape) == 4 else 1
    st = tensor.storage
    counts = st.arrays["counts"].astype(np.int64) if "counts" in st.arrays else \
        np.array([c.size for c in block_positions(st)], np.int64)  # (2x1: kept positions per channel pair)
    groups = float(np.sum(np.maximum(-(-counts // 4), 1)))  # whole groups, >= 1 a row
    return groups * 17 * pixels / 2 + pixels * out_c * 4.5 + pixels * (40.0 + (11 * taps + k / 8 if column else 0.0))


__all__ = ["CompressedFilter", "compressed_filter", "conv_scratch_bytes", "block_scratch_bytes", "block_requant",
           "block_cost", "mve_block_cost", "mve_block_ok", "mve_block_stream", "mve_block_params", "stored_blocks",
           "MVE_BLOCK", "is_compressed", "kernel_name", "is_2x1", "mve_block2x1_values", "block2x1_arrays",
           "mve_2x1_segmented", "mve_block2x1_storage", "mve_window_order", "mve_block2x1_stream",
           "mve_block2x1_positions", "mve_block2x1_constants", "mve_2x1_const_rows", "MVE_2X1_CONST_ROW",
           "block2x1_scratch_bytes", "block_shape", "block_positions", "conv_estimate",
           "CONV_PIXELS_AT_ONCE", "DW_PIXELS_AT_ONCE"]
