"""The Helium convolution kernels (tinyaot_convolve_s8_mve.c: any window via an int8 im2col column;
tinyaot_convolve_1x1_s8_mve.c: 1x1 in place) == the numpy reference (ops/conv.py conv2d_s8, offsets unfolded),
under QEMU on mps3-an547 (MVE path) and on the host (portable path, UBSan), for small layers at the extremes:
channel counts giving every tail of 1..15 values and 1..3 leftover output channels, odd pixel counts (a single
last pixel after the pairs), in_c >= 8 (the direct path: windows read in place, pairs of inner pixels, border
pixels one at a time; kernel rows padded to whole chunks when in_c is not a multiple of 16), input zero points
-128 and 127 (offsets 128 and -127), output offsets -128 and 127, all-127 / all--128 inputs against opposite-sign
weights, padding on every side, strides 1 and 2, dilation, positive shifts, a clamping activation, one and two
columns of scratch. Every case also checks that no byte after the output was written (the predicated tail
stores), and a few layers run with the output over the input at the memory planner's offset (ops/conv.py
conv_inplace_offset)."""
from __future__ import annotations

import numpy as np
import pytest

from tinyaot.ops.conv import conv_inplace_offset
from tinyaot.ops.mve import block_filter

from mve.mve_harness import HOST_CC, conv_layer, needs_arm, run_arm_cases, run_host_cases

FILES = ["tinyaot_convolve_s8_mve.c", "tinyaot_convolve_1x1_s8_mve.c", "tinyaot_mve_gemm_s8.c"]


def _cases() -> list:
    rng = np.random.default_rng(55)
    cases = []
    # 1x1: input channel counts covering tails 1..15 (and none), output channels 1..9, strides 1 and 2
    for i, cin in enumerate([1, 2, 3, 5, 7, 9, 11, 13, 15, 16, 17, 28, 33, 47, 64]):
        cases.append(conv_layer(rng, h=3, w=3 + i % 2, cin=cin, cout=1 + i % 9, kh=1, kw=1,
                                stride=(1 + i % 2, 1 + (i // 2) % 2), zp=[-128, 127, None][i % 3],
                                out_zp=[127, -128, None][i % 3]))
    # windows with padding on every side (and asymmetric), strides, dilation, few and many channels
    geos = [dict(kh=3, kw=3, pads=(1, 1, 1, 1)), dict(kh=3, kw=3, pads=(1, 1, 1, 1), stride=(2, 2)),
            dict(kh=3, kw=3, pads=(0, 2, 2, 0)), dict(kh=2, kw=3, pads=(1, 0, 0, 2), stride=(1, 2)),
            dict(kh=3, kw=2, pads=(2, 1, 1, 1), dil=(2, 2)), dict(kh=5, kw=2, pads=(2, 0, 2, 1), stride=(2, 1)),
            dict(kh=1, kw=1, pads=(1, 0, 0, 1)), dict(kh=3, kw=1, pads=(0, 0, 0, 0)),
            dict(kh=3, kw=3, pads=(2, 1, 2, 1), dil=(2, 1), stride=(1, 2))]
    for i, g in enumerate(geos):
        for cin, cout in [(3, 8), (1, 5), (16, 7), (32, 6)][: 4 if i < 2 else 3]:
            cases.append(conv_layer(rng, h=5, w=4 + i % 3, cin=cin, cout=cout, zp=[-128, 127, None][(i + cin) % 3],
                                    out_zp=[None, 127, -128][(i + cin) % 3], kernel="tinyaot_convolve_s8_mve", **g))
    # in_c >= 8 not a multiple of 16: windows read in place with kernel rows padded to whole chunks (a partial
    # chunk at each row's end, chunks joining padded and input taps at the borders); kw = 1 on 8..15 channels
    # (a kernel row under 16 values) and a dilated width take the column path
    for i, (cin, g) in enumerate([(40, dict(kh=3, kw=3, pads=(1, 1, 1, 1))), (9, dict(kh=3, kw=3, pads=(1, 1, 1, 1))),
                                  (12, dict(kh=3, kw=3, pads=(1, 1, 1, 1), stride=(2, 2))),
                                  (24, dict(kh=3, kw=2, pads=(0, 1, 2, 1))), (8, dict(kh=2, kw=2, pads=(1, 1, 1, 1))),
                                  (20, dict(kh=5, kw=5, pads=(2, 3, 2, 3))), (10, dict(kh=3, kw=1, pads=(1, 0, 1, 0))),
                                  (24, dict(kh=3, kw=3, pads=(1, 2, 1, 2), dil=(1, 2))),
                                  (8, dict(kh=3, kw=3, pads=(0, 0, 0, 0)))]):
        cases.append(conv_layer(rng, h=5, w=5 + i % 3, cin=cin, cout=[5, 8, 3, 4][i % 4], zp=[-128, 127, None][i % 3],
                                out_zp=[None, -128, 127][i % 3], kernel="tinyaot_convolve_s8_mve", **g))
    # the kws first layer's shape class: 10x4 window on one channel, stride 2, pads 4/1 and 5/1
    cases.append(conv_layer(rng, h=12, w=6, cin=1, cout=6, kh=10, kw=4, stride=(2, 2), pads=(4, 1, 5, 1)))
    # extremes: saturated inputs against opposite-sign weights, both zero points, a clamp, positive shifts, batch 2
    for extreme, zp in [("max", -128), ("min", 127), ("max", 127), ("min", -128)]:
        cases.append(conv_layer(rng, h=3, w=3, cin=19, cout=6, kh=3, kw=3, pads=(1, 1, 1, 1), zp=zp, out_zp=-128,
                                extreme=extreme, positive_shift=True))
        cases.append(conv_layer(rng, h=4, w=5, cin=16, cout=9, kh=3, kw=3, pads=(1, 1, 1, 1), zp=zp, out_zp=127,
                                extreme=extreme, n=2))
        cases.append(conv_layer(rng, h=3, w=5, cin=20, cout=5, kh=1, kw=1, zp=zp, out_zp=127, extreme=extreme,
                                act=(-100, 90), n=2, positive_shift=True))
    # output over input at the planner's offset (conv_inplace_offset): the kernels' raster order, two pixels at a time
    for g in [dict(kh=1, kw=1, cin=16, cout=8), dict(kh=1, kw=1, cin=24, cout=40, stride=(2, 2)),
              dict(kh=3, kw=3, cin=16, cout=16, pads=(1, 1, 1, 1)), dict(kh=3, kw=3, cin=3, cout=12, pads=(1, 1, 1, 1)),
              dict(kh=3, kw=3, cin=32, cout=8, pads=(0, 0, 1, 1), stride=(2, 2))]:
        c = conv_layer(rng, h=6, w=5, **g)
        c.geo["inplace"] = conv_inplace_offset(c.x.shape, c.expected.shape, c.geo["stride"],
                                               (*c.geo["pad"], 0, 0))
        cases.append(c)
    return cases


CASES = _cases()


def test_cases_reach_the_extremes():
    # the cases exercise what they claim: saturated outputs at both ends, odd pixel counts, each K tail
    outs = np.concatenate([c.expected.ravel() for c in CASES])
    assert (outs == -128).any() and (outs == 127).any() and (outs == -100).any() and (outs == 90).any()
    tails = {int(np.prod(c.w.shape[1:])) % 16 for c in CASES}
    assert tails == set(range(16)), sorted(tails)
    assert {c.w.shape[0] % 4 for c in CASES} == {0, 1, 2, 3}
    assert any(np.prod(c.expected.shape[:3]) % 2 for c in CASES)


def test_block_filter_is_the_rows_plus_zero_padding():
    rng = np.random.default_rng(1)
    for out_c, k in [(1, 1), (4, 16), (5, 17), (7, 40), (8, 3)]:
        rows = rng.integers(-128, 128, (out_c, k)).astype(np.int8)
        b = block_filter(rows)
        k16, padded = -(-k // 16) * 16, -(-out_c // 4) * 4
        assert b.size == padded * k16 and b.dtype == np.int8
        assert sorted(b.tolist()) == sorted(rows.ravel().tolist() + [0] * (padded * k16 - out_c * k))
        # value i of row o: block o // 4, chunk i // 16, row o % 4 within the chunk
        for o, i in [(0, 0), (out_c - 1, k - 1), (out_c // 2, k // 2)]:
            assert b[(o // 4) * 4 * k16 + (i // 16) * 64 + (o % 4) * 16 + i % 16] == rows[o, i]


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
def test_portable_path_matches_reference_on_host(tmp_path):
    rc, out = run_host_cases(tmp_path, CASES, FILES)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]


@needs_arm
@pytest.mark.parametrize("opt", ["-O2", "-O0"])  # -O0: the C loops that stand in for the inline assembly
def test_helium_path_matches_reference_under_qemu(tmp_path, opt):
    rc, out = run_arm_cases(tmp_path, CASES, FILES, opt)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]
