"""How a weight tensor is stored in flash. The contract between compression (which decides) and the kernels
(which decode on the fly).

Invariant: `Tensor.data` always holds the weights' final int8 *values* (decoded, in the IR's layout), so the numpy
references, the onnxruntime oracle and every byte count agree on what the weights are; `Tensor.storage` says how
those values are laid out in flash. Decoding `storage` must give back exactly `Tensor.data` (`decode()` below is
checked against it), so a compressed kernel is bit-exact with the dense reference by construction.

Kinds (all packings little-endian within a byte: the first value in the low bits):
- "dense":     one int8 per weight.                                  arrays: {}
- "int4":      two's-complement 4-bit values in [-7, 7], two per byte, row-major over the whole tensor
               (an odd count pads the last high nibble with 0).      arrays: {"packed": uint8}
- "int5":      values in [-15, 15] stored biased, u = w + 16 in [1, 31], six per little-endian uint32 word,
               row-major over the whole tensor: value 6i + j in word i at bits 5 * (j % 3) + 16 * (j // 3) (three
               fields per 16-bit half, bits 15 and 31 zero; the last word padded with u = 16). 5.33 bits per
               weight: the fully connected kernels take three 16-bit lane pairs per word with one AND each
               (tinyaot_fully_connected_s5.c).                       arrays: {"packed": uint32}
- "clustered": per group of output channels a codebook of K int8 values; each weight is an index of
               `bits` = ceil(log2 K) bits, packed row-major per output channel, each channel starting on a byte
               boundary (so a kernel can seek to a channel).            arrays: {"codebooks": int8 [groups, K],
               "packed": uint8}; meta: {"k", "bits", "group_size" (output channels per codebook), "row_bytes"}
- "sparse_bitmap": per output channel a bitmap of the row's nonzero positions (1 bit per weight, rows padded to
               whole bytes) followed by nothing; the nonzero values of all rows are concatenated in row order.
               arrays: {"bitmap": uint8, "values": int8, "row_offsets": int32 [out_ch + 1] (index of each row's
               first value in `values`)}
- "sparse_rle": per output channel, pairs (skip, value): `skip` zeros then one nonzero; runs of more than 255
               zeros are split with value 0 entries. arrays: {"runs": uint8 skips, "values": int8,
               "row_offsets": int32 [out_ch + 1]}
- "sparse_block": block sparsity a kernel skips whole (compress/pattern.py): the [out_ch, row_len] rows cut into
               blocks of 4 output channels x 4 consecutive positions (the last block-row and block-column partial,
               zero-padded); only blocks holding a nonzero weight are stored, block-row by block-row, each in
               increasing block column. arrays: {"values": int8 [n_blocks * 16] (per block its 4 channels' 4 values,
               channel by channel), "deltas": uint8 [n_blocks] (block columns advanced from the previous stored
               block of the same block-row, from column 0 for the first; a gap over 255 is bridged by stored
               all-zero blocks), "counts": uint16 [ceil(out_ch / 4)] (stored blocks per block-row)}. Depthwise
               weights have no block form (no kernel skips there). meta "block" = [2, 1] (absent: 4 x 4): blocks
               of 2 output channels x 1 position instead ("block2x1", compress/pattern.py), stored as bitmaps:
               arrays {"bitmap": uint8 [ceil(out_ch / 2) * row_bytes] (per channel pair 2p, 2p+1 its K positions,
               bit j of byte j // 8 set when position j holds a nonzero weight in either channel; meta
               "row_bytes" = ceil(K / 8)), "values": int8 (per pair, per set bit in increasing j, the pair's two
               weights (w[2p][j], w[2p+1][j]); a pair with an odd number of set bits followed by one zero block)}:
               2 bytes per kept block and K / 8 per pair, 0.5625 bytes per weight at 50 % (3 with the 4x4 form's
               deltas). The kernels decode the bitmaps into positions once per call (ops/compressed.py).
"Output channel" is axis 0 of OHWI/[out, in] weights and axis 3 (the last) of depthwise 1HWC weights, where a
row is then the kh*kw taps of one channel: `rows()` gives the [out_ch, row_len] view every kind is defined on.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinyaot.ops.intbounds import weight_rows as rows  # the [out_ch, row_len] view (defined with the kernels' bounds)


@dataclass
class WeightStorage:
    kind: str = "dense"
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def nbytes(self, values: np.ndarray) -> int:
        """Bytes in flash of the weight tensor stored this way (codebooks, bitmaps, offsets included)."""
        if self.kind == "dense":
            return int(values.size)
        return int(sum(a.nbytes for a in self.arrays.values()))


__all__ = ["WeightStorage", "rows"]
