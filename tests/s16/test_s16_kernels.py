"""The 16x8 kernels (templates/kernels/*_s16*.c) compiled for the host == their numpy references (tinyaot/ops/*_s16.py)
bit for bit, on random layers and at the extremes: inputs of all -32768 / all 32767 / alternating, weights of
+-127, biases near the 2**47 accumulator bound, odd channel counts, padding on every side, strides and dilation,
activation clamps, and multipliers at both ends (the reduced multiplier's 0x7FFF cap, right shifts up to 46)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from spatial_models import host_kernels
from tinyaot.core import fixedpoint as fp
from tinyaot.core.quant16 import (ACC64_LIMIT, layer_weights16, reduced_multiplier, reduced_multiplier_array,
                                  requantize_s64)
from tinyaot.ops.common import spatial_out
from tinyaot.ops.add_s16 import add_params16, elementwise_add_s16
from tinyaot.ops.avgpool_s16 import avgpool_s16
from tinyaot.ops.conv_s16 import conv2d_s16, depthwise_conv2d_s16
from tinyaot.ops.fully_connected_s16 import fully_connected_s16
from tinyaot.ops.maxpool_s16 import maxpool_s16
from tinyaot.ops.requantize import requantize_values
from tinyaot.ops.softmax import softmax_s8

P = ctypes.c_void_p
I32 = ctypes.c_int32


def _lib():
    lib = host_kernels("tinyaot_convolve_s16.c", "tinyaot_depthwise_conv_s16.c", "tinyaot_fully_connected_s16.c",
                       "tinyaot_avgpool_s16.c", "tinyaot_elementwise_add_s16.c", "tinyaot_requantize_s16.c",
                       "tinyaot_softmax_s16_s8.c", "tinyaot_max_pool_s16.c")
    for name, args in (("tinyaot_convolve_s16", [P] * 7), ("tinyaot_depthwise_conv_s16", [P] * 7),
                       ("tinyaot_fully_connected_s16", [P] * 7), ("tinyaot_avgpool_s16", [P] * 3),
                       ("tinyaot_elementwise_add_s16", [P, P, P, I32, P]),
                       ("tinyaot_requantize_s8_s16", [P] + [I32] * 5 + [P]),
                       ("tinyaot_requantize_s16_s8", [P] + [I32] * 5 + [P]),
                       ("tinyaot_softmax_s16_s8", [P] + [I32] * 5 + [P])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, args
    return lib


@pytest.fixture(scope="module")
def lib():
    return _lib()


def _a(x, dt):
    return np.ascontiguousarray(np.asarray(x).astype(dt))


def _inputs(rng, shape):
    """Random int16, then the extremes: all -32768, all 32767, alternating."""
    size = int(np.prod(shape))
    alt = np.where(np.arange(size) % 2 == 0, -32768, 32767).reshape(shape)
    return [rng.integers(-32768, 32768, shape), np.full(shape, -32768), np.full(shape, 32767), alt]


def _requant(rng, n, extreme=False):
    # a left shift of 14 (total shift 1), the 0x7FFF cap, a right shift of 46, a left shift (total shift -5)
    edge = [2.0 ** 13, 2.0 ** 19, 1.99999 * 2.0 ** -1, 2.0 ** -31, 0.999999]
    reals = rng.uniform(1e-6, 4.0, n) if not extreme else np.array((edge * n)[:n])
    return reduced_multiplier_array(reals)


def test_requantize_s64_matches_two_shift_form():
    """The single rounding equals CMSIS-NN's two-shift form ((acc * m) >> (14 - shift)) + 1 >> 1."""
    rng = np.random.default_rng(0)
    acc = np.concatenate([rng.integers(-(1 << 46), 1 << 46, 5000), [-(1 << 47) + 1, (1 << 47) - 1, -1, 0, 1]])
    for real in (1e-9, 3e-4, 0.37, 0.5, 0.9999999, 1.0, 700.0):
        m, t = reduced_multiplier(real)
        two = (((acc * m) >> (t - 1)) + 1) >> 1
        np.testing.assert_array_equal(requantize_s64(acc, m, t), two)
    assert reduced_multiplier(0.99999999)[0] == 0x7FFF  # the cap on a multiplier that rounds up to 2**15
    for real in (2.0 ** 14, 7.2e8, 2.0 ** 45):  # left shifts: the exact product, saturated like the int16 clamp
        m, t = reduced_multiplier(real)
        assert t <= 0
        exact = np.array([max(-32768, min(32767, int(a) * m * 2 ** -t)) for a in acc])  # Python ints: no overflow
        np.testing.assert_array_equal(np.clip(requantize_s64(acc, m, t), -32768, 32767), exact)


@pytest.mark.parametrize("case", range(6))
def test_conv_s16(lib, case):
    rng = np.random.default_rng(100 + case)
    groups = [1, 1, 3, 1, 1, 2][case]
    cg = int(rng.integers(1, 5))
    cin, cout = cg * groups, groups * int(rng.integers(1, 4)) + (case % 2) * groups
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    h, w = int(rng.integers(kh, 7)), int(rng.integers(kw, 7))
    s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    d = (1, 1) if case < 4 else (2, 1)
    pads = [int(v) for v in rng.integers(0, 3, 4)] if case else [2, 2, 2, 2]
    oh, ow = spatial_out((h, w), (kh, kw), s, pads, d)
    weights = rng.integers(-127, 128, (cout, kh, kw, cg))
    if case == 1:
        weights[:] = 127
    per = np.abs(weights).reshape(cout, -1).sum(axis=1) * 32768
    # case 3: biases at the edge of the int64 requantization's range, |bias| + sum|w| * 32768 = 2**47 - 1
    bias = rng.integers(-1, 2, cout) * (ACC64_LIMIT - 1 - per) if case == 3 else rng.integers(-(1 << 30), 1 << 30,
                                                                                                cout)
    mult, shift = _requant(rng, cout, extreme=case == 3)
    act = (-32768, 32767) if case != 2 else (0, 20000)
    geom = _a([1, h, w, cin, oh, ow, cout, kh, kw, s[0], s[1], pads[0], pads[1], d[0], d[1], act[0], act[1], cg],
              np.int32)
    for x in _inputs(rng, (1, h, w, cin)):
        want = conv2d_s16(x, weights, bias, mult, shift, stride_hw=s, pad_top_left=pads[:2], dilation_hw=d,
                          output_hw=(oh, ow), act_min=act[0], act_max=act[1], groups=groups)
        out = np.full((1, oh, ow, cout), 7, np.int16)
        xs, ws, bs = _a(x, np.int16), _a(weights, np.int8), _a(bias, np.int64)
        ms, ss = _a(mult, np.int32), _a(shift, np.int32)
        assert lib.tinyaot_convolve_s16(xs.ctypes.data, ws.ctypes.data, bs.ctypes.data, ms.ctypes.data,
                                        ss.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", range(4))
def test_depthwise_s16(lib, case):
    rng = np.random.default_rng(200 + case)
    cin, ch_mult = int(rng.integers(1, 6)) | 1, [1, 2, 1, 3][case]
    cout = cin * ch_mult
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(2, 4))
    h, w = int(rng.integers(kh, 7)), int(rng.integers(kw, 7))
    s, d = (int(rng.integers(1, 3)), 1), ((1, 1) if case != 2 else (1, 2))
    pads = [1, 1, 1, 1] if case == 0 else [int(v) for v in rng.integers(0, 3, 4)]
    oh, ow = spatial_out((h, w), (kh, kw), s, pads, d)
    weights = rng.integers(-127, 128, (1, kh, kw, cout))
    if case == 1:
        weights[:] = -127
    bias = rng.integers(-(1 << 40), 1 << 40, cout)
    mult, shift = _requant(rng, cout, extreme=case == 3)
    geom = _a([1, h, w, cin, oh, ow, cout, kh, kw, s[0], s[1], pads[0], pads[1], d[0], d[1], -32768, 32767, ch_mult],
              np.int32)
    for x in _inputs(rng, (1, h, w, cin)):
        want = depthwise_conv2d_s16(x, weights, bias, mult, shift, ch_mult=ch_mult, stride_hw=s,
                                    pad_top_left=pads[:2], dilation_hw=d, output_hw=(oh, ow))
        out = np.full((1, oh, ow, cout), 7, np.int16)
        xs, ws, bs = _a(x, np.int16), _a(weights, np.int8), _a(bias, np.int64)
        ms, ss = _a(mult, np.int32), _a(shift, np.int32)
        assert lib.tinyaot_depthwise_conv_s16(xs.ctypes.data, ws.ctypes.data, bs.ctypes.data, ms.ctypes.data,
                                              ss.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
        np.testing.assert_array_equal(out, want)


def test_fully_connected_s16(lib):
    rng = np.random.default_rng(3)
    for k in range(7):
        batches, depth, out_ch = int(rng.integers(1, 4)), int(rng.integers(1, 70)) | 1, int(rng.integers(1, 12))
        if k == 6:  # longer than one int32 run (516 products): the kernel adds runs into its int64 accumulator
            depth = 1201
        weights = rng.integers(-127, 128, (out_ch, depth)) if k not in (0, 6) else np.full((out_ch, depth), 127)
        bias = rng.integers(-(1 << 44), 1 << 44, out_ch)
        mult, shift = _requant(rng, out_ch, extreme=k == 5)
        act = (-32768, 32767) if k % 2 else (0, 32767)
        geom = _a([batches, depth, out_ch, *act], np.int32)
        for x in _inputs(rng, (batches, depth)):
            want = fully_connected_s16(x, weights, bias, mult, shift, act_min=act[0], act_max=act[1])
            out = np.zeros((batches, out_ch), np.int16)
            xs, ws, bs = _a(x, np.int16), _a(weights, np.int8), _a(bias, np.int64)
            ms, ss = _a(mult, np.int32), _a(shift, np.int32)
            assert lib.tinyaot_fully_connected_s16(xs.ctypes.data, ws.ctypes.data, bs.ctypes.data, ms.ctypes.data,
                                                   ss.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)


def test_avgpool_s16(lib):
    rng = np.random.default_rng(4)
    for k in range(8):
        c = int(rng.integers(1, 6)) | 1
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(kh, 8)), int(rng.integers(kw, 8))
        s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        requant = k % 2
        pads = [0, 0, 0, 0] if requant else [int(v) for v in rng.integers(0, min(kh, kw), 4)]
        oh, ow = spatial_out((h, w), (kh, kw), s, pads)
        mult, shift = fp.quantize_multiplier(float(rng.uniform(0.01, 3.0)) / (kh * kw)) if requant else (0, 0)
        geom = _a([1, h, w, c, oh, ow, kh, kw, s[0], s[1], pads[0], pads[1], requant, mult, shift, -32768, 32767],
                  np.int32)
        for x in _inputs(rng, (1, h, w, c)):
            want = avgpool_s16(x, kernel_hw=(kh, kw), stride_hw=s, pad_top_left=pads[:2], output_hw=(oh, ow),
                               requant=bool(requant), mult=mult, shift=shift)
            out = np.zeros((1, oh, ow, c), np.int16)
            xs = _a(x, np.int16)
            assert lib.tinyaot_avgpool_s16(xs.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)


def test_add_s16(lib):
    rng = np.random.default_rng(5)
    for k in range(6):
        n = int(rng.integers(1, 40))
        p = add_params16(*rng.uniform(1e-5, 1e-2, 3))
        act = (-32768, 32767) if k % 2 else (0, 32767)
        keys = ("input1_mult", "input1_shift", "input2_mult", "input2_shift", "left_shift", "output_mult",
                "output_shift")
        arr = _a([p[key] for key in keys] + list(act), np.int32)
        xs = _inputs(rng, (n,))
        for a, b in zip(xs, xs[::-1]):
            want = elementwise_add_s16(a, b, **p, act_min=act[0], act_max=act[1])
            out = np.zeros(n, np.int16)
            a16, b16 = _a(a, np.int16), _a(b, np.int16)
            assert lib.tinyaot_elementwise_add_s16(a16.ctypes.data, b16.ctypes.data, arr.ctypes.data, n,
                                                   out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)


def test_requantize_s8_s16(lib):
    rng = np.random.default_rng(6)
    x8 = _a(np.arange(-128, 128), np.int8)
    x16 = _a(np.concatenate([_inputs(rng, (64,))[0], [-32768, 32767, 0, -1, 1]]), np.int16)
    for zp in (-128, -3, 0, 127):
        for real in (1.0, 37.5, 256.0 * 0.9, 255.99):
            m, s = fp.quantize_multiplier(real)
            want = requantize_values(x8, input_offset=-zp, mult=m, shift=s, output_offset=0, out_bits=16)
            out = np.zeros(x8.size, np.int16)
            assert lib.tinyaot_requantize_s8_s16(x8.ctypes.data, x8.size, -zp, m, s, 0, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)
            m, s = fp.quantize_multiplier(1.0 / real)
            want = requantize_values(x16, input_offset=0, mult=m, shift=s, output_offset=zp, out_bits=8)
            out8 = np.zeros(x16.size, np.int8)
            assert lib.tinyaot_requantize_s16_s8(x16.ctypes.data, x16.size, 0, m, s, zp, out8.ctypes.data) == 0
            np.testing.assert_array_equal(out8, want)


def test_softmax_s16_s8(lib):
    rng = np.random.default_rng(7)
    for k in range(10):
        rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 40))
        q = fp.softmax_params(float(rng.uniform(1e-5, 2e-3)) if k else 1e-9)
        for x in _inputs(rng, (rows, n)):
            want = softmax_s8(x, input_mult=q[0], input_left_shift=q[1], diff_min=q[2])
            out = np.zeros((rows, n), np.int8)
            xs = _a(x, np.int16)
            assert lib.tinyaot_softmax_s16_s8(xs.ctypes.data, rows, n, *q, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("cin,kh", [(300, 2), (600, 1)])
def test_conv_s16_long_windows(lib, cin, kh):
    """Windows longer than one int32 run of products (516): flushed between taps (300 x 2) and inside a tap
    (600), at the largest magnitudes (weights 127 / -127, inputs -32768 / 32767)."""
    rng = np.random.default_rng(cin)
    cout, h, w = 5, kh + 1, 2
    weights = np.where(rng.random((cout, kh, 1, cin)) < 0.5, -127, 127)
    bias = rng.integers(-(1 << 40), 1 << 40, cout)
    mult, shift = reduced_multiplier_array([2.0 ** -20] * cout)
    oh, ow = spatial_out((h, w), (kh, 1), (1, 1), [0, 0, 0, 0])
    geom = _a([1, h, w, cin, oh, ow, cout, kh, 1, 1, 1, 0, 0, 1, 1, -32768, 32767, cin], np.int32)
    for x in _inputs(rng, (1, h, w, cin)) + [np.sign(weights[0, 0, 0])[None, None, None, :] * 32767
                                             * np.ones((1, h, w, 1))]:
        want = conv2d_s16(x, weights, bias, mult, shift, output_hw=(oh, ow))
        out = np.zeros((1, oh, ow, cout), np.int16)
        xs, ws, bs = _a(x, np.int16), _a(weights, np.int8), _a(bias, np.int64)
        ms, ss = _a(mult, np.int32), _a(shift, np.int32)
        assert lib.tinyaot_convolve_s16(xs.ctypes.data, ws.ctypes.data, bs.ctypes.data, ms.ctypes.data,
                                        ss.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
        np.testing.assert_array_equal(out, want)


def test_maxpool_s16(lib):
    fn = lib.tinyaot_max_pool_s16
    fn.restype, fn.argtypes = ctypes.c_int, [P] * 3
    rng = np.random.default_rng(8)
    for k in range(6):
        c = int(rng.integers(1, 6)) | 1
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(kh, 8)), int(rng.integers(kw, 8))
        s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pads = [int(v) for v in rng.integers(0, min(kh, kw), 4)]
        act = (-32768, 32767) if k % 2 else (0, 32767)
        oh, ow = spatial_out((h, w), (kh, kw), s, pads)
        geom = _a([1, h, w, c, oh, ow, kh, kw, s[0], s[1], pads[0], pads[1], *act], np.int32)
        for x in _inputs(rng, (1, h, w, c)):
            want = maxpool_s16(x, kernel_hw=(kh, kw), stride_hw=s, pad_top_left=pads[:2], output_hw=(oh, ow),
                               act_min=act[0], act_max=act[1])
            out = np.zeros((1, oh, ow, c), np.int16)
            xs = _a(x, np.int16)
            assert fn(xs.ctypes.data, geom.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)


def test_bias_past_the_accumulator_raises_the_weight_scale():
    """A channel of near-zero weights with a normal bias (BatchNormalization with gamma ~ 0; vww_mobilenetv1_025)
    would need a bias of ~1e34 units at its natural scale: its weight scale is raised until the bias fits 2**46;
    normal channels keep max|w| / 127, and an all-zero channel stores its bias as 2**40 units."""
    w = np.array([[1e-30, -1e-30, 0.0], [0.5, -0.2, 0.1], [0.0, 0.0, 0.0]])
    qw, wq, qb, _ = layer_weights16(w, np.array([1.0, 0.3, -2.0]), 0, 1e-4, "test")
    bound = np.abs(qb) + np.abs(qw.astype(np.int64)).sum(axis=1) * 32768
    assert np.all(bound <= 1 << 46)
    assert np.isclose(wq.scale[1], np.float32(0.5 / 127))
    assert abs(int(qb[2])) == 1 << 40 and abs(qb[0] * 1e-4 * wq.scale[0] - 1.0) < 1e-6
