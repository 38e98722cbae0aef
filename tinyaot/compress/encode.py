"""Encoders and decoders for every `WeightStorage` kind in storage.py, in numpy.

`encode_*` build the arrays exactly as storage.py defines them; `decode()` turns any storage back into the int8
values. compression assigns a storage only through `assign_storage()`, which checks `decode(...) == Tensor.data`
on the spot, so a storage that does not reproduce the weights bit for bit can never reach a kernel.

Bit packing (clustered indices): each output channel's indices form one little-endian bit stream, value i in bits
[i*bits, (i+1)*bits) where bit j of the stream is bit j % 8 of byte j // 8; for bits in (1, 2, 4, 8) this is
storage.py's "first value in the low bits", and for 3, 5, 6, 7 bits a value may straddle two bytes. Every
channel starts on a byte boundary (`row_bytes` bytes per channel).

Besides storage.py's meta keys every non-dense storage made here carries meta["depthwise"] (whether rows are
taken over the last axis), so `decode(tensor)` needs nothing but the tensor.
"""
from __future__ import annotations

import math

import numpy as np

from tinyaot.compress.storage import WeightStorage, rows
from tinyaot.ops.compressed import block_positions, block_shape  # the kernels' reading of sparse_block

KINDS = ("dense", "int4", "int5", "clustered", "sparse_bitmap", "sparse_rle", "sparse_block")


def _from_rows(r: np.ndarray, shape: tuple[int, ...], depthwise: bool) -> np.ndarray:
    """Inverse of storage.rows(): [out_ch, row_len] back to the IR layout."""
    if depthwise:
        return np.ascontiguousarray(r.T).reshape(shape)
    return r.reshape(shape)


def index_bits(k: int) -> int:
    """Bits per index of a K-entry codebook: ceil(log2 K), at least 1."""
    return max(1, math.ceil(math.log2(k))) if k > 1 else 1


# ---- int4 ------------------------------------------------------------------------------------------------------

def encode_int4(values: np.ndarray, depthwise: bool = False) -> WeightStorage:
    flat = np.asarray(values).reshape(-1).astype(np.int16)
    if flat.size and (flat.min() < -7 or flat.max() > 7):
        raise ValueError("int4 storage holds values in [-7, 7]")
    nib = (flat & 0xF).astype(np.uint8)
    if nib.size % 2:
        nib = np.append(nib, np.uint8(0))  # an odd count pads the last high nibble with 0
    packed = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    return WeightStorage("int4", {"packed": packed}, {"depthwise": depthwise})


def _decode_int4(st: WeightStorage, shape, depthwise) -> np.ndarray:
    p = st.arrays["packed"].astype(np.uint8)
    nib = np.empty(p.size * 2, np.int16)
    nib[0::2], nib[1::2] = p & 0xF, p >> 4
    nib = np.where(nib >= 8, nib - 16, nib)  # two's complement nibble
    n = int(np.prod(shape, dtype=np.int64))
    return nib[:n].astype(np.int8).reshape(shape)


# ---- int5 ------------------------------------------------------------------------------------------------------

INT5_PER_WORD = 6  # three 5-bit fields in each 16-bit half of a word (bits 15 and 31 stay 0)


def int5_shifts() -> np.ndarray:
    """Bit offset of field j = 0..5 of an int5 word: 0, 5, 10 in the low half, 16, 21, 26 in the high one."""
    j = np.arange(INT5_PER_WORD)
    return 5 * (j % 3) + 16 * (j // 3)


def encode_int5(values: np.ndarray, depthwise: bool = False) -> WeightStorage:
    """Values in [-15, 15] (the 31-level grid of --clusters 17..32 on a single-use layer) -> int5 storage: biased
    u = w + 16 in [1, 31], six per uint32 word, row-major over the whole tensor (the last word padded with u = 16,
    w = 0)."""
    flat = np.asarray(values).reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < -15 or flat.max() > 15):
        raise ValueError("int5 storage holds values in [-15, 15]")
    u = np.full(-(-flat.size // INT5_PER_WORD) * INT5_PER_WORD, 16, np.int64)
    u[:flat.size] = flat + 16
    words = (u.reshape(-1, INT5_PER_WORD) << int5_shifts()).sum(axis=1)
    return WeightStorage("int5", {"packed": words.astype(np.uint32)}, {"depthwise": depthwise})


def _decode_int5(st: WeightStorage, shape, depthwise) -> np.ndarray:
    words = st.arrays["packed"].astype(np.int64)
    u = (words[:, None] >> int5_shifts()) & 31
    n = int(np.prod(shape, dtype=np.int64))
    if u.size < n or (u.reshape(-1)[n:] != 16).any() or (words & 0x80008000).any() or (u == 0).any():
        raise ValueError("int5 storage: the words do not fit the weights' shape")
    return (u.reshape(-1)[:n] - 16).astype(np.int8).reshape(shape)


# ---- clustered -------------------------------------------------------------------------------------------------

def pack_indices(idx: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    """[out_ch, row_len] indices -> (packed uint8, row_bytes): per-row little-endian bit streams."""
    out_ch, row_len = idx.shape
    row_bytes = (row_len * bits + 7) // 8
    stream = ((idx.astype(np.uint32)[:, :, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    stream = stream.reshape(out_ch, row_len * bits)
    stream = np.pad(stream, ((0, 0), (0, row_bytes * 8 - row_len * bits)))
    return np.packbits(stream, axis=1, bitorder="little").reshape(-1), row_bytes


def unpack_indices(packed: np.ndarray, out_ch: int, row_len: int, bits: int, row_bytes: int) -> np.ndarray:
    stream = np.unpackbits(packed.reshape(out_ch, row_bytes), axis=1, bitorder="little")
    stream = stream[:, :row_len * bits].reshape(out_ch, row_len, bits).astype(np.int64)
    return (stream << np.arange(bits)).sum(axis=2)


def encode_clustered(values: np.ndarray, codebooks: np.ndarray, group_size: int,
                     depthwise: bool = False) -> WeightStorage:
    """`values` whose every channel c takes values only from codebooks[c // group_size] -> clustered storage."""
    r = rows(np.asarray(values), depthwise).astype(np.int16)
    codebooks = np.asarray(codebooks, np.int8)
    k = codebooks.shape[1]
    bits = index_bits(k)
    cb = codebooks[np.arange(r.shape[0]) // group_size].astype(np.int16)  # [out_ch, K]
    hit = r[:, :, None] == cb[:, None, :]  # [out_ch, row_len, K]
    if not hit.any(axis=2).all():
        raise ValueError("a weight is not in its channel group's codebook")
    idx = hit.argmax(axis=2)  # first matching entry
    packed, row_bytes = pack_indices(idx, bits)
    return WeightStorage("clustered", {"codebooks": codebooks, "packed": packed},
                         {"k": int(k), "bits": int(bits), "group_size": int(group_size), "row_bytes": int(row_bytes),
                          "depthwise": depthwise})


def _decode_clustered(st: WeightStorage, shape, depthwise) -> np.ndarray:
    m = st.meta
    out_ch = shape[-1] if depthwise else shape[0]
    row_len = int(np.prod(shape, dtype=np.int64)) // out_ch
    idx = unpack_indices(st.arrays["packed"], out_ch, row_len, m["bits"], m["row_bytes"])
    cb = st.arrays["codebooks"][np.arange(out_ch) // m["group_size"]]
    return _from_rows(np.take_along_axis(cb, idx, axis=1).astype(np.int8), shape, depthwise)


# ---- sparse ----------------------------------------------------------------------------------------------------

def _row_offsets(nnz_per_row: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(nnz_per_row)]).astype(np.int32)


def encode_sparse_bitmap(values: np.ndarray, depthwise: bool = False) -> WeightStorage:
    r = rows(np.asarray(values), depthwise)
    mask = r != 0
    bitmap = np.packbits(mask, axis=1, bitorder="little").reshape(-1)  # each row padded to whole bytes
    return WeightStorage("sparse_bitmap", {"bitmap": bitmap, "values": r[mask].astype(np.int8),
                                           "row_offsets": _row_offsets(mask.sum(axis=1))}, {"depthwise": depthwise})


def _decode_sparse_bitmap(st: WeightStorage, shape, depthwise) -> np.ndarray:
    out_ch = shape[-1] if depthwise else shape[0]
    row_len = int(np.prod(shape, dtype=np.int64)) // out_ch
    mask = np.unpackbits(st.arrays["bitmap"].reshape(out_ch, -1), axis=1, bitorder="little")[:, :row_len] == 1
    r = np.zeros((out_ch, row_len), np.int8)
    r[mask] = st.arrays["values"]
    if not np.array_equal(_row_offsets(mask.sum(axis=1)), st.arrays["row_offsets"]):
        raise ValueError("sparse_bitmap: row_offsets do not match the bitmap")
    return _from_rows(r, shape, depthwise)


def encode_sparse_rle(values: np.ndarray, depthwise: bool = False) -> WeightStorage:
    """Per row, (skip, value) pairs: `skip` zeros then the nonzero `value`. A gap of more than 255 zeros is bridged
    with (255, 0) entries, each standing for 256 zeros (255 skipped plus a stored 0). Trailing zeros of a row are
    not stored: the row length is known."""
    r = rows(np.asarray(values), depthwise)
    runs, vals, counts = [], [], []
    for row in r:
        n = 0
        prev = -1
        for p in np.flatnonzero(row):
            skip = int(p - prev - 1)
            while skip > 255:
                runs.append(255)
                vals.append(0)
                skip -= 256
                n += 1
            runs.append(skip)
            vals.append(int(row[p]))
            n += 1
            prev = int(p)
        counts.append(n)
    return WeightStorage("sparse_rle", {"runs": np.asarray(runs, np.uint8), "values": np.asarray(vals, np.int8),
                                        "row_offsets": _row_offsets(np.asarray(counts, np.int64))},
                         {"depthwise": depthwise})


def _decode_sparse_rle(st: WeightStorage, shape, depthwise) -> np.ndarray:
    out_ch = shape[-1] if depthwise else shape[0]
    row_len = int(np.prod(shape, dtype=np.int64)) // out_ch
    r = np.zeros((out_ch, row_len), np.int8)
    off, runs, vals = st.arrays["row_offsets"], st.arrays["runs"], st.arrays["values"]
    for c in range(out_ch):
        pos = -1
        for e in range(int(off[c]), int(off[c + 1])):
            pos += int(runs[e]) + 1
            r[c, pos] = vals[e]
    return _from_rows(r, shape, depthwise)


def sparse_rle_nbytes(values: np.ndarray, depthwise: bool = False) -> int:
    """Bytes encode_sparse_rle would take, without building it (2 bytes per entry plus row offsets)."""
    r = rows(np.asarray(values), depthwise)
    entries = 0
    for row in r:
        nz = np.flatnonzero(row)
        gaps = np.diff(np.concatenate([[-1], nz])) - 1
        entries += nz.size + int(np.sum(gaps // 256))
    return 2 * entries + 4 * (r.shape[0] + 1)


# ---- block sparse ----------------------------------------------------------------------------------------------

BLOCK_ROWS, BLOCK_COLS = 4, 4  # output channels x consecutive row positions per block (compress/pattern.py)
MAX_DELTA = 255


def _padded_rows(values: np.ndarray, block=(BLOCK_ROWS, BLOCK_COLS)) -> np.ndarray:
    """[out_ch, row_len] rows zero-padded to whole blocks (4 x 4 unless `block` says otherwise)."""
    br, bc = block
    r = rows(np.asarray(values), False)
    out_ch, row_len = r.shape
    padded = np.zeros((-(-out_ch // br) * br, -(-row_len // bc) * bc), np.int8)
    padded[:out_ch, :row_len] = r
    return padded


def encode_sparse_block(values: np.ndarray, depthwise: bool = False, block=(BLOCK_ROWS, BLOCK_COLS)) -> WeightStorage:
    """Storage of the blocks (4 x 4, or `block` = (2, 1)) that hold a nonzero weight (storage.py "sparse_block");
    any values work (an unstructured mask keeps nearly every block), block-sparse ones are what it is small for."""
    if depthwise:
        raise ValueError("sparse_block storage is for conv and fully connected rows, not depthwise taps")
    br, bc = (int(v) for v in block)
    if (br, bc) == (2, 1):
        return _encode_block2x1(values)
    padded = _padded_rows(values, (br, bc))
    nbr, nbc = padded.shape[0] // br, padded.shape[1] // bc
    blocks = padded.reshape(nbr, br, nbc, bc).transpose(0, 2, 1, 3)  # [nbr, nbc, br, bc]
    kept = blocks.reshape(nbr, nbc, -1).any(axis=2)
    vals, deltas, counts = [], [], []
    zero = np.zeros((br, bc), np.int8)
    for r in range(nbr):
        pos, n = 0, 0
        for j in np.flatnonzero(kept[r]):
            while j - pos > MAX_DELTA:  # bridge a long gap with stored zero blocks
                pos += MAX_DELTA
                vals.append(zero)
                deltas.append(MAX_DELTA)
                n += 1
            deltas.append(int(j - pos))
            vals.append(blocks[r, j])
            pos = int(j)
            n += 1
        counts.append(n)
    values_arr = np.stack(vals).reshape(-1).astype(np.int8) if vals else np.zeros(0, np.int8)
    meta = {"depthwise": False}
    if (br, bc) != (BLOCK_ROWS, BLOCK_COLS):
        meta["block"] = [br, bc]
    return WeightStorage("sparse_block", {"values": values_arr, "deltas": np.asarray(deltas, np.uint8),
                                          "counts": np.asarray(counts, np.uint16)}, meta)


def _encode_block2x1(values: np.ndarray) -> WeightStorage:
    """The 2x1 form (storage.py "sparse_block", meta block [2, 1]): per channel pair a bitmap of its kept positions
    and the kept blocks' two weights each, a pair with an odd count followed by one zero block."""
    padded = _padded_rows(values, (2, 1))
    pairs, k = padded.shape[0] // 2, padded.shape[1]
    blocks = padded.reshape(pairs, 2, k).transpose(0, 2, 1)  # [pair, position, channel]
    kept = blocks.any(axis=2)
    row_bytes = -(-k // 8)
    bits = np.zeros((pairs, row_bytes * 8), np.uint8)
    bits[:, :k] = kept
    vals = []
    for r in range(pairs):
        vals.append(blocks[r][kept[r]].reshape(-1))
        if kept[r].sum() % 2:
            vals.append(np.zeros(2, np.int8))
    values_arr = np.concatenate(vals).astype(np.int8) if vals else np.zeros(0, np.int8)
    return WeightStorage("sparse_block", {"bitmap": np.packbits(bits, axis=1, bitorder="little").reshape(-1),
                                          "values": values_arr},
                         {"depthwise": False, "block": [2, 1], "row_bytes": row_bytes})


def sparse_block_nbytes(values: np.ndarray, block=(BLOCK_ROWS, BLOCK_COLS)) -> int:
    """Bytes encode_sparse_block would take, without building it."""
    br, bc = (int(v) for v in block)
    padded = _padded_rows(values, (br, bc))
    nbr, nbc = padded.shape[0] // br, padded.shape[1] // bc
    kept = padded.reshape(nbr, br, nbc, bc).any(axis=(1, 3))
    if (br, bc) == (2, 1):  # bitmaps, and two bytes per kept block (an odd pair's filler block included)
        per = kept.sum(axis=1)
        return nbr * -(-nbc // 8) + 2 * int(np.sum(per + per % 2))
    n = 0
    for r in range(nbr):
        pos = 0
        for j in np.flatnonzero(kept[r]):
            n += 1 + max(0, (int(j) - pos - 1) // MAX_DELTA)  # and the zero blocks bridging a gap
            pos = int(j)
    return (br * bc + 1) * n + 2 * nbr


def _decode_block2x1(st: WeightStorage, out_ch: int, row_len: int) -> np.ndarray:
    pairs, row_bytes = -(-out_ch // 2), -(-row_len // 8)
    bitmap, vals = st.arrays["bitmap"], st.arrays["values"]
    if int(st.meta.get("row_bytes", -1)) != row_bytes or bitmap.size != pairs * row_bytes:
        raise ValueError("sparse_block 2x1: the bitmap does not fit the weights' shape")
    bits = np.unpackbits(bitmap.reshape(pairs, row_bytes), axis=1, bitorder="little").astype(bool)
    if bits[:, row_len:].any():
        raise ValueError("sparse_block 2x1: a kept position past the row")
    per = bits.sum(axis=1)
    if vals.size != 2 * int(np.sum(per + per % 2)):
        raise ValueError("sparse_block 2x1: bitmap and values do not agree")
    padded = np.zeros((2 * pairs, row_len), np.int8)
    b = 0
    for r in range(pairs):
        cols = np.flatnonzero(bits[r])
        v = vals[b:b + 2 * cols.size].reshape(-1, 2)
        if per[r] % 2 and vals[b + 2 * cols.size:b + 2 * cols.size + 2].any():
            raise ValueError("sparse_block 2x1: a nonzero filler block")
        padded[2 * r, cols], padded[2 * r + 1, cols] = v[:, 0], v[:, 1]
        b += 2 * (cols.size + cols.size % 2)
    if padded[out_ch:].any():
        raise ValueError("sparse_block: nonzero padding")
    return padded[:out_ch]


def _decode_sparse_block(st: WeightStorage, shape, depthwise) -> np.ndarray:
    br, bc = block_shape(st)
    out_ch = shape[0]
    row_len = int(np.prod(shape, dtype=np.int64)) // out_ch
    if (br, bc) == (2, 1):
        return _decode_block2x1(st, out_ch, row_len).reshape(shape)
    nbr, nbc = -(-out_ch // br), -(-row_len // bc)
    if st.arrays["counts"].size != nbr or st.arrays["values"].size != br * bc * st.arrays["deltas"].size or \
            int(st.arrays["counts"].astype(np.int64).sum()) != st.arrays["deltas"].size:
        raise ValueError("sparse_block: counts, deltas and values do not agree")
    padded = np.zeros((nbr * br, nbc * bc), np.int8)
    blocks = st.arrays["values"].reshape(-1, br, bc)
    b = 0
    for r, cols in enumerate(block_positions(st)):
        for j in cols:
            if j >= nbc:
                raise ValueError("sparse_block: a block column past the row")
            padded[br * r:br * (r + 1), bc * j:bc * (j + 1)] |= blocks[b]
            b += 1
    if padded[out_ch:].any() or padded[:, row_len:].any():
        raise ValueError("sparse_block: nonzero padding")
    return padded[:out_ch, :row_len].reshape(shape)


# ---- any kind --------------------------------------------------------------------------------------------------

_DECODERS = {"int4": _decode_int4, "int5": _decode_int5, "clustered": _decode_clustered,
             "sparse_bitmap": _decode_sparse_bitmap,
             "sparse_rle": _decode_sparse_rle, "sparse_block": _decode_sparse_block}


def decode(tensor, depthwise: bool | None = None) -> np.ndarray:
    """The int8 values a weight tensor's storage holds, in the IR layout. A tensor without storage, or with
    "dense" storage, is its own data. `depthwise` defaults to the storage's meta (set by the encoders here)."""
    st = tensor.storage
    if st is None or st.kind == "dense":
        return np.asarray(tensor.data)
    if st.kind not in _DECODERS:
        raise ValueError(f"unknown weight storage kind {st.kind!r}")
    dw = st.meta.get("depthwise", False) if depthwise is None else depthwise
    return _DECODERS[st.kind](st, tuple(tensor.shape), dw)


def assign_storage(tensor, storage: WeightStorage) -> None:
    """Set `tensor.storage`, after checking that it decodes to exactly `tensor.data` (the storage.py invariant)."""
    old = tensor.storage
    tensor.storage = storage
    got = decode(tensor)
    if got.shape != tensor.data.shape or not np.array_equal(got, tensor.data):
        tensor.storage = old
        raise AssertionError(f"{storage.kind} storage of {tensor.name!r} does not decode to its int8 values "
                             "(a tinyaot bug)")


__all__ = ["KINDS", "index_bits", "pack_indices", "unpack_indices", "encode_int4", "encode_int5", "int5_shifts",
           "encode_clustered",
           "encode_sparse_bitmap", "encode_sparse_rle", "sparse_rle_nbytes", "encode_sparse_block",
           "sparse_block_nbytes", "block_positions", "block_shape", "decode", "assign_storage"]
