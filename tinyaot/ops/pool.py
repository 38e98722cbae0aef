"""Average and max pooling: bit-exact numpy int8 reference kernels (TFLite int8 semantics).

Input and output share scale and zero point (no requantization). Padding is (top, left) plus the explicit output
size. Padded positions are excluded: max ignores them and the average divides by the number of real inputs in the
window, rounding sum/count to nearest with ties away from zero (TFLite's integer average pool; round-half-to-even or
counting the padding each change some CMSIS-NN expected outputs).
"""
from __future__ import annotations

import numpy as np


def _windows(x: np.ndarray, fill: int, kernel_hw, stride_hw, pad_top_left, output_hw):
    """Gather pooling windows [N, OH, OW, KH, KW, C] (int64, padded with `fill`) and the valid mask [OH, OW, KH, KW]."""
    n, h, w, c = x.shape
    kh, kw = kernel_hw
    sh, sw = stride_hw
    pt, pl = pad_top_left
    oh, ow = output_hw
    iy = np.arange(oh)[:, None] * sh + np.arange(kh)[None, :] - pt  # [OH, KH]
    ix = np.arange(ow)[:, None] * sw + np.arange(kw)[None, :] - pl  # [OW, KW]
    vy = (iy >= 0) & (iy < h)
    vx = (ix >= 0) & (ix < w)
    valid = vy[:, None, :, None] & vx[None, :, None, :]
    lo_y, lo_x = max(0, -int(iy.min())), max(0, -int(ix.min()))
    hi_y, hi_x = max(0, int(iy.max()) - (h - 1)), max(0, int(ix.max()) - (w - 1))
    padded = np.pad(x.astype(np.int64), ((0, 0), (lo_y, hi_y), (lo_x, hi_x), (0, 0)), constant_values=fill)
    win = padded[:, (iy + lo_y)[:, None, :, None], (ix + lo_x)[None, :, None, :], :]
    return win, valid


def avgpool_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC average pool -> int8 [N, OH, OW, C]."""
    win, valid = _windows(np.asarray(input), 0, kernel_hw, stride_hw, pad_top_left, output_hw)
    total = win.sum(axis=(3, 4))  # [N, OH, OW, C]; padded entries are 0
    count = valid.sum(axis=(2, 3)).astype(np.int64)[None, :, :, None]  # [1, OH, OW, 1]
    if np.any(count == 0):
        raise ValueError("avgpool_s8: a pooling window lies entirely in the padding")
    half = count // 2
    # round half away from zero: magnitude rounded up at .5, sign restored (floor == trunc on non-negatives)
    avg = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    return np.clip(avg, int(act_min), int(act_max)).astype(np.int8)


def maxpool_s8(input: np.ndarray, *, kernel_hw, stride_hw=(1, 1), pad_top_left=(0, 0), output_hw,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC max pool -> int8 [N, OH, OW, C]."""
    # fill below any int8 so padding never wins the max
    win, valid = _windows(np.asarray(input), -129, kernel_hw, stride_hw, pad_top_left, output_hw)
    if not np.all(valid.any(axis=(2, 3))):
        raise ValueError("maxpool_s8: a pooling window lies entirely in the padding")
    m = win.max(axis=(3, 4))
    return np.clip(m, int(act_min), int(act_max)).astype(np.int8)
