"""The s16 convolution, depthwise and fully connected kernels on a Cortex-M4 under QEMU (their SMLAD paths: four
int16 inputs packed into lane pairs against SXTB16-unpacked weights) == the numpy references, at the extremes:
inputs all -32768 / all 32767 / alternating / random, weights +-127, odd channel counts, padding, and windows
longer than one int32 run (516 products). The host runs the plain C paths of the same cases (test_s16_kernels)."""
from __future__ import annotations

import numpy as np
import pytest

from tinyaot.core.quant16 import reduced_multiplier_array
from tinyaot.ops.common import spatial_out
from tinyaot.ops.conv_s16 import conv2d_s16, depthwise_conv2d_s16
from tinyaot.ops.fully_connected_s16 import fully_connected_s16
from tinyaot.paths import TEMPLATES

KERNELS = TEMPLATES / "kernels"
SOURCES = [KERNELS / f for f in ("tinyaot_convolve_s16.c", "tinyaot_depthwise_conv_s16.c",
                                  "tinyaot_fully_connected_s16.c")]


def _arr(ctype, name, values):
    v = np.asarray(values).reshape(-1)
    return f"static const {ctype} {name}[{max(v.size, 1)}] = {{{', '.join(str(int(t)) for t in v) or '0'}}};\n"


def _inputs(rng, shape):
    alt = np.where(np.arange(int(np.prod(shape))) % 2 == 0, -32768, 32767).reshape(shape)
    return [np.full(shape, -32768), np.full(shape, 32767), alt, rng.integers(-32768, 32768, shape)]


def _cases():
    rng = np.random.default_rng(42)
    out = []
    for k in range(6):  # standard convolutions: in_c a multiple of 4 and not, a long window
        cin = [8, 6, 5, 12, 300, 4][k]
        kh, kw = ([1, 1], [3, 3], [2, 3], [3, 1], [2, 1], [1, 1])[k]
        h, w = kh + 2, kw + 1
        pads = [0, 0, 0, 0] if k in (0, 4) else [1, 1, 1, 1]
        cout = [7, 4, 5, 9, 5, 8][k]
        oh, ow = spatial_out((h, w), (kh, kw), (1, 1), pads)
        wt = rng.integers(-127, 128, (cout, kh, kw, cin)) if k % 2 else np.where(
            rng.random((cout, kh, kw, cin)) < 0.5, -127, 127)
        bias = rng.integers(-(1 << 40), 1 << 40, cout)
        # channel 0: a scale of 2**19 (a left shift: an output range of ~0), the others right shifts
        m, s = reduced_multiplier_array(np.r_[2.0 ** 19, np.exp(rng.uniform(-16, -8, cout - 1))])
        geom = [1, h, w, cin, oh, ow, cout, kh, kw, 1, 1, pads[0], pads[1], 1, 1, -32768, 32767, cin]
        for x in _inputs(rng, (1, h, w, cin)):
            exp = conv2d_s16(x, wt, bias, m, s, pad_top_left=pads[:2], output_hw=(oh, ow))
            out.append(("tinyaot_convolve_s16", x, wt, bias, m, s, geom, exp))
    for k in range(2):  # depthwise
        c, kh = [8, 7][k], 3
        h, w = 4, 5
        oh, ow = spatial_out((h, w), (kh, kh), (1, 1), [1, 1, 1, 1])
        wt = rng.integers(-127, 128, (1, kh, kh, c))
        bias = rng.integers(-(1 << 40), 1 << 40, c)
        m, s = reduced_multiplier_array(np.exp(rng.uniform(-16, -8, c)))
        geom = [1, h, w, c, oh, ow, c, kh, kh, 1, 1, 1, 1, 1, 1, -32768, 32767, 1]
        for x in _inputs(rng, (1, h, w, c)):
            exp = depthwise_conv2d_s16(x, wt, bias, m, s, pad_top_left=(1, 1), output_hw=(oh, ow))
            out.append(("tinyaot_depthwise_conv_s16", x, wt, bias, m, s, geom, exp))
    for depth in (13, 64, 1201):  # fully connected, the last longer than one int32 run
        n = 5
        wt = np.where(rng.random((n, depth)) < 0.5, -127, 127)
        bias = rng.integers(-(1 << 40), 1 << 40, n)
        m, s = reduced_multiplier_array(np.exp(rng.uniform(-20, -10, n)))
        for x in _inputs(rng, (1, depth)):
            exp = fully_connected_s16(x, wt, bias, m, s)
            out.append(("tinyaot_fully_connected_s16", x, wt, bias, m, s, [1, depth, n, -32768, 32767], exp))
    return out


def test_s16_kernels_on_cortex_m4_under_qemu(tmp_path):
    from tests.ops.conftest import ARM_GCC, QEMU, ArmRunner

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    cases = _cases()
    parts = ['#include <string.h>\n#include "tinyaot_s16_support.h"\n', "void harness_puts(const char *s);\n"]
    for fn in ("tinyaot_convolve_s16", "tinyaot_depthwise_conv_s16", "tinyaot_fully_connected_s16"):
        parts.append(f"int {fn}(const int16_t *, const int8_t *, const int64_t *, const int32_t *, const int32_t *,"
                     " const int32_t *, int16_t *);\n")
    parts.append(f"static int16_t out_buf[{max(c[7].size for c in cases)}];\n")
    body = ["int main(void)\n{\n    int bad = 0;\n    int i;\n"]
    for k, (fn, x, wt, bias, m, s, geom, exp) in enumerate(cases):
        parts += [_arr("int16_t", f"x{k}", x), _arr("int8_t", f"w{k}", wt), _arr("int64_t", f"b{k}", bias),
                  _arr("int32_t", f"m{k}", m), _arr("int32_t", f"s{k}", s), _arr("int32_t", f"g{k}", geom),
                  _arr("int16_t", f"e{k}", exp)]
        body.append(f"    memset(out_buf, 0x55, sizeof out_buf);\n"
                    f"    bad += {fn}(x{k}, w{k}, b{k}, m{k}, s{k}, g{k}, out_buf) != 0;\n"
                    f"    for (i = 0; i < {exp.size}; i++) bad += out_buf[i] != e{k}[i];\n")
    body.append('    harness_puts(bad ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return bad != 0;\n}\n')
    runner = ArmRunner(tmp_path)
    elf = runner.build("cortex-m4", "s16", "".join(parts + body), SOURCES, [KERNELS], ("-Wall", "-Wextra", "-Werror"))
    rc, out = runner.run("cortex-m4", elf)
    assert rc == 0 and "ALL PASSED" in out, f"exit {rc}:\n{out[-2000:]}"
