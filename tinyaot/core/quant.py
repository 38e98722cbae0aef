"""Quantization parameters and the int8 quantization rules every layer shares (TFLite/CMSIS-NN scheme).

Activations: int8, asymmetric, per tensor, from calibrated ranges widened to include 0 (so zero padding and
ReLU's zero are exact). Weights: int8, symmetric (zero point 0), per output channel, in [-127, 127] (the
symmetric range keeps -128 out, as TFLite does, so |w| <= 127 bounds every accumulator). Bias: int32 with scale
s_in * s_w[c], never saturated: a channel whose bias would not fit beside its weights' share of the int32
accumulator gets a larger weight scale (`fit_channel_scales`).

Part of the numerics core: imports nothing else of tinyaot but the core's errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tinyaot.core.errors import TinyaotError

if TYPE_CHECKING:  # annotations only: the core never imports the IR at run time
    from tinyaot.ir import Tensor

INT32_MAX = (1 << 31) - 1
QMIN, QMAX = -128, 127
# A channel whose weight scale is raised to fit its bias aims its accumulator bound at int32 less 1/64: the room
# compression's bias correction (compress/pipeline.py, a few units per weight) may later add without crossing it.
RAISED_TARGET = INT32_MAX - (INT32_MAX >> 6)
# An all-zero weight channel with a nonzero bias: any weight scale is exact for its weights, so it is chosen to
# make the bias 2**30 accumulator units, i.e. the bias is stored to a relative precision of float32's (2**-24).
ZERO_CHANNEL_BIAS_UNITS = 1 << 30



@dataclass
class QuantParams:
    """Affine int quantization: real = scale * (q - zero_point). Per tensor (axis None) or per channel."""

    scale: np.ndarray  # float64; shape () per tensor, (C,) per channel
    zero_point: np.ndarray  # int64, same shape as scale
    axis: int | None = None
    bits: int = 8  # activations: 8 (int8, asymmetric) or 16 (int16, symmetric; core/quant16.py)

    @staticmethod
    def per_tensor(scale: float, zero_point: int) -> "QuantParams":
        return QuantParams(np.asarray(scale, np.float64), np.asarray(zero_point, np.int64))

    @property
    def s(self) -> float:
        """The scale of a per-tensor quantized tensor."""
        assert self.axis is None, "per-channel tensor has no single scale"
        return float(self.scale)

    @property
    def zp(self) -> int:
        assert self.axis is None, "per-channel tensor has no single zero point"
        return int(self.zero_point)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """The real values (float64) of integers `q` stored with these parameters."""
        shape = [1] * np.ndim(q)
        if self.axis is not None:
            shape[self.axis] = -1
        zp = np.asarray(self.zero_point, np.float64).reshape(shape)
        return (np.asarray(q, np.float64) - zp) * np.asarray(self.scale, np.float64).reshape(shape)


def input_magnitude(input_offset: int) -> int:
    """The most any kernel form multiplies a weight by for one int8 input: 128 + |input_offset| (>= |x + io|)."""
    return 128 + abs(int(input_offset))


def refusal_message(where: str, what: str, bound: int) -> str:
    """The one-line refusal: `where` names the node ("Conv node 'x'"), `what` the intermediate."""
    return (f"{where}: its {what} can reach {bound:,} for some int8 input, past int32's {INT32_MAX:,}; the int8 "
            "kernel computes it in int32 and tinyaot does not split the reduction, so this layer is refused rather "
            "than compiled to C that overflows (split the layer into narrower ones)")


def activation_qparams(lo: float, hi: float) -> QuantParams:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / (QMAX - QMIN)
    if scale <= 0.0 or not np.isfinite(scale):
        scale = 1.0 / 256  # an all-zero tensor: any scale represents it; keep a harmless one
    zp = int(np.clip(np.round(QMIN - lo / scale), QMIN, QMAX))
    return QuantParams.per_tensor(np.float32(scale), zp)  # float32 scales, as ONNX and TFLite store them


def quantize_values(x: np.ndarray, qp: QuantParams) -> np.ndarray:
    """Float -> int8 as ONNX QuantizeLinear does: round half to even, then saturate. Graph inputs use it, so
    a value on a tie quantizes the way onnxruntime's QuantizeLinear would."""
    q = np.rint(np.asarray(x, np.float64) / np.float64(qp.scale).astype(np.float32)) + qp.zero_point
    return np.clip(q, QMIN, QMAX).astype(np.int8)


def dequantize_values(q: np.ndarray, qp: QuantParams) -> np.ndarray:
    return (np.asarray(q, np.float32) - np.float32(qp.zero_point)) * np.float32(qp.scale)


def fit_channel_scales(w: np.ndarray, b: np.ndarray | None, axis: int, s_in: float, input_offset: int = 0,
                       qmax: int = 127) -> tuple[np.ndarray, QuantParams, np.ndarray, np.ndarray]:
    """Per-channel symmetric weights and the int32 bias at scale s_in * s_w[c], without saturating any bias.

    (int8 weights, their QuantParams along `axis`, int64 bias values, indices of the channels whose scale was
    raised). Channel c starts at its natural scale s_w = max|w_c| / qmax. Its kernel accumulator is bounded by
    A_c = |q_b| + sum|q_w| * (128 + |input_offset|) (compress/bounds.py); when A_c > 2**31 - 1 and the weights'
    share alone fits, the bias is what overflows, and s_w is raised by A_c / RAISED_TARGET (rounded up in float32)
    and both the weights and the bias are quantized again at the new scale, until the channel fits. That is what
    the TFLite converter and onnxruntime do for a bias that overflows int32 at s_in * s_w (here the weights' share
    is counted too, so a raised channel cannot then overflow its accumulator): it costs precision only in the
    channel's weights, whose contribution is tiny next to its bias (BatchNormalization with gamma near 0, for
    which the folded weights are near 0 and s_w would be tiny). A channel whose weights alone exceed the bound is
    left as it is: raising its scale would hide a layer too wide for int32, which bounds.check_graph refuses.
    An all-zero channel gets the scale that makes its bias ZERO_CHANNEL_BIAS_UNITS units (scale 1 without bias).
    Scales are float32, as ONNX and TFLite store them; everything here is computed from the final float32 scale.
    """
    w64 = np.asarray(w, np.float64)
    channels = w64.shape[axis]
    moved = np.moveaxis(w64, axis, 0).reshape(channels, -1)
    bf = np.zeros(channels) if b is None else np.broadcast_to(np.asarray(b, np.float64).reshape(-1), (channels,))
    if not (np.all(np.isfinite(moved)) and np.all(np.isfinite(bf))):
        raise TinyaotError("weights or bias are not finite (inf or NaN)")
    amax = np.abs(moved).max(axis=1) if moved.size else np.zeros(channels)
    zero = amax == 0
    s_in = np.float64(s_in)
    with np.errstate(over="ignore", under="ignore"):
        natural = np.where(zero, np.abs(bf) / (s_in * ZERO_CHANNEL_BIAS_UNITS), amax / float(qmax))
        natural = np.where(natural > 0, natural, 1.0)
        # a positive normal float32 (a bias far below any representable scale then simply rounds to 0)
        scale = np.clip(natural, np.finfo(np.float32).tiny, np.finfo(np.float32).max).astype(np.float32)
    m = input_magnitude(input_offset)
    raised = np.zeros(channels, bool)
    for _ in range(32):  # one raise is nearly always enough; each further step only absorbs rounding
        s64 = scale.astype(np.float64)
        q = np.clip(np.rint(moved / s64[:, None]), -qmax, qmax)
        qb = np.rint(bf / (s_in * s64))
        weights_share = np.abs(q).sum(axis=1) * m
        bound = np.abs(qb) + weights_share
        fix = (bound > INT32_MAX) & (weights_share <= INT32_MAX)
        if not fix.any():
            break
        raised |= fix
        up = np.nextafter((s64 * (bound / RAISED_TARGET)).astype(np.float32), np.float32(np.inf))
        scale = np.where(fix, up, scale).astype(np.float32)
    shape = [1] * w64.ndim
    shape[axis] = -1
    s64 = scale.astype(np.float64)
    qw = np.clip(np.rint(w64 / s64.reshape(shape)), -qmax, qmax).astype(np.int8)
    qb = np.rint(bf / (s_in * s64)).astype(np.int64)
    return qw, QuantParams(s64, np.zeros(channels, np.int64), axis), qb, np.flatnonzero(raised)


def weight_qmax(node) -> int:
    """The symmetric weight range of a Conv/FullyConnected node: 127, or 7 when compression marked it 4-bit, or
    fewer levels when it set them (`weight_qmax`: --clusters K < 16 on an evenly spaced grid, compress/pipeline.py
    grid_layers)."""
    return int(node.attrs.get("weight_qmax", 2 ** (int(node.attrs.get("weight_bits", 8)) - 1) - 1))


def quantize_bias(b: np.ndarray, s_in: float, s_w: np.ndarray) -> np.ndarray:
    """Real bias -> integers at scale s_in * s_w, as int64 and unclamped: a caller whose weight scales are fixed
    (a pre-quantized model's) refuses a value beyond int32 rather than store a saturated, wrong bias."""
    scale = np.float64(s_in) * np.asarray(s_w, np.float64)
    return np.rint(np.asarray(b, np.float64) / scale).astype(np.int64)


def _stored_bias(qb: np.ndarray, weights: np.ndarray, axis: int, input_offset: int, where: str) -> np.ndarray:
    """The int32 bias, or a refusal naming the channel's accumulator bound when a value does not fit int32."""
    big = np.flatnonzero(np.abs(qb) > INT32_MAX)
    if big.size:
        c = int(big[0])
        w_c = np.abs(np.take(np.asarray(weights, np.int64), c, axis=axis)).sum()
        bound = abs(int(qb[c])) + int(w_c) * input_magnitude(input_offset)
        raise TinyaotError(refusal_message(where, f"accumulator of output channel {c} (its bias alone is "
                                                  f"{abs(int(qb[c])):,} units of s_in * s_w)", bound))
    return qb.astype(np.int32)


def tflite_activation_range(scale: float, zero_point: int, lo: float, hi: float) -> tuple[int, int]:
    """The int8 clamp of a TFLite fused activation with real bounds (lo, hi) (ReLU (0, inf), ReLU6 (0, 6),
    ReLU_N1_TO_1 (-1, 1), none (-inf, inf)), as TFLite's CalculateActivationRangeQuantized computes it: each
    finite bound is zero_point + round(bound / scale) with the division in float32 and ties away from zero
    (TfLiteRound), then limited to [-128, 127]. `activation_clamp` rounds the float64 quotient half to even, which
    can differ by one where the float32 quotient lands on (or rounds across) a half."""
    def q(f: float) -> int:
        v = float(np.float32(f) / np.float32(scale))
        return int(zero_point) + (int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5)))
    qlo = QMIN if not np.isfinite(lo) else max(QMIN, q(lo))
    qhi = QMAX if not np.isfinite(hi) else min(QMAX, q(hi))
    return qlo, qhi


def activation_clamp(qp: QuantParams, activation: tuple[float, float] | None) -> tuple[int, int]:
    """int8 clamp bounds of a fused activation (lo, hi) under output parameters `qp`."""
    lo, hi = activation if activation is not None else (-np.inf, np.inf)
    qlo = QMIN if not np.isfinite(lo) else int(np.clip(qp.zp + np.rint(lo / qp.s), QMIN, QMAX))
    qhi = QMAX if not np.isfinite(hi) else int(np.clip(qp.zp + np.rint(hi / qp.s), QMIN, QMAX))
    return qlo, qhi


class LayerWeights(NamedTuple):
    weights: np.ndarray  # int8, the layer's layout
    weight_quant: QuantParams  # per output channel along `axis`
    bias: np.ndarray  # int32 [out_ch], in accumulator units s_in * s_w[c]
    bias_quant: QuantParams
    filter_offset: int  # -(weight zero point): nonzero only for a pre-quantized fully connected layer
    raised: np.ndarray  # output channels whose weight scale was raised to fit their bias (fit_channel_scales)


def layer_weights(w: Tensor, b: Tensor | None, axis: int, s_in: float, where: str, *, input_offset: int = 0,
                  allow_filter_offset: bool = False, qmax: int = 127) -> LayerWeights:
    """Int8 weights, int32 bias and their parameters of a Conv, ConvTranspose or FullyConnected whose input has
    scale `s_in` and kernel input offset `input_offset` (-zero point).

    Float weights are quantized here with their bias (`fit_channel_scales`: symmetric, per channel, a channel's
    scale raised when its bias would not fit int32 beside its weights). Integer weights a pre-quantized model
    stores (`w.quant` set) are kept bit for bit with their scales; a per-tensor scale is repeated per channel so
    every layer has the same per-channel requantization. Their zero point must be 0, except that a kernel with a
    filter offset (fully connected) takes one zero point shared by all channels. The kernels add the int32 bias to
    accumulators counted in units of s_in * s_w[c]: a stored int32 bias in those units (what QDQ makes) is kept
    bit for bit; one with another scale is re-expressed in them; a float bias is quantized to them. With given
    weight scales nothing can be raised: a bias beyond int32 is refused (`_stored_bias`), never saturated.

    `qmax` < 127 (4-bit weights, `weight_qmax`) quantizes to [-qmax, qmax]; a pre-quantized model's integer
    weights are then re-quantized from their real values (with their bias, as float weights), since their own
    scales are for 8 bits."""
    out_c = w.shape[axis]
    offset = 0
    raised = np.zeros(0, np.int64)

    def real_bias():
        if b is None:
            return None
        if b.quant is not None and np.any(np.asarray(b.quant.zero_point) != 0):
            raise TinyaotError(f"{where}: an int32 bias with a non-zero zero point is not supported")
        return b.quant.dequantize(b.data) if b.quant is not None else np.asarray(b.data, np.float64)

    if w.quant is None or (qmax != 127 and (w.quant.axis is None or w.quant.axis == axis)):
        real_w = w.data if w.quant is None else w.quant.dequantize(w.data)
        try:
            qw, wq, qb, raised = fit_channel_scales(real_w, real_bias(), axis, s_in, input_offset, qmax)
        except TinyaotError as e:
            raise TinyaotError(f"{where}: {e}") from None
        qb = _stored_bias(qb, qw, axis, input_offset, where)
    else:
        q = w.quant
        if q.axis is not None and (q.axis != axis or np.size(q.scale) != out_c):
            raise TinyaotError(f"{where}: weights are quantized along axis {q.axis} ({np.size(q.scale)} scales); "
                               f"tinyaot needs one scale per output channel ({out_c}) or one per tensor")
        scale = np.broadcast_to(np.asarray(q.scale, np.float64).reshape(-1), (out_c,)).copy()
        zp = np.broadcast_to(np.asarray(q.zero_point, np.int64).reshape(-1), (out_c,)).copy()
        if np.any(zp != 0):
            if not (allow_filter_offset and np.all(zp == zp[0])):
                raise TinyaotError(f"{where}: asymmetric weights (zero point {zp[zp != 0][0]}) are not supported "
                                   "by its int8 kernel; quantize weights symmetrically (zero point 0)")
            offset = -int(zp[0])
        qw, wq = w.data, QuantParams(scale, zp, axis)
        s_acc = np.float64(s_in) * wq.scale
        if b is None:
            qb = np.zeros(out_c, np.int32)
        elif b.quant is not None and b.dtype == "int32" and np.allclose(
                np.broadcast_to(np.asarray(b.quant.scale, np.float64).reshape(-1), (out_c,)), s_acc, rtol=1e-6,
                atol=0.0) and not np.any(np.asarray(b.quant.zero_point) != 0):
            qb = b.data.astype(np.int32)  # bit for bit: already in accumulator units (to float32 rounding)
        else:
            qb = _stored_bias(quantize_bias(real_bias(), s_in, wq.scale), np.asarray(qw, np.int64) + offset, axis,
                              input_offset, where)
    bias_q = QuantParams(np.float64(s_in) * wq.scale, np.zeros(out_c, np.int64), 0)
    return LayerWeights(qw, wq, qb, bias_q, offset, raised)
