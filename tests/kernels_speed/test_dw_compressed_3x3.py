"""The compressed depthwise kernels' 3x3 path (tinyaot_dw_quads_3x3 in templates/kernels/tinyaot_nn_compressed.h:
3x3 windows, no dilation, channel multiplier 1, whole groups of four channels; unrolled interior taps, border rows
by a switch on the column count) == the dense numpy reference for every weight kind that takes it (int4,
clustered; the sparse kinds keep their zero-tap skipping loop), on the host (plain C) and under QEMU on Cortex-M4
(the DSP path), with random and extreme (-128/127) inputs, strides 1-2, padding 0-2 on every side, small
images whose windows lie partly or wholly in the padding, and output written over the input at the planner's
offset; requantization both in its short form (right shifts) and the general one (make_case draws shift 0 and left
shifts now and then). The general tests of these kernels (tests/ops/test_compressed_kernels.py) rarely draw this
shape.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ops.test_compressed_kernels import KERNELS_DIR, firmware_source, make_case, run_host
from tinyaot.compress.encode import decode  # noqa: F401  (the encoders round-trip: checked in make_weights)
from tinyaot.ops.conv import conv_inplace_offset, depthwise_conv2d_s8
from tinyaot.ops.compressed import DW_PIXELS_AT_ONCE
from tinyaot.toolchain.host import compile_shared

KINDS = ("int4", "clustered")  # the sparse kinds skip all-zero taps in their own loop
SOURCES = [KERNELS_DIR / "tinyaot_depthwise_conv_s4.c", KERNELS_DIR / "tinyaot_depthwise_conv_s8_clustered.c"]


def cases(seed: int, per_kind: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for kind in KINDS:
        for i in range(per_kind):
            cin = int(rng.choice([4, 8, 12, 16]))
            c = make_case("depthwise", kind, rng, kh=3, kw=3, ch_mult=1, cin=cin)
            if i % 4 == 1:  # a channel of multiplier 0 (its output is the zero point)
                k = int(rng.integers(0, cin))
                c.mult = np.array(c.mult).copy()
                c.shift = np.array(c.shift).copy()
                c.mult[k], c.shift[k] = 0, 0
            if i % 3 == 0 or i % 4 == 1:  # extreme inputs (or the changed channel): the reference again
                if i % 3 == 0:
                    c.x = rng.choice(np.array([-128, 127]), c.x.shape).astype(np.int8)
                p = c.p
                c.expected = depthwise_conv2d_s8(c.x, c.w, c.bias, c.mult, c.shift, ch_mult=1,
                                                 input_offset=p["input_offset"], output_offset=p["output_offset"],
                                                 stride_hw=p["stride"], pad_top_left=p["pad"],
                                                 dilation_hw=p["dilation"], output_hw=p["out_hw"],
                                                 act_min=p["act_min"], act_max=p["act_max"])
            out.append(c)
    return out


def test_host_3x3_path_matches_reference_also_in_place():
    lib = ctypes.CDLL(str(compile_shared(SOURCES, [KERNELS_DIR], extra_flags=("-Wpedantic", "-Werror"))))
    for i, c in enumerate(cases(11, 20)):
        got = run_host(lib, c)
        assert np.array_equal(got, c.expected), f"{c.kind} case {i}: {c.p}"
        d = conv_inplace_offset(c.x.shape, c.expected.shape, c.p["stride"], c.p["pad"],
                                aligned_group=DW_PIXELS_AT_ONCE)
        got = run_host(lib, c, overlap=d)
        assert np.array_equal(got, c.expected), f"{c.kind} case {i} in place at {d}: {c.p}"


def test_3x3_path_under_qemu(tmp_path):
    cpu = "cortex-m4"
    from tests.ops.conftest import ARM_GCC, QEMU, ArmRunner

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    cs = [c for c in cases(12, 5) if c.x.size <= 800]
    runner = ArmRunner(tmp_path)
    elf = runner.build(cpu, "dwc3", firmware_source(cs), SOURCES, [KERNELS_DIR], ("-Wall", "-Wextra", "-Werror"))
    rc, out = runner.run(cpu, elf)
    assert rc == 0 and "ALL PASSED" in out, f"{cpu}: {len(cs)} cases, exit {rc}:\n{out[-2000:]}"
