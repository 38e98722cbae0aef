"""Int4 and clustered weights on the dense kernels' fast paths (templates/kernels/tinyaot_decode.h).

A layer whose weights are stored as int4 nibbles or clustered codebook indices (compress/storage.py) can run a dense
kernel variant (fold, dw3x3, the Helium ones) on weights decoded into RAM once per call, instead of the
tinyaot_*_s4 / _s8_clustered kernels that decode in their inner loop. At compile time the codes are permuted into
the dense kernel's own weight layout (`layout_codes`), so the C decoder walks them in order and writes each weight
where the dense kernel reads it. The regions of the layout (a fold block of four output channels, a dw3x3 group of
four channels, ...) each take one codebook, which must hold every weight of the region: clustered layers whose
codebook groups are whole regions (group_size a multiple of the region's channels, or the whole tensor) qualify.
Layers with one codebook per output channel (group_size 1) qualify where the layout's block of four channels is
made of runs of one channel cycling over the four (the fold layout's groups of four inputs, the Helium layout's
chunks of 16, the dw3x3 layout's taps): each run is then a region of its own, of codebook ((r / div) * 4 + r % 4)
(`block_layout`, cycle 4).

Flash: the same codes (bits per weight) and codebooks as the storage, in another order, as one bit stream (no
per-channel byte alignment, so at most as many bytes). int4 layers take no codebook: their nibbles, biased by 8, in
split words that decode without lookups (`int4_words`, at most 3 bytes more than the storage).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinyaot.ops.registry import ConstArray, ConstStruct

HEADER = "tinyaot_decode.h"
FILES = [HEADER, "tinyaot_decode.c", "tinyaot_mve_support.h"]  # what a decoded kernel needs besides its own files
KINDS = ("int4", "clustered")
# Cost model: instructions per decoded weight (tinyaot_decode_run: two codes per byte for 4 bits, a bit accumulator
# otherwise), fitted under QEMU on mps2-an386
PER_CODE = {4: 3.5, 8: 3.0}
PER_CODE_MVE = {4: 0.25, 8: 0.2}  # Helium: 32 (16) codes per pass of gathers
PER_CODE_OTHER = 7.0
PER_CODE_INT4 = {False: 1.5, True: 0.2}  # int4's split words: eight weights in a few word operations
PER_REGION = 22.0  # a region's codebook and bit position (tinyaot_decode), paid per run on cycled layouts
# The decoded kernels decode a tile that fits STACK_TILE bytes into a local array (tinyaot_decode.h
# TINYAOT_DECODE_STACK_TILE, the same number) rather than into arena scratch: the dense fast path's arena stays as it
# is, so the variant choice (pipeline/variants.py: no arena growth) takes them. Offered only on boards whose stack
# reserve holds the tile with room to spare (STACK_MIN: the tile is a quarter of it); the stack high-water mark is
# measured under QEMU like any other.
STACK_TILE = 1024
STACK_MIN = 4 * STACK_TILE


def stack_ok(target) -> bool:
    """Whether decoded variants may run on `target`: its board's stack holds a STACK_TILE tile."""
    return int(getattr(target, "stack_bytes", 0)) >= STACK_MIN


def on_stack(nbytes: int) -> bool:
    """Whether a decoded tile of `nbytes` bytes goes in the kernel's stack tile (no arena scratch)."""
    return 0 < nbytes <= STACK_TILE


def decodable(tensor, region_channels: int, cycled: bool = False) -> bool:
    """Whether `tensor`'s storage can be decoded region by region, each region the weights of `region_channels`
    consecutive output channels (1: any layout with one codebook per channel run); `cycled`: also one codebook per
    channel on a layout of blocks of four channels whose runs cycle over the block's channels (`block_layout`)."""
    st = getattr(tensor, "storage", None)
    if st is None or st.kind not in KINDS:
        return False
    if st.kind == "int4":
        return True
    g = int(st.meta["group_size"])
    return g % region_channels == 0 or g >= _out_channels(tensor) or (cycled and region_channels == 4 and g == 1)


def _out_channels(tensor) -> int:
    st = tensor.storage
    return tensor.shape[-1] if st.meta.get("depthwise") else tensor.shape[0]


def _cycled(tensor) -> bool:
    """One codebook per output channel where a block layout holds four channels (decoded run by run)."""
    return not decodable(tensor, 4) and decodable(tensor, 4, cycled=True)


def decode_cost(tensor, mve: bool = False, run: int | None = None) -> float:
    """Cost-model instructions of decoding the whole tensor once (`mve`: on a Helium core); `run`: the codes of a
    run of the cycled layout the kernel decodes (`block_layout`): regions of that many codes, PER_REGION each, on
    the scalar loop."""
    st = tensor.storage
    if st.kind == "int4":
        return tensor.size * PER_CODE_INT4[mve]
    bits = int(st.meta["bits"])
    if run is not None and _cycled(tensor):
        return tensor.size * (PER_CODE.get(bits, PER_CODE_OTHER) + PER_REGION / run)
    return tensor.size * (PER_CODE_MVE if mve else PER_CODE).get(bits, PER_CODE_OTHER)


@dataclass
class LayoutCodes:
    consts: list  # flash arrays and the tinyaot_decoded_weights struct
    arg: str  # the struct's address, what the kernel takes as its filter


def group_size(tensor) -> int:
    """Output channels per codebook (every channel for int4: one fixed codebook)."""
    st = tensor.storage
    return _out_channels(tensor) if st.kind == "int4" else int(st.meta["group_size"])


def block_regions(tensor, region_channels: int) -> tuple[int, int]:
    """(div, mod) for layouts whose region r holds output channels region_channels * r ...: the codebook of region r
    is group (r // div) % mod."""
    st = tensor.storage
    groups = 1 if st.kind == "int4" else int(st.arrays["codebooks"].shape[0])
    return max(1, group_size(tensor) // region_channels), groups


def block_layout(tensor, block_codes: int, run: int) -> tuple[int, int, int, int]:
    """(region, div, mod, cycle) of layout_codes for a layout of blocks of four output channels, `block_codes` codes
    each, made of runs of `run` codes of one channel cycling over the block's four channels (the fold layout: run 4;
    Helium's: 16; dw3x3's: 1): whole blocks as regions where a codebook holds whole blocks, else (one codebook per
    channel) each run a region, of codebook ((r // div) * 4 + r % 4) % mod."""
    if not _cycled(tensor):
        return (block_codes, *block_regions(tensor, 4), 1)
    if block_codes % (4 * run):
        raise ValueError(f"{tensor.name!r}: blocks of {block_codes} codes are not runs of {run} (a tinyaot bug)")
    return run, block_codes // run, block_regions(tensor, 1)[1], 4


def layout_codes(tensor, layout: np.ndarray, region: int, div: int, mod: int, cname: str,
                 free: np.ndarray | None = None, cycle: int = 1) -> LayoutCodes:
    """The codes of `tensor`'s weights in the dense kernel's `layout` (its int8 weight array, flat, a permutation of
    the weights): regions of `region` codes (the last may be shorter), region r decoded with codebook
    ((r // div) * cycle + r % cycle) % mod (div a multiple of cycle), which must hold each of its weights. `free`:
    positions of the layout whose value the kernel never uses (padding), which take code 0.

    int4 weights take no codebook and no regions (k = 0): `int4_words`."""
    st = tensor.storage
    layout = np.asarray(layout, np.int8).reshape(-1)
    if st.kind == "int4":
        return LayoutCodes([ConstArray("uint8_t", f"{cname}_codes", int4_words(layout, free)),
                            ConstStruct("tinyaot_decoded_weights", f"{cname}_decoded",
                                        [f"{cname}_codes", "NULL", 4, 0, int(layout.size), 1, 1, int(layout.size),
                                         1])], f"&{cname}_decoded")
    n_regions = -(-layout.size // region)
    codebooks = np.asarray(st.arrays["codebooks"], np.int8)
    bits, k = int(st.meta["bits"]), int(st.meta["k"])
    codes = np.zeros(layout.size, np.int64)
    for r in range(n_regions):
        cb = codebooks[((r // div) * cycle + r % cycle) % mod].astype(np.int16)
        seg = layout[r * region:(r + 1) * region].astype(np.int16)
        hit = seg[:, None] == cb[None, :]
        if free is not None:
            hit[np.asarray(free, bool).reshape(-1)[r * region:(r + 1) * region], 0] = True
        if not hit.any(axis=1).all():
            raise ValueError(f"{tensor.name!r}: a weight of region {r} is not in its codebook (a tinyaot bug)")
        codes[r * region:(r + 1) * region] = hit.argmax(axis=1)
    stream = ((codes[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    packed = np.packbits(stream, bitorder="little")
    consts = [ConstArray("uint8_t", f"{cname}_codes", packed),
              ConstArray("int8_t", f"{cname}_codebooks", codebooks.reshape(-1)),
              ConstStruct("tinyaot_decoded_weights", f"{cname}_decoded",
                          [f"{cname}_codes", f"{cname}_codebooks", bits, k, region, div, mod, int(layout.size),
                           cycle])]
    return LayoutCodes(consts, f"&{cname}_decoded")


def int4_words(layout: np.ndarray, free: np.ndarray | None = None) -> np.ndarray:
    """int4 weights in [-8, 7] (flat, the dense kernel's order) -> the bytes tinyaot_decode_int4 reads: per eight
    weights (the last padded) four bytes, byte i holding weight 8j+i + 8 in its low nibble and weight 8j+4+i + 8 in
    its high nibble. `free` positions (never used) take 0."""
    v = np.asarray(layout, np.int64).reshape(-1)
    if free is not None:
        v = np.where(np.asarray(free, bool).reshape(-1), 0, v)
    if v.size and (v.min() < -8 or v.max() > 7):
        raise ValueError("an int4 weight outside [-8, 7] (a tinyaot bug)")
    u = np.full(-(-v.size // 8) * 8, 8, np.int64)
    u[:v.size] = v + 8
    u = u.reshape(-1, 2, 4)
    return (u[:, 0] | (u[:, 1] << 4)).reshape(-1).astype(np.uint8)


def s4_fold_layout(values: np.ndarray) -> np.ndarray:
    """[out, depth] int4 values -> tinyaot_fully_connected_s4_fold's words: per block of four output channels (rows
    padded with 0 to a multiple of four), per group of eight inputs (depth padded with 0), one uint32 per channel of
    its eight biased nibbles u = w + 8, nibble j (bits 4j .. 4j+3) for input 8g + (0, 1, 4, 5, 2, 3, 6, 7)[j]."""
    v = np.asarray(values, np.int64)
    out_c, depth = v.shape
    padded = np.zeros((-(-out_c // 4) * 4, -(-depth // 8) * 8), np.int64)
    padded[:out_c, :depth] = v
    u = (padded + 8).reshape(padded.shape[0] // 4, 4, -1, 8)  # [block, channel, group, input]
    u = u[..., [0, 1, 4, 5, 2, 3, 6, 7]]  # nibble j holds the weight of this input (SXTB16's lane pairs)
    words = (u << (4 * np.arange(8))).sum(axis=3)  # [block, channel, group]
    return words.transpose(0, 2, 1).reshape(-1).astype(np.uint32)


def s4_fold_bound(values: np.ndarray, bias, input_offset: int) -> int:
    """The largest accumulator magnitude of tinyaot_fully_connected_s4_fold (see its header)."""
    v = np.abs(np.asarray(values, np.int64))
    d8 = -(-v.shape[1] // 8) * 8
    b = np.zeros(v.shape[0], np.int64) if bias is None else np.abs(np.asarray(bias, np.int64).reshape(-1))
    return int((b + v.sum(axis=1) * (128 + abs(int(input_offset))) + (8 + 15) * 128 * d8).max(initial=0))


def s5_fold_layout(values: np.ndarray) -> np.ndarray:
    """[out, depth] values in [-15, 15] -> tinyaot_fully_connected_s5_fold's words: per block of four output channels
    (rows padded with 0 to a multiple of four), per group of twelve inputs (depth padded with 0), the four channels'
    words A then their words B, each of three pairs of biased fields u = w + 16 (pair p at bits 5p and 16 + 5p):
    word A pairs the inputs (0, 2), (1, 3), (4, 6), word B (5, 7), (8, 10), (9, 11), as SXTB16 unpacks them."""
    v = np.asarray(values, np.int64)
    out_c, depth = v.shape
    padded = np.zeros((-(-out_c // 4) * 4, -(-depth // 12) * 12), np.int64)
    padded[:out_c, :depth] = v
    u = (padded + 16).reshape(padded.shape[0] // 4, 4, -1, 12)  # [block, channel, group, input]
    # field j (bits 5 (j % 3) + 16 (j // 3)) of word A / B holds the weight of this input
    shifts = 5 * (np.arange(6) % 3) + 16 * (np.arange(6) // 3)
    word_a = (u[..., [0, 1, 4, 2, 3, 6]] << shifts).sum(axis=3)  # [block, channel, group]
    word_b = (u[..., [5, 8, 9, 7, 10, 11]] << shifts).sum(axis=3)
    words = np.stack([word_a, word_b], axis=1)  # [block, A/B, channel, group]
    return words.transpose(0, 3, 1, 2).reshape(-1).astype(np.uint32)


def s5_fold_bound(values: np.ndarray, bias, input_offset: int) -> int:
    """The largest accumulator magnitude of tinyaot_fully_connected_s5_fold (see its header)."""
    v = np.abs(np.asarray(values, np.int64))
    d12 = -(-v.shape[1] // 12) * 12
    b = np.zeros(v.shape[0], np.int64) if bias is None else np.abs(np.asarray(bias, np.int64).reshape(-1))
    return int((b + v.sum(axis=1) * (128 + abs(int(input_offset))) + (16 + 31) * 128 * d12).max(initial=0))


__all__ = ["FILES", "HEADER", "KINDS", "STACK_MIN", "STACK_TILE", "LayoutCodes", "block_layout", "block_regions",
           "decodable", "decode_cost", "group_size", "int4_words", "layout_codes", "on_stack", "s4_fold_bound",
           "s4_fold_layout", "s5_fold_bound", "s5_fold_layout", "stack_ok"]
