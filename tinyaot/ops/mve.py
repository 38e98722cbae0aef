"""Helium (MVE) variants of standard convolution and fully connected for cores with MVE (Cortex-M55).

Kernels: templates/kernels/tinyaot_convolve_s8_mve.c (any window, int8 im2col), tinyaot_convolve_1x1_s8_mve.c (1x1,
no padding, in place) and tinyaot_fully_connected_s8_mve.c, all on the matrix core in tinyaot_mve_gemm.h. What
this module prepares at compile time for them:
- the input offset folded into the bias (ops/common.py fold_input_offset), so the inner loop multiplies raw int8
  activations by raw int8 weights (VMLADAVA.S8, 16 products per instruction);
- the filter rearranged for the kernels' blocks of four output channels (`block_filter`): a permutation of the
  same bytes, plus zero rows up to a multiple of four channels (and, where the conv kernel reads windows in place,
  each kernel row zero-padded to whole 16-value chunks: `direct_rows`);
- one multiplier and shift per output channel (a per-tensor pair is repeated), biases, multipliers and shifts
  zero-padded to a multiple of four channels.
Variants are offered only when the target has MVE and the layer fits: int8 activations, dense (uncompressed)
weights, one group (conv), no filter offset (fully connected). The numbers the kernels compute are the generic
kernels' integers (the reference in ops/conv.py and ops/fully_connected.py), so the variants need no reference of
their own; tests/mve checks the C against it on the host and under QEMU.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops import decoded
from tinyaot.ops.common import fold_input_offset
from tinyaot.ops.compressed import is_compressed
from tinyaot.ops.registry import ConstArray, ConstStruct, KernelCall, Variant, variant_of

MVE_CONV = "mve_conv"  # tinyaot_convolve_s8_mve: any window, one im2col column (or two) of scratch
MVE_1X1 = "mve_1x1"    # tinyaot_convolve_1x1_s8_mve: 1x1 without padding, no scratch
MVE_FC = "mve_fc"      # tinyaot_fully_connected_s8_mve
MVE_NIBBLE = "mve_nibble"  # tinyaot_fully_connected_s4_mve / _s8_clustered_mve: 4-bit weights, two rows a byte
CONV_VARIANTS = (MVE_CONV, MVE_1X1)
# what every kernel file here needs besides itself: the matrix cores (one file, so a model holds them once) and
# the headers, all copied into a deployed project with the kernel file
HEADERS = ["tinyaot_mve_gemm_s8.c", "tinyaot_nn_mve.h", "tinyaot_mve_gemm.h", "tinyaot_mve_support.h",
           "tinyaot_mve_im2col.h"]

# Cost model: instructions executed under QEMU on mps3-an547, fitted to single layers of the shared models' shapes
# (kws 1x1 64->64: 164,147 for 512,000 MACs; ic 1x1 s2 16->32: 125,028 for 131,072; ic 3x3 16->16 without
# padding: 128,617 for 451,584; columns: 3x3 on 1 channel 87,617 for 18,432, kws 10x4 209,679 for 320,000):
# per multiply-accumulate (the 4x2 VMLADAVA block), per output value (requantization of four lanes and the block
# loop), per output pixel (calls and addressing), per kernel row copied into an im2col column (column path only).
# A fully connected row runs the one-column block (4x1), about 0.2 per MAC.
PER_MAC = 0.15
PER_MAC_FC = 0.2
# the nibble kernels (tinyaot_fully_connected_s8_nibble_mve.c) per MAC, fitted like PER_MAC_FC (with PER_OUT per
# output) to ad_fc_autoencoder on mps3-an547 (int8 77,709 instructions = 0.23 a MAC; int4 78,689, clusters16
# 114,263, clusters32 178,863): int4 as many instructions per chunk as the dense kernel, 4-bit codes a mask and a
# gather more per 16 weights, 5-bit codes the fifth bit's shift, insert and mask more again; int5
# (tinyaot_fully_connected_s5_mve.c, blocks of three rows) 91,447 at clusters32
PER_MAC_NIBBLE = {"int4": 0.24, "clustered": 0.37, "clustered5": 0.62, "int5": 0.28}
# their accumulators' bound (see the kernel's header): depth at most this
NIBBLE_MAX_DEPTH = 65536
PER_OUT = 9.0
PER_PIXEL = 125.0
PER_COLUMN_ROW = 50.0


def block_filter(rows: np.ndarray) -> np.ndarray:
    """[out_ch, k] int8 -> the flat layout of tinyaot_mve_gemm.h: each row zero-padded to k16 (k rounded up to a
    multiple of 16), zero rows appended up to a multiple of four channels; per block of four channels, chunk by
    chunk, the four rows' 16 values of that chunk in turn."""
    rows = np.asarray(rows)
    out_c, k = rows.shape
    k16 = -(-k // 16) * 16
    padded = np.zeros((-(-out_c // 4) * 4, k16), rows.dtype)
    padded[:out_c, :k] = rows
    g = padded.shape[0] // 4
    return padded.reshape(g, 4, k16 // 16, 16).transpose(0, 2, 1, 3).reshape(-1)


def per_channel4(values, channels: int) -> np.ndarray:
    """One int32 per output channel (a per-tensor value repeated), zero-padded to a multiple of four entries: the
    kernels read the biases, multipliers and shifts of four channels at a time."""
    v = np.asarray(values, dtype=np.int64).reshape(-1)
    v = np.repeat(v, channels) if v.size == 1 else v
    return np.concatenate([v, np.zeros(-channels % 4, np.int64)]).astype(np.int32)


def _dense_int8(graph, node) -> bool:
    """int8 activations, and dense weights or int4 / clustered ones the decoded kernels take (ops/decoded.py)."""
    w = graph.tensors[node.inputs[1]]
    return graph.tensors[node.inputs[0]].dtype == "int8" and (not is_compressed(w) or decoded.decodable(w, 4, True))


# scratch of a decoded tile (tinyaot_convolve_s8_mve_decoded.c): up to this many bytes of whole blocks
DECODED_TILE_BYTES = 1024
# per tile and output pixel pair, the pair's bookkeeping the dense kernel pays once per pair
_DECODED_PAIR_TILE = 40.0


def _tiled(node, graph) -> bool:
    """A decoded layer that runs tile by tile (the 1x1 kernel), not on a whole decoded filter (the conv kernel)."""
    return variant_of(node) == MVE_1X1


def _free_positions(node, graph) -> np.ndarray:
    """Positions of the layer's Helium filter layout whose value no output depends on: padded rows (their outputs
    are never stored), and on the 1x1 kernel and the column path the padding past K (its activations load as zero;
    the direct path multiplies a padded tap's zero points by it, so there it must stay 0)."""
    wd = graph.tensors[node.inputs[1]].data
    ones = np.ones_like(np.asarray(wd), dtype=np.int8)
    out_c = wd.shape[0]
    if variant_of(node) == MVE_1X1:
        return block_filter(ones.reshape(out_c, -1)) == 0
    real_rows = conv_filter(ones, tuple(node.attrs.get("dilations", (1, 1)))[1])
    if not _direct(node, graph):
        return real_rows == 0
    rows = np.zeros((-(-out_c // 4) * 4, len(real_rows) // -(-out_c // 4) // 4), np.int8)
    rows[:out_c] = 1
    return block_filter(rows) == 0


def _tile_blocks(w) -> int:
    """Blocks of four output channels per decoded tile of the 1x1 kernel: as many as the stack tile holds
    (decoded.STACK_TILE), else as many as DECODED_TILE_BYTES of scratch hold (at least one)."""
    block = 4 * (-(-int(np.prod(w[1:])) // 16) * 16)
    cap = decoded.STACK_TILE if decoded.on_stack(block) else DECODED_TILE_BYTES
    return max(1, min(-(-w[0] // 4), cap // block))


def _tile_bytes(w) -> int:
    """Scratch of the 1x1 kernel's decoded tile: none when it is on the stack."""
    block = 4 * (-(-int(np.prod(w[1:])) // 16) * 16)
    return 0 if decoded.on_stack(block) else block * _tile_blocks(w)


def _is_1x1(node, graph) -> bool:
    w = graph.tensors[node.inputs[1]].shape  # OHWI
    return w[1] == 1 and w[2] == 1 and not any(node.attrs.get("pads", (0, 0, 0, 0)))


def conv_variants(node, graph, target, macs: int) -> list[Variant]:
    """The Helium variants of a standard (not depthwise) convolution with one group, on an MVE target."""
    if not target.has_mve or node.attrs.get("depthwise") or not _dense_int8(graph, node):
        return []
    x = graph.tensors[node.inputs[0]].shape
    w = graph.tensors[node.inputs[1]].shape
    o = graph.tensors[node.outputs[0]].shape
    if w[3] != x[3]:
        return []
    outs = int(np.prod(o))
    pixels = outs // o[3]
    compute = macs * PER_MAC + outs * PER_OUT + pixels * PER_PIXEL
    wt = graph.tensors[node.inputs[1]]
    if is_compressed(wt):  # decoded once per call (the 1x1 kernel tile by tile: each tile re-walks the pixels)
        if not decoded.stack_ok(target):
            return []
        compute += decoded.decode_cost(wt, True, run=16)
        if _is_1x1(node, graph):
            tiles = -(-w[0] // (_tile_blocks(w) * 4))
            compute += _DECODED_PAIR_TILE * (pixels // 2 + 1) * tiles
        elif _direct(node, graph) and (w[2] * w[3]) % 16 and not _has_zero(wt):
            return []  # the direct path's row padding must decode to 0, which a codebook without 0 cannot give
    if _is_1x1(node, graph):
        return [Variant(MVE_1X1, compute)]
    if _direct(node, graph):
        # each kernel row padded to whole chunks: the padding's products are executed too
        run = w[2] * w[3]
        return [Variant(MVE_CONV, compute + macs * PER_MAC * (_row16(run) / run - 1))]
    # the column path: its scratch (one or two columns) may raise the arena where the generic kernel plans none;
    # the variant choice takes it only where the planned arena stays (pipeline/variants.py)
    return [Variant(MVE_CONV, compute + pixels * w[1] * PER_COLUMN_ROW)]


def _has_zero(tensor) -> bool:
    """Every codebook of the (int4 or clustered) tensor holds the value 0."""
    st = tensor.storage
    return st.kind == "int4" or bool((np.asarray(st.arrays["codebooks"]) == 0).any(axis=1).all())


def _row16(n: int) -> int:
    return -(-n // 16) * 16


def _direct(node, graph) -> bool:
    """tinyaot_convolve_s8_mve reads the windows in place (no scratch) when there is no horizontal dilation,
    in_c >= 8 and a kernel row holds at least 16 values (its direct_ok)."""
    in_c = graph.tensors[node.inputs[0]].shape[3]
    k_w = graph.tensors[node.inputs[1]].shape[2]
    return is_direct(in_c, k_w, tuple(node.attrs.get("dilations", (1, 1)))[1])


def is_direct(in_c: int, k_w: int, dilation_w: int) -> bool:
    """= direct_ok of tinyaot_convolve_s8_mve.c."""
    return dilation_w == 1 and in_c >= 8 and k_w * in_c >= 16


def direct_rows(w_ohwi: np.ndarray) -> np.ndarray:
    """[out_c, kh, kw, in_c] -> [out_c, kh * row16]: each kernel row's kw * in_c values zero-padded to row16, a
    multiple of 16, the filter rows the direct path reads (a kernel row's last chunk is then a chunk of its own).
    With kw * in_c a multiple of 16 this is the plain [out_c, K] matrix."""
    out_c, kh, kw, in_c = w_ohwi.shape
    rows = np.zeros((out_c, kh, _row16(kw * in_c)), w_ohwi.dtype)
    rows[:, :, :kw * in_c] = w_ohwi.reshape(out_c, kh, kw * in_c)
    return rows.reshape(out_c, -1)


def conv_filter(w_ohwi: np.ndarray, dilation_w: int = 1) -> np.ndarray:
    """The bytes tinyaot_convolve_s8_mve reads as its filter: the blocked layout of the direct path's padded rows,
    or of the plain rows on the column path."""
    w_ohwi = np.asarray(w_ohwi)
    if is_direct(w_ohwi.shape[3], w_ohwi.shape[2], dilation_w):
        return block_filter(direct_rows(w_ohwi))
    return block_filter(w_ohwi.reshape(w_ohwi.shape[0], -1))


def conv_scratch_bytes(node, graph) -> int:
    """Scratch of MVE_CONV: none on its direct path, else two int8 columns (= tinyaot_convolve_s8_mve_get_buffer_size),
    so that two pixels share each weight load; MVE_1X1 reads its input in place. Decoded weights (int4, clustered):
    a tile of whole blocks for MVE_1X1, else the whole decoded filter before the columns."""
    w = graph.tensors[node.inputs[1]].shape
    columns = 0 if variant_of(node) != MVE_CONV or _direct(node, graph) else 2 * int(np.prod(w[1:]))
    if is_compressed(graph.tensors[node.inputs[1]]):
        if _tiled(node, graph):
            return _tile_bytes(w)
        layout = conv_filter(np.zeros(w, np.int8), tuple(node.attrs.get("dilations", (1, 1)))[1])
        return -(-layout.size // 4) * 4 + columns  # the whole decoded filter, then the dense kernel's columns
    return columns


def decoded_inplace_ok(node, graph) -> bool:
    """False where the decoded kernel reads every window once per tile (the output must not overlap the input)."""
    return not (is_compressed(graph.tensors[node.inputs[1]]) and variant_of(node) in CONV_VARIANTS
                and _tiled(node, graph))


def render_conv(node, graph, cname: str, params: dict) -> KernelCall:
    """The Helium conv call: `params` are the generic call's template fields (the same parameter structs)."""
    a = node.attrs
    wd = graph.tensors[node.inputs[1]].data
    out_c = wd.shape[0]
    if variant_of(node) == MVE_1X1:
        kernel, layout = "tinyaot_convolve_1x1_s8_mve", block_filter(wd.reshape(out_c, -1))
    else:
        kernel, layout = "tinyaot_convolve_s8_mve", conv_filter(wd, tuple(a.get("dilations", (1, 1)))[1])
    weights = [ConstArray("int8_t", f"{cname}_weights", layout)]
    files = [kernel + ".c", *HEADERS]
    filt = f"{cname}_weights"
    wt = graph.tensors[node.inputs[1]]
    if is_compressed(wt):  # the codes in the same layout, decoded (tinyaot_convolve_s8_mve_decoded.c)
        region, div, mod, cycle = decoded.block_layout(wt, len(layout) // -(-out_c // 4), 16)  # chunks of 16
        codes = decoded.layout_codes(wt, layout, region, div, mod, cname, _free_positions(node, graph), cycle)
        weights, filt = codes.consts, codes.arg
        files = ["tinyaot_convolve_s8_mve_decoded.c", "tinyaot_convolve_s8_mve.c", *decoded.FILES, *HEADERS]
        kernel += "_decoded"
    consts = [*weights,
              ConstArray("int32_t", f"{cname}_bias",
                         per_channel4(fold_input_offset(graph.tensors[node.inputs[2]].data, wd, a["input_offset"]),
                                      out_c)),
              ConstArray("int32_t", f"{cname}_mult", per_channel4(a["output_mult"], out_c)),
              ConstArray("int32_t", f"{cname}_shift", per_channel4(a["output_shift"], out_c))]
    params = dict(params, filter=filt, bias=f"{cname}_bias", mult=f"{cname}_mult", shift=f"{cname}_shift")
    return KernelCall(kernel, files=files, consts=consts, template="layers/conv.c.j2", params=params)


def fc_variants(node, graph, target, macs: int) -> list[Variant]:
    """The Helium fully connected variant, on an MVE target, for dense int8 weights without a filter offset."""
    if not target.has_mve or not _dense_int8(graph, node) or node.attrs.get("filter_offset", 0) != 0:
        return []
    outs = graph.tensors[node.inputs[0]].shape[0] * graph.tensors[node.inputs[1]].shape[0]
    return [Variant(MVE_FC, macs * PER_MAC_FC + outs * PER_OUT)]


def render_fc(node, graph, cname: str, params: dict) -> KernelCall:
    a = node.attrs
    wd = graph.tensors[node.inputs[1]].data
    out_c = wd.shape[0]
    kernel = "tinyaot_fully_connected_s8_mve"
    consts = [ConstArray("int8_t", f"{cname}_weights", block_filter(wd)),
              ConstArray("int32_t", f"{cname}_bias",
                         per_channel4(fold_input_offset(graph.tensors[node.inputs[2]].data, wd, a["input_offset"]),
                                      out_c)),
              ConstArray("int32_t", f"{cname}_mult", per_channel4(a["output_mult"], out_c)),
              ConstArray("int32_t", f"{cname}_shift", per_channel4(a["output_shift"], out_c))]
    params = dict(params, filter=f"{cname}_weights", bias=f"{cname}_bias", mult=f"{cname}_mult",
                  shift=f"{cname}_shift")
    return KernelCall(kernel, files=[kernel + ".c", *HEADERS], consts=consts,
                      template="layers/fully_connected.c.j2", params=params)


NIBBLE_FILE = "tinyaot_fully_connected_s8_nibble_mve.c"
S5_FILE = "tinyaot_fully_connected_s5_mve.c"


def s5_filter(values: np.ndarray) -> np.ndarray:
    """[out, k] values in [-15, 15] -> tinyaot_fully_connected_s5_mve.c's bytes: rows padded with 0 to a multiple of
    three and columns to k16; per block of three rows (A, B, C), per chunk of 16 columns, the vectors
    p = (wA + 16) + 32 * (wB >> 2) and r = (wC + 16) + 32 * (wB & 3), 16 bytes each."""
    v = np.asarray(values, np.int64)
    out_c, k = v.shape
    if v.size and (v.min() < -15 or v.max() > 15):
        raise ValueError("s5_filter: values outside [-15, 15]")
    k16 = -(-k // 16) * 16
    padded = np.zeros((-(-out_c // 3) * 3, k16), np.int64)
    padded[:out_c, :k] = v
    a, b, c = padded[0::3], padded[1::3], padded[2::3]  # [triples, k16]
    p = ((a + 16) + 32 * (b >> 2)) & 0xFF
    r = (c + 16) + 32 * (b & 3)
    pr = np.stack([p, r], axis=1).reshape(-1, 2, k16 // 16, 16)  # [block, p/r, chunk, column]
    return pr.transpose(0, 2, 1, 3).reshape(-1).astype(np.uint8)


def int4_nibbles(values: np.ndarray) -> np.ndarray:
    """[out, depth] int4 values in [-8, 7] -> the nibble kernel's codes: w + 8 on even rows, w & 15 on odd ones."""
    w = np.asarray(values, np.int64)
    codes = w & 15
    codes[0::2] = w[0::2] + 8
    return codes.astype(np.uint8)


def nibble_codes(tensor) -> np.ndarray | None:
    """The codes of a fully connected layer's int4 or clustered (4- or 5-bit indices) weights, [out, depth] uint8,
    for the nibble kernels: int4 as the kernel's biased (even rows, w + 8) and two's-complement (odd rows) nibbles;
    clustered as indices into the row's codebook. None where the storage is neither."""
    st = tensor.storage
    w = np.asarray(tensor.data, np.int64)
    if st is None or w.ndim != 2:
        return None
    if st.kind == "int4":
        return int4_nibbles(w)
    if st.kind != "clustered" or int(st.meta["bits"]) not in (4, 5):
        return None
    books = np.asarray(st.arrays["codebooks"], np.int64)
    rows = books[np.arange(w.shape[0]) // int(st.meta["group_size"])]  # [out, k]: each row's codebook
    hit = w[:, :, None] == rows[:, None, :]
    if not hit.any(axis=2).all():
        raise ValueError(f"{tensor.name!r}: a weight is not in its codebook (a tinyaot bug)")
    return hit.argmax(axis=2).astype(np.uint8)


def nibble_filter(codes: np.ndarray) -> np.ndarray:
    """[out, k] 4-bit codes -> tinyaot_fully_connected_s8_nibble_mve.c's bytes: rows padded to a multiple of four
    and columns to k16 with code 0 (in range of every codebook; the kernel never stores a padded row's result and
    multiplies a padded column only by a zero activation); per block of four rows, per chunk of 16 columns, rows
    (0, 1) then (2, 3) as 16 bytes each, the lower row in the low nibble."""
    codes = np.asarray(codes, np.uint8)
    out_c, k = codes.shape
    k16 = -(-k // 16) * 16
    padded = np.zeros((-(-out_c // 4) * 4, k16), np.uint8)
    padded[:out_c, :k] = codes
    pairs = padded[0::2] | (padded[1::2] << 4)  # [out / 2, k16]
    return pairs.reshape(-1, 2, k16 // 16, 16).transpose(0, 2, 1, 3).reshape(-1).astype(np.uint8)


def nibble5_filter(codes: np.ndarray) -> np.ndarray:
    """[out, k] 5-bit codes -> the 5-bit layout of tinyaot_fully_connected_s8_nibble_mve.c: per block of four rows
    (padded with code 0, as the columns to k16), per pair of chunks of 16 columns, each chunk's low four bits as in
    nibble_filter (32 bytes), then 16 bytes of fifth bits (byte j: bit r for row r at column j of the first chunk,
    bit 4 + r of the second); a last single chunk the same with its 16 bytes of bits 0..3."""
    codes = np.asarray(codes, np.uint8)
    out_c, k = codes.shape
    k16 = -(-k // 16) * 16
    padded = np.zeros((-(-out_c // 4) * 4, k16), np.uint8)
    padded[:out_c, :k] = codes
    lo = nibble_filter(padded & 15).reshape(-1, k16 // 16, 32)  # [block, chunk, 32]
    hi = ((padded >> 4) & 1).reshape(-1, 4, k16 // 16, 16)  # [block, row, chunk, column]
    bits = (hi << np.arange(4, dtype=np.uint8)[None, :, None, None]).sum(axis=1).astype(np.uint8)  # [block, chunk, 16]
    parts = []
    for c in range(0, k16 // 16, 2):
        pair = lo[:, c:c + 2].reshape(lo.shape[0], -1)
        plane = bits[:, c] | ((bits[:, c + 1] << 4) if c + 1 < k16 // 16 else 0)
        parts.append(np.concatenate([pair, plane.astype(np.uint8)], axis=1))
    return np.concatenate(parts, axis=1).reshape(-1).astype(np.uint8)


def nibble_variants(node, graph, target, macs: int) -> list[Variant]:
    """The Helium nibble variant of a fully connected layer with int4 or 16-entry clustered weights."""
    w = graph.tensors[node.inputs[1]]
    if (not target.has_mve or graph.tensors[node.inputs[0]].dtype != "int8" or w.storage is None
            or node.attrs.get("filter_offset", 0) != 0 or w.shape[1] > NIBBLE_MAX_DEPTH
            or (w.storage.kind != "int5" and nibble_codes(w) is None)):
        return []
    outs = graph.tensors[node.inputs[0]].shape[0] * w.shape[0]
    kind = w.storage.kind + ("5" if w.storage.kind == "clustered" and int(w.storage.meta["bits"]) == 5 else "")
    return [Variant(MVE_NIBBLE, macs * PER_MAC_NIBBLE[kind] + outs * PER_OUT)]


def render_fc_nibble(node, graph, cname: str, params: dict) -> KernelCall:
    a = node.attrs
    w = graph.tensors[node.inputs[1]]
    out_c = w.shape[0]
    if w.storage.kind == "int5":
        return _render_s5(node, graph, cname, params)
    bits = 5 if w.storage.kind == "clustered" and int(w.storage.meta["bits"]) == 5 else 4
    layout = nibble5_filter if bits == 5 else nibble_filter
    packed = ConstArray("uint8_t", f"{cname}_weights", layout(nibble_codes(w)))
    if w.storage.kind == "int4":
        kernel, filt, weights = "tinyaot_fully_connected_s4_mve", f"(const int8_t *){cname}_weights", [packed]
    else:
        st = w.storage
        kernel, filt = f"tinyaot_fully_connected_s8_clustered{'5' if bits == 5 else ''}_mve", f"&{cname}_clustered"
        weights = [packed, ConstArray("int8_t", f"{cname}_codebooks", np.asarray(st.arrays["codebooks"]).reshape(-1)),
                   ConstStruct("tinyaot_clustered_weights", f"{cname}_clustered",
                               [f"{cname}_codebooks", f"{cname}_weights", bits, int(st.meta["k"]),
                                int(st.meta["group_size"]), 0])]
    consts = weights + [
        ConstArray("int32_t", f"{cname}_bias",
                   per_channel4(fold_input_offset(graph.tensors[node.inputs[2]].data, w.data, a["input_offset"]),
                                out_c)),
        ConstArray("int32_t", f"{cname}_mult", per_channel4(a["output_mult"], out_c)),
        ConstArray("int32_t", f"{cname}_shift", per_channel4(a["output_shift"], out_c))]
    params = dict(params, filter=filt, bias=f"{cname}_bias", mult=f"{cname}_mult", shift=f"{cname}_shift")
    return KernelCall(kernel, files=[NIBBLE_FILE, *HEADERS], consts=consts, template="layers/fully_connected.c.j2",
                      params=params)


def _render_s5(node, graph, cname: str, params: dict) -> KernelCall:
    """The Helium call of an int5 fully connected layer (tinyaot_fully_connected_s5_mve.c)."""
    a = node.attrs
    w = graph.tensors[node.inputs[1]]
    out_c = w.shape[0]
    consts = [ConstArray("uint8_t", f"{cname}_weights", s5_filter(w.data)),
              ConstArray("int32_t", f"{cname}_bias",
                         per_channel4(fold_input_offset(graph.tensors[node.inputs[2]].data, w.data, a["input_offset"]),
                                      out_c)),
              ConstArray("int32_t", f"{cname}_mult", per_channel4(a["output_mult"], out_c)),
              ConstArray("int32_t", f"{cname}_shift", per_channel4(a["output_shift"], out_c))]
    params = dict(params, filter=f"{cname}_weights", bias=f"{cname}_bias", mult=f"{cname}_mult",
                  shift=f"{cname}_shift")
    return KernelCall("tinyaot_fully_connected_s5_mve", files=[S5_FILE, *HEADERS], consts=consts,
                      template="layers/fully_connected.c.j2", params=params)
