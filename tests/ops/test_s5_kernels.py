"""The 5-bit grid fully connected kernels (int5 storage: --clusters 17..32 on a batch-1 fully connected layer,
compress/pipeline.py grid_layers) against the numpy reference (ops/fully_connected.py), bit for bit:
tinyaot_fully_connected_s5_mve (three rows in two bytes, Helium), tinyaot_fully_connected_s5_fold / _fold_rq (three
16-bit lane pairs per word, DSP assembly) and tinyaot_fully_connected_s5 (the storage's own words, portable). Depths
giving every tail of a 12-input group and of a 16-column chunk, 1..8 rows (every leftover of a block of three and
four), 1..2 batch rows, input zero points at both ends, saturated inputs against extreme weights, a clamping
activation; no byte after the output written. Each kernel's portable path on the host (UBSan), the DSP assembly on
mps2-an386 (Cortex-M4) and, with the Helium kernel, on mps3-an547 (Cortex-M55) under QEMU."""
from __future__ import annotations

import numpy as np
import pytest

from mve.mve_harness import HOST_CC, S5_KERNELS, needs_arm, run_arm_cases, run_host_cases, s5_layer
from tinyaot.compress.encode import decode, encode_int5
from tinyaot.ir import Tensor
from tinyaot.ops.common import fold_requant_table
from tinyaot.ops.decoded import s5_fold_layout
from tinyaot.ops.mve import s5_filter

FILES = ["tinyaot_fully_connected_s5_mve.c", "tinyaot_fully_connected_s5_fold.c", "tinyaot_fully_connected_s5.c",
         "tinyaot_mve_gemm_s8.c"]
DEPTHS = (1, 5, 11, 12, 13, 14, 16, 17, 23, 24, 27, 31, 37, 42, 45, 58, 100, 128, 200)


def _cases() -> list:
    rng = np.random.default_rng(2032)
    cases = []
    for i, depth in enumerate(DEPTHS):
        for j, kernel in enumerate(S5_KERNELS):
            out = 1 + (i + j) % 8
            c = s5_layer(rng, batches=1 + (i + j) % 2, depth=depth, out=out, kernel=kernel,
                         zp=[-128, 127, None][(i + j) % 3], per_channel=kernel != S5_KERNELS[3] or i % 2 == 0,
                         act=(-100, 90) if (i + j) % 5 == 0 else (-128, 127))
            if kernel == "tinyaot_fully_connected_s5_fold" and fold_requant_table(
                    c.bias, c.w, c.in_off, c.mult, c.shift, c.out_off) is None:
                c.kernel = "tinyaot_fully_connected_s5_fold_rq"  # (the table is not exact for this layer)
            cases.append(c)
    for kernel in S5_KERNELS:
        for extreme, zp in [("max", -128), ("min", 127)]:
            cases.append(s5_layer(rng, batches=1, depth=131, out=5, kernel=kernel, zp=zp, out_zp=-128,
                                  extreme=extreme, per_channel=True))
    return cases


CASES = _cases()


def test_cases_cover_the_kernels_and_tails():
    assert {c.kernel for c in CASES} == set(S5_KERNELS)
    assert {c.x.shape[1] % 12 for c in CASES} == set(range(12))
    assert {c.x.shape[1] % 16 for c in CASES} >= {0, 1, 5, 7, 11, 12, 13, 15}
    assert {c.w.shape[0] % 3 for c in CASES} == {0, 1, 2} and {c.w.shape[0] % 4 for c in CASES} == {0, 1, 2, 3}
    outs = np.concatenate([c.expected.ravel() for c in CASES])
    assert (outs == -128).any() and (outs == 127).any() and (outs == -100).any() and (outs == 90).any()


def test_int5_storage_and_layouts_hold_the_values():
    """encode_int5 / decode round-trip (odd sizes: a last partial word), and every kernel layout decodes (in numpy,
    as its kernel reads it) to the same weights."""
    rng = np.random.default_rng(5)
    for shape in ((1, 1), (3, 7), (5, 13), (8, 37), (2, 96)):
        w = rng.integers(-15, 16, shape).astype(np.int8)
        st = encode_int5(w)
        assert st.nbytes(w) == 4 * -(-w.size // 6)
        assert np.array_equal(decode(Tensor("w", shape, "int8", w, None, st)), w)
        out_c, k = shape
        # the fold layout: per block of four rows and group of twelve inputs, words A then B of each row
        words = s5_fold_layout(w).astype(np.int64).reshape(-(-out_c // 4), -(-k // 12), 2, 4)
        fields = ((words[..., None] >> (5 * (np.arange(6) % 3) + 16 * (np.arange(6) // 3))) & 31) - 16
        inputs = np.array([[0, 1, 4, 2, 3, 6], [5, 8, 9, 7, 10, 11]])
        got = np.zeros((-(-out_c // 4) * 4, -(-k // 12) * 12), np.int64)
        for blk in range(words.shape[0]):
            for g in range(words.shape[1]):
                for half in range(2):
                    for r in range(4):
                        got[4 * blk + r, 12 * g + inputs[half]] = fields[blk, g, half, r]
        assert np.array_equal(got[:out_c, :k], w) and not got[out_c:].any() and not got[:, k:].any()
        # the Helium layout: per block of three rows and chunk of 16 columns, p then r
        k16 = -(-k // 16) * 16
        pr = s5_filter(w).view(np.int8).astype(np.int64).reshape(-1, k16 // 16, 2, 16)
        p = pr[:, :, 0].reshape(-1, k16)
        r = pr[:, :, 1].reshape(-1, k16)
        rows = np.stack([(p & 31) - 16, 4 * ((p - (p & 31)) // 32) + (r - (r & 31)) // 32, (r & 31) - 16], axis=1)
        assert np.array_equal(rows.reshape(-1, k16)[:out_c, :k], w)
    with pytest.raises(ValueError):
        encode_int5(np.array([[16]], np.int8))


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
def test_portable_paths_match_reference_on_host(tmp_path):
    rc, out = run_host_cases(tmp_path, CASES, FILES)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]


@needs_arm
@pytest.mark.parametrize("board", ["mps2-an386", "mps3-an547"])
def test_dsp_and_helium_paths_match_reference_under_qemu(tmp_path, board):
    rc, out = run_arm_cases(tmp_path, CASES, FILES, board_name=board)
    assert rc == 0 and "ALL PASSED" in out, out[-3000:]
