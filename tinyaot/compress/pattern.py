"""Sparsity patterns: which groups of weights pruning removes together, so that a kernel can skip them whole.

Everything is defined on `storage.rows(values, depthwise)`, the [out_ch, row_len] view of a layer's weights in
the order its kernels visit them (conv OHWI: row_len = kh*kw*in_ch in (ky, kx, ci) order; fully connected
[out, in]).

- "unstructured": any weight (flash: the bitmap and run-length storages; the kernels decode every position).
- "block": blocks of 4 output channels x 4 consecutive row positions, block (r, j) = rows[4r:4r+4, 4j:4j+4] (the last
  block-row and block-column partial). The sparse_block storage keeps only the blocks that hold a nonzero weight
  and its kernels skip the others whole: one block is four channels against one word of four int8 inputs, the
  unit of the fold kernels' SMLAD pairs on DSP cores and a quarter of a Helium VMLADAVA (four stored blocks of a
  block-row go in one 16-lane multiply-accumulate through a word gather). Only standard convolutions (one group,
  not depthwise) and fully connected layers have block kernels; under "block" the others are left dense.

- "block2x1": the speed form that keeps accuracy. Standard convolutions are cut into blocks of 2 output channels x 1
  row position (block (r, j) = rows[2r:2r+2, j], the last block-row partial): sparse_block storage with meta
  block = [2, 1], whose kernels (tinyaot_convolve_s8_block2x1[_mve].c) run a pair of channels against the kept
  positions of their row, gathered. Fully connected layers take 4x4 blocks as under "block" (a lone input row has
  no pixel pair to share a gather with), and depthwise / grouped convolutions are pruned unstructured but stored
  and run dense (no kernel skips their zeros; they take part of the budget so that the others keep more).
  Measured (kws_dscnn, 900 held-out kws01, host C, --prune 0.5): unstructured 90.00 %, block2x1 86.22 %, 1x2
  85.44 %, 4x1 81.22 %, 2x2 77.89 %, 4x4 65.78 % (same allocation), "block" 58.67 %.

A mask is block-sparse when every nonzero weight lies in a kept block; a kept block may hold zeros.
"""
from __future__ import annotations

import numpy as np

from tinyaot.compress.encode import BLOCK_COLS, BLOCK_ROWS
from tinyaot.compress.storage import rows

PATTERNS = ("unstructured", "block", "block2x1")
BLOCK = (BLOCK_ROWS, BLOCK_COLS)


def takes_blocks(kind: str) -> bool:
    """Whether a layer of this kind (compress/prune.layer_kind: conv, depthwise, fully_connected) has block
    kernels, i.e. may be pruned under the "block" pattern."""
    return kind in ("conv", "fully_connected")


def block_grid(shape, depthwise: bool = False) -> tuple[int, int] | None:
    """(block-rows, block-columns) of a weight tensor of this IR shape; None for depthwise weights (no blocks)."""
    if depthwise:
        return None
    out_ch = int(shape[0])
    row_len = int(np.prod(shape[1:], dtype=np.int64))
    return -(-out_ch // BLOCK_ROWS), -(-row_len // BLOCK_COLS)


def _padded(r: np.ndarray) -> np.ndarray:
    out_ch, row_len = r.shape
    p = np.zeros((-(-out_ch // BLOCK_ROWS) * BLOCK_ROWS, -(-row_len // BLOCK_COLS) * BLOCK_COLS), r.dtype)
    p[:out_ch, :row_len] = r
    return p


def block_scores(rows2d: np.ndarray) -> np.ndarray:
    """Sum of squares of each block of a [out_ch, row_len] array: [block-rows, block-columns]."""
    p = _padded(np.asarray(rows2d, np.float64))
    nbr, nbc = p.shape[0] // BLOCK_ROWS, p.shape[1] // BLOCK_COLS
    return (p.reshape(nbr, BLOCK_ROWS, nbc, BLOCK_COLS) ** 2).sum(axis=(1, 3))


def expand_block_mask(block_mask: np.ndarray, shape) -> np.ndarray:
    """A [block-rows, block-columns] keep mask as an elementwise keep mask in the IR layout of `shape`."""
    out_ch = int(shape[0])
    row_len = int(np.prod(shape[1:], dtype=np.int64))
    full = np.repeat(np.repeat(np.asarray(block_mask, bool), BLOCK_ROWS, axis=0), BLOCK_COLS, axis=1)
    return full[:out_ch, :row_len].reshape(shape)


def is_block_sparse(values: np.ndarray, depthwise: bool = False) -> bool:
    """True when the zeros of `values` are whole blocks and at least one block is zero (what sparse_block pays
    for)."""
    if depthwise:
        return False
    return not block_scores(rows(np.asarray(values), False) != 0).all()


__all__ = ["PATTERNS", "BLOCK", "takes_blocks", "block_grid", "block_scores", "expand_block_mask",
           "is_block_sparse"]
