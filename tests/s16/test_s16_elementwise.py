"""The 16x8 elementwise kernels (Mul, Concat, HardSigmoid, HardSwish; tinyaot/ops/mul_s16.py, concat_s16.py,
hard_gate_s16.py) compiled for the host == their numpy references bit for bit at the extremes (inputs -32768 /
32767 / alternating, broadcasts, multipliers at both ends), and the activations' numpy references within 1 LSB of
the float function followed by QuantizeLinear's rounding (float32, half to even: what onnxruntime's int16 QDQ
computes) for all 65,536 int16 inputs, over input ranges from tiny to wide."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from spatial_models import host_kernels
from tinyaot.core.quant16 import activation_qparams16, exact_multiplier, requantize_exact
from tinyaot.ops.broadcast import broadcast_geometry
from tinyaot.ops.concat_s16 import concat_s16
from tinyaot.ops.hard_gate_s16 import GATE_BITS, SWISH_DROP, hard_params, hard_sigmoid_s16, hard_swish_s16
from tinyaot.ops.mul_s16 import elementwise_mul_s16

P = ctypes.c_void_p
I32 = ctypes.c_int32
ALL16 = np.arange(-32768, 32768, dtype=np.int64)


@pytest.fixture(scope="module")
def lib():
    lib = host_kernels("tinyaot_elementwise_mul_s16.c", "tinyaot_concat_s16.c", "tinyaot_hard_activation_s16.c")
    for name, args in (("tinyaot_elementwise_mul_s16", [P] * 4), ("tinyaot_concat_s16", [P] + [I32] * 7 + [P]),
                       ("tinyaot_hard_sigmoid_s16", [P, I32, P, P]), ("tinyaot_hard_swish_s16", [P, I32, P, P])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, args
    return lib


def _a(x, dt):
    return np.ascontiguousarray(np.asarray(x).astype(dt))


def _extremes(rng, shape):
    size = int(np.prod(shape))
    alt = np.where(np.arange(size) % 2 == 0, -32768, 32767).reshape(shape)
    return [rng.integers(-32768, 32768, shape), np.full(shape, -32768), np.full(shape, 32767), alt]


def test_exact_multiplier_rounds_once():
    """requantize_exact == round-half-up of v * real computed with Python's exact integers."""
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.integers(-(1 << 31), (1 << 31) + 1, 3000), [-(1 << 31), 1 << 31, -1, 0, 1]])
    for real in (1e-12, 3.1e-5, 0.5, 0.7, 1.0, 17.3, 2.0 ** 29):
        m, t = exact_multiplier(real)
        assert 1 <= t <= 62 and 0 <= m < 1 << 31
        want = np.array([(int(x) * m + (1 << (t - 1))) >> t for x in v])
        np.testing.assert_array_equal(requantize_exact(v, m, t), want)
    assert exact_multiplier(1e-30) == (0, 1)


@pytest.mark.parametrize("shapes", [((2, 3, 5), (2, 3, 5)), ((1, 4, 4, 6), (1, 1, 1, 6)), ((3, 1, 7), (1, 5, 1)),
                                    ((5,), (1,))])
def test_mul_s16(lib, shapes):
    rng = np.random.default_rng(len(str(shapes)))
    dims, s1, s2 = broadcast_geometry(*shapes)
    for k, real in enumerate((3.05e-5, 1.0 / 32767, 0.9, 2.0 ** -40)):
        mult, shift = exact_multiplier(real)
        act = (-32768, 32767) if k % 2 == 0 else (0, 32767)
        geom = _a([*dims, *s1, *s2, mult, shift, *act], np.int32)
        for a, b in zip(_extremes(rng, shapes[0]), _extremes(rng, shapes[1])[::-1]):
            want = elementwise_mul_s16(a, b, mult=mult, shift=shift, act_min=act[0], act_max=act[1])
            out = np.full(want.shape, 7, np.int16)
            a16, b16 = _a(a, np.int16), _a(b, np.int16)
            assert lib.tinyaot_elementwise_mul_s16(a16.ctypes.data, b16.ctypes.data, geom.ctypes.data,
                                                   out.ctypes.data) == 0
            np.testing.assert_array_equal(out, want)
    # (-32768)^2 = 2^30 at a scale that keeps it: the int32 product and the rescale at their largest
    m, t = exact_multiplier(32767.0 / 2 ** 30)
    assert elementwise_mul_s16(np.int16(-32768), np.int16(-32768), mult=m, shift=t) == 32767


def test_concat_s16(lib):
    rng = np.random.default_rng(3)
    shapes = [(2, 3, 4), (2, 3, 1), (2, 3, 5)]
    parts = [(0, 0, 1), (1, *exact_multiplier(0.37)), (1, *exact_multiplier(3.2))]  # copy, shrink, saturating grow
    for trial in range(4):
        xs = [_extremes(rng, s)[trial] for s in shapes]
        want = concat_s16(xs, parts, axis=2)
        out = np.full(want.shape, 7, np.int16)
        pos = 0
        for x, s, (req, m, t) in zip(xs, shapes, parts):
            x16 = _a(x, np.int16)
            assert lib.tinyaot_concat_s16(x16.ctypes.data, 6, s[2], 10, pos, req, m, t, out.ctypes.data) == 0
            pos += s[2]
        np.testing.assert_array_equal(out, want)
        assert np.array_equal(want[..., :4], xs[0])


def _qdq(y32, s_out):
    """QuantizeLinear to int16 in float32, half to even (onnxruntime)."""
    with np.errstate(over="ignore"):
        return np.clip(np.rint(y32 / np.float32(s_out)), -32768, 32767).astype(np.int64)


# (input range, output range) pairs: tiny, typical, mostly negative, wide
RANGES = [((-0.01, 0.02), None), ((-4.0, 6.0), None), ((-60.0, 1.0), None), ((-900.0, 1500.0), None)]


@pytest.mark.parametrize("swish", [False, True])
def test_hard_activations_all_inputs(lib, swish):
    alpha, beta = (1.0 / 6.0, 0.5) if swish else (0.2, 0.5)
    for (lo, hi), _ in RANGES:
        qi = activation_qparams16(lo, hi)
        x32 = ALL16.astype(np.float32) * np.float32(qi.s)  # DequantizeLinear in float32
        gate = np.clip(x32 * np.float32(alpha) + np.float32(beta), np.float32(0), np.float32(1))
        y32 = (x32 * gate) if swish else gate
        qo = activation_qparams16(float(y32.min()), float(y32.max()))
        a_coef, b_coef = hard_params(alpha, beta, qi.s, "test")
        real = qi.s / (qo.s * 2.0 ** SWISH_DROP) if swish else 1.0 / (qo.s * 2.0 ** GATE_BITS)
        mult, shift = exact_multiplier(real)
        fn = hard_swish_s16 if swish else hard_sigmoid_s16
        ours = fn(ALL16, a_coef=a_coef, b_coef=b_coef, mult=mult, shift=shift).astype(np.int64)
        d = np.abs(ours - _qdq(y32, qo.s))
        assert d.max() <= 1, ((lo, hi), int(d.max()))
        # against the exact function (float64): only the final rounding, to within 1e-3 of an LSB (onnxruntime's
        # float32 is what differs at near-ties above)
        x64 = ALL16 * qi.s
        g64 = np.clip(x64 * alpha + beta, 0, 1)
        exact = np.clip((x64 * g64 if swish else g64) / qo.s, -32768, 32767)
        assert np.abs(ours - exact).max() < 0.5 + 1e-3, ((lo, hi), float(np.abs(ours - exact).max()))
        for act in ((-32768, 32767), (0, 20000)):
            p = _a([a_coef, b_coef, mult, shift, *act], np.int64)
            x16 = _a(ALL16, np.int16)
            out = np.zeros(ALL16.size, np.int16)
            kernel = lib.tinyaot_hard_swish_s16 if swish else lib.tinyaot_hard_sigmoid_s16
            assert kernel(x16.ctypes.data, ALL16.size, p.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, fn(ALL16, a_coef=a_coef, b_coef=b_coef, mult=mult, shift=shift,
                                                  act_min=act[0], act_max=act[1]))
    # the gate's extremes: alpha * s near 1 (|q * A| near 2^61) and beta far past the clip (B clipped to 2^62)
    for alpha, beta in ((0.999, 0.5), (-0.999, 1e30), (0.5, -1e30)):
        a_coef, b_coef = hard_params(alpha, beta, 1.0, "test")
        p = _a([a_coef, b_coef, *exact_multiplier(1.0 / 2 ** 16), -32768, 32767], np.int64)
        out = np.zeros(ALL16.size, np.int16)
        x16 = _a(ALL16, np.int16)
        assert lib.tinyaot_hard_sigmoid_s16(x16.ctypes.data, ALL16.size, p.ctypes.data, out.ctypes.data) == 0
        np.testing.assert_array_equal(out, hard_sigmoid_s16(ALL16, a_coef=a_coef, b_coef=b_coef, mult=p[2],
                                                            shift=p[3]))
