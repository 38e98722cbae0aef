"""Conv and depthwise conv: bit-exact numpy int8 reference kernels (TFLite/CMSIS-NN semantics).

Parameter conventions are CMSIS-NN's: `input_offset = -input_zero_point`, `output_offset = output_zero_point`, the
filter is symmetric (zero point 0). Padding is given as (top, left) together with the explicit output size, which
covers SAME, VALID and asymmetric pads alike; padded positions hold the input zero point, i.e. they contribute
nothing to `sum((x + input_offset) * w)`.

Accumulation is exact in int64 here; the C kernels accumulate in int32, which cannot overflow while
kh*kw*cin_per_group * 255 * 128 + |bias| < 2**31 (about 65 000 taps), far above any layer that fits a
microcontroller.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ops.fixedpoint import requantize_to_int8


def _patches(xo: np.ndarray, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw) -> np.ndarray:
    """Gather im2col patches [N, OH, OW, KH, KW, C] from an offset-applied int64 NHWC tensor, padded with 0."""
    n, h, w, c = xo.shape
    kh, kw = kernel_hw
    sh, sw = stride_hw
    pt, pl = pad_top_left
    dh, dw = dilation_hw
    oh, ow = output_hw
    # rows/cols the windows reach, relative to the unpadded input
    iy = np.arange(oh)[:, None] * sh + np.arange(kh)[None, :] * dh - pt  # [OH, KH]
    ix = np.arange(ow)[:, None] * sw + np.arange(kw)[None, :] * dw - pl  # [OW, KW]
    lo_y = max(0, -int(iy.min()))
    lo_x = max(0, -int(ix.min()))
    hi_y = max(0, int(iy.max()) - (h - 1))
    hi_x = max(0, int(ix.max()) - (w - 1))
    padded = np.pad(xo, ((0, 0), (lo_y, hi_y), (lo_x, hi_x), (0, 0)))
    iy = iy + lo_y
    ix = ix + lo_x
    return padded[:, iy[:, None, :, None], ix[None, :, None, :], :]  # [N, OH, OW, KH, KW, C]


def conv2d_s8(
    input: np.ndarray,
    weights_ohwi: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    output_offset: int,
    stride_hw=(1, 1),
    pad_top_left=(0, 0),
    dilation_hw=(1, 1),
    output_hw,
    act_min: int = -128,
    act_max: int = 127,
    groups: int = 1,
) -> np.ndarray:
    """int8 NHWC conv. weights [out_ch, kh, kw, in_ch/groups]; bias int32 [out_ch] or None; output_mult/shift
    per output channel (length out_ch) or per tensor (length 1 / scalar). Returns int8 [N, OH, OW, out_ch]."""
    input = np.asarray(input)
    weights_ohwi = np.asarray(weights_ohwi)
    n, h, w, cin = input.shape
    cout, kh, kw, cin_g = weights_ohwi.shape
    if cin != cin_g * groups:
        raise ValueError(f"conv2d_s8: input has {cin} channels, filter expects {cin_g} x {groups} groups")
    if cout % groups:
        raise ValueError(f"conv2d_s8: {cout} output channels do not split into {groups} groups")
    cout_g = cout // groups
    xo = input.astype(np.int64) + int(input_offset)
    p = _patches(xo, (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)
    oh, ow = p.shape[1], p.shape[2]
    # [N*OH*OW, G, KH*KW*Cg] x [G, KH*KW*Cg, Og] -> [G, N*OH*OW, Og] (int64 matmul, exact)
    p = p.reshape(n * oh * ow, kh, kw, groups, cin_g).transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow, -1)
    wt = weights_ohwi.astype(np.int64).reshape(groups, cout_g, kh * kw * cin_g).transpose(0, 2, 1)
    acc = np.matmul(p, wt).transpose(1, 0, 2).reshape(n, oh, ow, cout)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requantize_to_int8(acc, _per_channel(output_mult, cout), _per_channel(output_shift, cout),
                              output_offset, act_min, act_max)


def depthwise_conv2d_s8(
    input: np.ndarray,
    weights_1hwc: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    output_offset: int,
    ch_mult: int = 1,
    stride_hw=(1, 1),
    pad_top_left=(0, 0),
    dilation_hw=(1, 1),
    output_hw,
    act_min: int = -128,
    act_max: int = 127,
) -> np.ndarray:
    """int8 NHWC depthwise conv. weights [1, kh, kw, in_ch*ch_mult], output channel c*ch_mult + m reads input
    channel c. Returns int8 [N, OH, OW, in_ch*ch_mult]."""
    input = np.asarray(input)
    weights_1hwc = np.asarray(weights_1hwc)
    n, h, w, cin = input.shape
    _, kh, kw, cout = weights_1hwc.shape
    if cout != cin * ch_mult:
        raise ValueError(f"depthwise_conv2d_s8: {cout} output channels != {cin} inputs x ch_mult {ch_mult}")
    xo = input.astype(np.int64) + int(input_offset)
    p = _patches(xo, (kh, kw), stride_hw, pad_top_left, dilation_hw, output_hw)  # [N, OH, OW, KH, KW, Cin]
    oh, ow = p.shape[1], p.shape[2]
    wt = weights_1hwc.astype(np.int64).reshape(kh, kw, cin, ch_mult)
    acc = np.einsum("nhwyxc,yxcm->nhwcm", p, wt).reshape(n, oh, ow, cout)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requantize_to_int8(acc, _per_channel(output_mult, cout), _per_channel(output_shift, cout),
                              output_offset, act_min, act_max)


def _per_channel(values, channels: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.int64).reshape(-1)
    if v.size not in (1, channels):
        raise ValueError(f"expected 1 or {channels} quantization values, got {v.size}")
    return v
