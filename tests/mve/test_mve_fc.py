"""The Helium fully connected kernel (tinyaot_fully_connected_s8_mve.c) == the numpy reference
(ops/fully_connected.py, offset unfolded) under QEMU on mps3-an547 and on the host (portable path, UBSan): depths
giving every tail of 0..15 values, output counts with 1..3 leftover channels, 1..3 batch rows (pairs and a single
last row), input zero points -128/127, output offsets -128/127, saturated inputs, per-tensor and per-channel
requantization, a clamping activation; no byte after the output written."""
from __future__ import annotations

import numpy as np
import pytest

from mve.mve_harness import HOST_CC, fc_layer, needs_arm, nibble_layer, run_arm_cases, run_host_cases

FILES = ["tinyaot_fully_connected_s8_mve.c", "tinyaot_mve_gemm_s8.c", "tinyaot_fully_connected_s8_nibble_mve.c"]


def _cases() -> list:
    rng = np.random.default_rng(56)
    cases = []
    for i, depth in enumerate(range(1, 17)):
        cases.append(fc_layer(rng, batches=1 + i % 3, depth=depth + 16 * (i % 3), out=1 + i % 9,
                              zp=[-128, 127, None][i % 3], out_zp=[127, -128, None][i % 3],
                              per_channel=bool(i % 4)))
    cases.append(fc_layer(rng, batches=1, depth=8, out=128))      # the AD model's 8 -> 128 shape class
    cases.append(fc_layer(rng, batches=2, depth=640, out=5))
    for extreme, zp in [("max", -128), ("min", 127), ("max", 127), ("min", -128)]:
        cases.append(fc_layer(rng, batches=3, depth=37, out=7, zp=zp, out_zp=-128, extreme=extreme,
                              act=(-100, 90)))
    # 1..3 output channels (vww's 256 -> 2 layer: the variant stays offered where fold is not) at the extremes:
    # a single padded block, its zero rows' results never stored
    for out in (1, 2, 3):
        for extreme, zp, same in [("max", -128, False), ("min", 127, False), ("max", -128, True)]:
            cases.append(fc_layer(rng, batches=1 + out % 2, depth=256, out=out, zp=zp, out_zp=[-128, 127][out % 2],
                                  extreme=extreme, per_channel=out != 2, same_sign=same))
    # the nibble kernels (int4 / clustered, two rows per byte): every depth tail class, 1..7 rows (odd ones: an
    # unpaired last row), codebooks of fewer than 16 entries and per 1, 2 or 3 rows, the extremes
    for i, depth in enumerate((1, 15, 16, 17, 40, 128, 640)):
        cases.append(nibble_layer(rng, batches=1 + i % 2, depth=depth, out=1 + i, kind="int4",
                                  zp=[-128, 127, None][i % 3]))
        cases.append(nibble_layer(rng, batches=1 + (i + 1) % 2, depth=depth, out=7 - i % 3, kind="clustered",
                                  k=[16, 9, 2][i % 3], group_size=1 + i % 3, zp=[127, None, -128][i % 3]))
    # 5-bit codes (17..32 entries): chunk pairs, a last single full chunk, a tail alone or after a full chunk
    for i, depth in enumerate((7, 16, 31, 48, 64, 200)):
        cases.append(nibble_layer(rng, batches=1 + i % 2, depth=depth, out=2 + i, kind="clustered",
                                  k=[32, 17, 25][i % 3], group_size=1 + i % 2, zp=[127, None, -128][i % 3]))
    for extreme, zp in [("max", -128), ("min", 127)]:
        cases.append(nibble_layer(rng, batches=1, depth=100, out=5, kind="int4", zp=zp, out_zp=-128,
                                  extreme=extreme))
        cases.append(nibble_layer(rng, batches=2, depth=33, out=6, kind="clustered", zp=zp, out_zp=127,
                                  extreme=extreme, group_size=4))
        cases.append(nibble_layer(rng, batches=1, depth=50, out=3, kind="clustered", k=32, zp=zp, out_zp=127,
                                  extreme=extreme))
    return cases


CASES = _cases()


def test_cases_reach_the_extremes():
    outs = np.concatenate([c.expected.ravel() for c in CASES])
    assert (outs == -128).any() and (outs == 127).any() and (outs == -100).any() and (outs == 90).any()
    assert {c.x.shape[1] % 16 for c in CASES} == set(range(16))
    assert {c.w.shape[0] % 4 for c in CASES} == {0, 1, 2, 3}
    few = [c for c in CASES if c.w.shape[0] < 4 and (c.x == c.x.flat[0]).all() and c.x.flat[0] in (-128, 127)]
    assert {c.w.shape[0] for c in few} == {1, 2, 3}
    assert {int(v) for c in few for v in c.expected.ravel()} >= {-128, 127}


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
def test_portable_path_matches_reference_on_host(tmp_path):
    rc, out = run_host_cases(tmp_path, CASES, FILES)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]


@needs_arm
def test_helium_path_matches_reference_under_qemu(tmp_path):
    rc, out = run_arm_cases(tmp_path, CASES, FILES)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]
