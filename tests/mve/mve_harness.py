"""Build and run small C programs on the Helium board (mps3-an547, Cortex-M55 with MVE) for the tests in
tests/mve: the product's HAL (startup enables the FPU/MVE coprocessors, semihosting, tinyaot_mark) plus one
program file and the kernel templates. Nothing here is product code."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tinyaot.boards import load_board
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.firmware import build_firmware
from tinyaot.toolchain.qemu import QemuResult, run_qemu

KERNELS = TEMPLATES / "kernels"
HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc or qemu-system-arm is not installed")


def c_array(name: str, values, ctype: str) -> str:
    """A static const C array (values must fit ctype; int32 minimum written as an expression)."""
    flat = np.asarray(values).astype(np.int64).ravel()
    items = ", ".join(f"({v + 1} - 1)" if v == -(1 << 31) else str(int(v)) for v in flat)
    return f"static const {ctype} {name}[{max(len(flat), 1)}] = {{{items or '0'}}};\n"


def run_program(out_dir: Path, source: str, kernel_files=(), board_name: str = "mps3-an547",
                count: bool = False, defines=(), extra_cflags=()) -> QemuResult:
    """Compile `source` (a program with main) with the given kernel .c files for the board (-Werror) and run it;
    extra_cflags come after the product's flags (e.g. "-O0" replaces its -O2)."""
    board = load_board(board_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "program.c"
    src.write_text(source)
    elf = build_firmware([src, *[KERNELS / f for f in kernel_files]], [KERNELS], board, out_dir, werror=True,
                         defines=defines, extra_cflags=extra_cflags)
    return run_qemu(elf, board, out_dir, timeout_s=60, count_instructions=count)


# ---------------------------------------------------------------------------------------------------------------
# Layer cases for the Helium conv / fully connected kernels: one C program runs every case against the numpy
# reference's expected bytes; it is built for the host (the portable C path) and for mps3-an547 (the MVE path).
# ---------------------------------------------------------------------------------------------------------------
import subprocess  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from tinyaot.core.fixedpoint import quantize_multiplier_array  # noqa: E402
from tinyaot.ops.common import fold_input_offset  # noqa: E402
from tinyaot.ops.conv import conv2d_s8  # noqa: E402
from tinyaot.ops.fully_connected import fully_connected_s8  # noqa: E402
from tinyaot.ops.mve import (block_filter, conv_filter, int4_nibbles, nibble5_filter, nibble_filter,  # noqa: E402
                             per_channel4, s5_filter)
from tinyaot.compress.encode import encode_int5  # noqa: E402
from tinyaot.ops.common import fold_requant_table  # noqa: E402
from tinyaot.ops.decoded import s5_fold_layout  # noqa: E402

SENTINEL = 0x5A
HOST_CC = shutil.which("cc") or shutil.which("gcc")


@dataclass
class Layer:
    kernel: str                 # C function
    x: np.ndarray               # int8 input (NHWC, or [batches, depth])
    w: np.ndarray               # int8 weights (OHWI, or [out, depth])
    bias: np.ndarray            # int32, unfolded
    mult: np.ndarray
    shift: np.ndarray
    in_off: int
    out_off: int
    act: tuple[int, int]
    expected: np.ndarray
    geo: dict = field(default_factory=dict)  # conv: stride, pad (top, left), dilation; fc: per_channel


def _quant(rng, n: int, positive_shift: bool = False):
    scales = rng.uniform(0.0004, 0.02, n)
    if positive_shift:
        scales[0] = rng.uniform(1.0, 3.0)  # a scale >= 1: a positive shift
    return quantize_multiplier_array(scales)


def _ints(rng, shape, extreme: str | None):
    if extreme == "max":
        return np.full(shape, 127, np.int8)
    if extreme == "min":
        return np.full(shape, -128, np.int8)
    return rng.integers(-128, 128, shape, dtype=np.int64).astype(np.int8)


def conv_layer(rng, *, h, w, cin, cout, kh, kw, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), n=1,
               zp=None, out_zp=None, extreme=None, act=(-128, 127), kernel=None, positive_shift=False) -> Layer:
    """A random conv layer; pads = (top, left, bottom, right)."""
    x = _ints(rng, (n, h, w, cin), extreme)
    wt = _ints(rng, (cout, kh, kw, cin), None if extreme is None else ("min" if extreme == "max" else "max"))
    bias = rng.integers(-20000, 20000, cout).astype(np.int32)
    mult, shift = _quant(rng, cout, positive_shift)
    zp = int(rng.integers(-128, 128)) if zp is None else zp
    out_zp = int(rng.integers(-128, 128)) if out_zp is None else out_zp
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    exp = conv2d_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, stride_hw=stride,
                    pad_top_left=pads[:2], dilation_hw=dil, output_hw=(oh, ow), act_min=act[0], act_max=act[1])
    if kernel is None:
        kernel = "tinyaot_convolve_1x1_s8_mve" if kh == kw == 1 and not any(pads) else "tinyaot_convolve_s8_mve"
    return Layer(kernel, x, wt, bias, mult, shift, -zp, out_zp, act, exp,
                 dict(stride=stride, pad=pads[:2], dil=dil))


def fc_layer(rng, *, batches, depth, out, zp=None, out_zp=None, extreme=None, per_channel=True,
             act=(-128, 127), same_sign=False) -> Layer:
    """`extreme`: inputs all at "max" or "min", weights at the other end (or the same one with `same_sign`)."""
    x = _ints(rng, (batches, depth), extreme)
    w_extreme = extreme if same_sign or extreme is None else ("min" if extreme == "max" else "max")
    wt = _ints(rng, (out, depth), w_extreme)
    bias = rng.integers(-20000, 20000, out).astype(np.int32)
    mult, shift = _quant(rng, out if per_channel else 1)
    zp = int(rng.integers(-128, 128)) if zp is None else zp
    out_zp = int(rng.integers(-128, 128)) if out_zp is None else out_zp
    exp = fully_connected_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, act_min=act[0],
                             act_max=act[1])
    return Layer("tinyaot_fully_connected_s8_mve", x, wt, bias, mult, shift, -zp, out_zp, act, exp,
                 dict(per_channel=int(per_channel)))


NIBBLE_KERNELS = ("tinyaot_fully_connected_s4_mve", "tinyaot_fully_connected_s8_clustered_mve",
                  "tinyaot_fully_connected_s8_clustered5_mve")


def nibble_layer(rng, *, batches, depth, out, kind, k=16, group_size=1, zp=None, out_zp=None, extreme=None,
                 act=(-128, 127)) -> Layer:
    """A fully connected layer for the nibble kernels: int4 weights in [-8, 7] (`extreme`: all -8, against inputs
    at the other end), or clustered (`k` entries, 5-bit codes past 16, a codebook per `group_size` rows, spanning
    -128..127)."""
    x = _ints(rng, (batches, depth), extreme)
    if kind == "int4":
        wt = (np.full((out, depth), -8) if extreme else rng.integers(-8, 8, (out, depth))).astype(np.int8)
        geo = dict(per_channel=1, codes=int4_nibbles(wt))
        kernel = NIBBLE_KERNELS[0]
    else:
        books = rng.integers(-128, 128, (-(-out // group_size), k))
        books[:, 0], books[:, -1] = -128, 127
        codes = rng.integers(0, k, (out, depth))
        if extreme:
            codes[:] = 0 if extreme == "max" else k - 1
        wt = books[np.arange(out)[:, None] // group_size, codes].astype(np.int8)
        geo = dict(per_channel=1, codes=codes.astype(np.uint8), books=books, group_size=group_size)
        kernel = NIBBLE_KERNELS[2 if k > 16 else 1]
    bias = rng.integers(-20000, 20000, out).astype(np.int32)
    zp = int(rng.integers(-128, 128)) if zp is None else zp
    out_zp = int(rng.integers(-128, 128)) if out_zp is None else out_zp
    # scales that keep most outputs off the clamp (a wrong weight then shows in the bytes)
    acc = (x.astype(np.int64) - zp) @ wt.astype(np.int64).T + bias
    spread = np.maximum(acc.std(axis=0) if extreme is None else np.abs(acc).max(axis=0) / 60, 1)
    mult, shift = quantize_multiplier_array(rng.uniform(20, 40, out) / spread)
    exp = fully_connected_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, act_min=act[0],
                             act_max=act[1])
    return Layer(kernel, x, wt, bias, mult, shift, -zp, out_zp, act, exp, geo)


# the 5-bit grid kernels (int5 storage): Helium, the DSP fold kernel (fold table / one multiplier and shift per
# channel) and the portable one over the storage's own words
S5_KERNELS = ("tinyaot_fully_connected_s5_mve", "tinyaot_fully_connected_s5_fold",
              "tinyaot_fully_connected_s5_fold_rq", "tinyaot_fully_connected_s5")


def s5_layer(rng, *, batches, depth, out, kernel, zp=None, out_zp=None, extreme=None, act=(-128, 127),
             per_channel=True) -> Layer:
    """A fully connected layer for the 5-bit kernels: weights in [-15, 15] (`extreme`: all -15 or 15 against inputs
    at the other end), scales that keep most outputs off the clamp."""
    x = _ints(rng, (batches, depth), extreme)
    if extreme:
        wt = np.full((out, depth), -15 if extreme == "max" else 15, np.int8)
    else:
        wt = rng.integers(-15, 16, (out, depth)).astype(np.int8)
    bias = rng.integers(-20000, 20000, out).astype(np.int32)
    zp = int(rng.integers(-128, 128)) if zp is None else zp
    out_zp = int(rng.integers(-128, 128)) if out_zp is None else out_zp
    acc = (x.astype(np.int64) - zp) @ wt.astype(np.int64).T + bias
    spread = np.maximum(acc.std(axis=0) if extreme is None else np.abs(acc).max(axis=0) / 60, 1)
    mult, shift = quantize_multiplier_array(rng.uniform(20, 40, out) / spread)
    if not per_channel:
        mult, shift = mult[:1], shift[:1]
    exp = fully_connected_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, act_min=act[0],
                             act_max=act[1])
    return Layer(kernel, x, wt, bias, mult, shift, -zp, out_zp, act, exp, dict(per_channel=int(per_channel)))


def _s5_arrays(pre: str, c: Layer) -> str:
    """The weights, bias and requantization arrays of an S5_KERNELS case, as tinyaot/ops renders them."""
    cout = c.w.shape[0]
    folded = fold_input_offset(c.bias, c.w, c.in_off)
    if c.kernel == "tinyaot_fully_connected_s5_mve":
        w = c_array(pre + "w", s5_filter(c.w), "uint8_t")
        bias, mult, shift = (per_channel4(v, cout) for v in (folded, c.mult, c.shift))
    elif c.kernel == "tinyaot_fully_connected_s5":  # the storage's words, the unfolded bias
        w = c_array(pre + "w", encode_int5(c.w).arrays["packed"], "uint32_t")
        bias, mult, shift = c.bias, c.mult, c.shift
    else:
        w = c_array(pre + "w", s5_fold_layout(c.w), "uint32_t")
        bias, mult, shift = folded, c.mult, c.shift
        if c.kernel == "tinyaot_fully_connected_s5_fold":
            bias, mult, shift = fold_requant_table(c.bias, c.w, c.in_off, c.mult, c.shift, c.out_off)
    return (w + c_array(pre + "b", bias, "int32_t") + c_array(pre + "m", mult, "int32_t")
            + c_array(pre + "s", shift, "int32_t"))


def _case_c(i: int, c: Layer) -> str:
    """File-scope arrays and a function `case_<i>` returning the number of wrong output bytes (1000: rejected)."""
    pre = f"c{i}_"
    cout = c.w.shape[0]
    if c.kernel in S5_KERNELS:
        return _s5_case_c(i, c, pre, cout)
    if c.kernel == "tinyaot_convolve_s8_mve":  # the direct path's padded kernel rows, or the plain rows
        wb = conv_filter(c.w, c.geo["dil"][1])
    else:
        wb = block_filter(c.w.reshape(cout, -1))
    folded = fold_input_offset(c.bias, c.w, c.in_off)
    filt = pre + "w"
    if c.kernel in NIBBLE_KERNELS:
        wb = nibble_filter(c.geo["codes"]).view(np.int8)
        if c.kernel in NIBBLE_KERNELS[1:]:
            books = c.geo["books"]
            bits = 5 if books.shape[1] > 16 else 4
            filt = "&" + pre + "cw"
            packed = (nibble5_filter if bits == 5 else nibble_filter)(c.geo["codes"])
            wb = (c_array(pre + "cb", books, "int8_t") + c_array(pre + "cp", packed, "uint8_t")
                  + f"static const tinyaot_clustered_weights {pre}cw = {{{pre}cb, {pre}cp, {bits}, {books.shape[1]}, "
                  f"{c.geo['group_size']}, 0}};\n")
    # per channel and padded to four, as tinyaot/ops/mve.py renders them
    mult, shift, folded = (per_channel4(v, cout) for v in (c.mult, c.shift, folded))
    s = (c_array(pre + "x", c.x, "int8_t") + (wb if isinstance(wb, str) else c_array(pre + "w", wb, "int8_t"))
         + c_array(pre + "b", folded, "int32_t")
         + c_array(pre + "m", mult, "int32_t") + c_array(pre + "s", shift, "int32_t")
         + c_array(pre + "e", c.expected, "int8_t"))
    n_out = c.expected.size
    s += f"static int case_{i}(void)\n{{\n    int rc;\n"
    s += f"    const tinyaot_per_channel_quant_params q = {{{pre}m, {pre}s}};\n"
    if c.kernel == "tinyaot_fully_connected_s8_mve" or c.kernel in NIBBLE_KERNELS:
        b, d = c.x.shape
        s += (f"    const tinyaot_fc_params prm = {{{c.in_off}, 0, {c.out_off}, {{{c.act[0]}, {c.act[1]}}}}};\n"
              f"    const tinyaot_dims in_d = {{{b}, 1, 1, {d}}}, f_d = {{{d}, 1, 1, {cout}}}, "
              f"b_d = {{1, 1, 1, {cout}}}, o_d = {{{b}, 1, 1, {cout}}};\n"
              f"    const tinyaot_context ctx = {{NULL, 0}};\n")
        call = (f"{c.kernel}(&ctx, &prm, &q, 1, &in_d, {pre}x, &f_d, {filt}, &b_d, {pre}b, "
                f"&o_d, out_buf)")
    else:
        n, h, w, cin = c.x.shape
        _, oh, ow, _ = c.expected.shape
        g = c.geo
        k = c.w.shape[1] * c.w.shape[2] * cin
        s += (f"    const tinyaot_conv_params prm = {{{c.in_off}, {c.out_off}, {{{g['stride'][0]}, {g['stride'][1]}}}, "
              f"{{{g['pad'][0]}, {g['pad'][1]}}}, {{{g['dil'][0]}, {g['dil'][1]}}}, {{{c.act[0]}, {c.act[1]}}}}};\n"
              f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {cin}}}, f_d = {{{cout}, {c.w.shape[1]}, "
              f"{c.w.shape[2]}, {cin}}}, b_d = {{1, 1, 1, {cout}}}, o_d = {{{n}, {oh}, {ow}, {cout}}};\n"
              # two columns (pairs of pixels) for even cases, one column for odd ones
              f"    const tinyaot_context ctx = {{scratch_buf, {2 * k if i % 2 == 0 else k}}};\n")
        call = (f"{c.kernel}(&ctx, &prm, &q, &in_d, {pre}x, &f_d, {pre}w, &b_d, {pre}b, &o_d, out_buf)")
        if g.get("inplace") is not None:
            # output d bytes before the input in one buffer, d the planner's offset (ops/conv.py)
            d = g["inplace"]
            s += (f"    memcpy(inplace_buf + {d}, {pre}x, {c.x.size});\n"
                  f"    rc = {call.replace(pre + 'x,', f'inplace_buf + {d},').replace('out_buf)', 'inplace_buf)')};\n"
                  f"    if (rc != 0) return 1000;\n"
                  f"    if (mismatches(inplace_buf, {pre}e, {n_out})) return 2000;\n")
    s += (f"    memset(out_buf, {SENTINEL}, sizeof out_buf);\n"
          "    __asm__ volatile(\"\" : : \"r\"(out_buf) : \"memory\");\n"
          f"    rc = {call};\n"
          f"    if (rc != 0) return 1000;\n"
          f"    return mismatches(out_buf, {pre}e, {n_out}) + untouched(out_buf + {n_out}, "
          f"(int)sizeof out_buf - {n_out});\n}}\n")
    return s


def _s5_case_c(i: int, c: Layer, pre: str, cout: int) -> str:
    b, d = c.x.shape
    n_out = c.expected.size
    return (_s5_arrays(pre, c) + c_array(pre + "x", c.x, "int8_t") + c_array(pre + "e", c.expected, "int8_t")
            + f"static int case_{i}(void)\n{{\n    int rc;\n"
            f"    const tinyaot_per_channel_quant_params q = {{{pre}m, {pre}s}};\n"
            f"    const tinyaot_fc_params prm = {{{c.in_off}, 0, {c.out_off}, {{{c.act[0]}, {c.act[1]}}}}};\n"
            f"    const tinyaot_dims in_d = {{{b}, 1, 1, {d}}}, f_d = {{{d}, 1, 1, {cout}}}, "
            f"b_d = {{1, 1, 1, {cout}}}, o_d = {{{b}, 1, 1, {cout}}};\n"
            f"    const tinyaot_context ctx = {{NULL, 0}};\n"
            f"    memset(out_buf, {SENTINEL}, sizeof out_buf);\n"
            "    __asm__ volatile(\"\" : : \"r\"(out_buf) : \"memory\");\n"
            f"    rc = {c.kernel}(&ctx, &prm, &q, {c.geo['per_channel']}, &in_d, {pre}x, &f_d, {pre}w, &b_d, {pre}b, "
            f"&o_d, out_buf);\n"
            f"    if (rc != 0) return 1000;\n"
            f"    return mismatches(out_buf, {pre}e, {n_out}) + untouched(out_buf + {n_out}, "
            f"(int)sizeof out_buf - {n_out});\n}}\n")


def layers_program(cases: list[Layer]) -> str:
    out_size = max(c.expected.size for c in cases) + 16
    scratch = max([2 * int(np.prod(c.w.shape[1:])) for c in cases] + [16])
    inplace = max([c.geo["inplace"] + c.x.size + c.expected.size for c in cases if c.geo.get("inplace") is not None]
                  + [16])
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn_types.h"\n#include "tinyaot_nn_mve.h"\n'
             '#include "tinyaot_nn.h"\n',
             "void report(int i, int bad);\n",
             f"static int8_t out_buf[{out_size}];\nstatic int8_t scratch_buf[{scratch}];\n",
             f"static int8_t inplace_buf[{inplace}];\n",
             "static int mismatches(const int8_t *a, const int8_t *b, int n)\n"
             "{\n    int bad = 0, i;\n    for (i = 0; i < n; i++) bad += a[i] != b[i];\n    return bad;\n}\n",
             "static int untouched(const int8_t *a, int n)\n"
             f"{{\n    int bad = 0, i;\n    for (i = 0; i < n; i++) bad += a[i] != {SENTINEL};\n    return bad;\n}}\n"]
    for i, c in enumerate(cases):
        parts.append(_case_c(i, c))
    parts.append("int run_cases(void)\n{\n    int fails = 0, bad;\n    (void)scratch_buf;\n    (void)inplace_buf;\n")
    for i in range(len(cases)):
        parts.append(f"    bad = case_{i}();\n    if (bad) {{ report({i}, bad); fails++; }}\n")
    parts.append("    return fails;\n}\n")
    return "".join(parts)


HOST_MAIN = r"""
#include <stdio.h>
int run_cases(void);
void report(int i, int bad) { printf("case %d: %d wrong bytes\n", i, bad); }
int main(void) { int f = run_cases(); printf(f ? "SOME FAILED\n" : "ALL PASSED\n"); return f != 0; }
"""

ARM_MAIN = r"""
#include "tinyaot_hal.h"
#include "tinyaot_mve_support.h"
#if !TINYAOT_USE_MVE
#error "this program must exercise the Helium path"
#endif
int run_cases(void);
void report(int i, int bad)
{
    tinyaot_hal_puts("case ");
    tinyaot_hal_put_uint((uint32_t)i);
    tinyaot_hal_puts(": wrong bytes ");
    tinyaot_hal_put_uint((uint32_t)bad);
    tinyaot_hal_puts("\n");
}
int main(void) { int f = run_cases(); tinyaot_hal_puts(f ? "SOME FAILED\n" : "ALL PASSED\n"); return f != 0; }
"""


def run_host_cases(out_dir: Path, cases: list[Layer], kernel_files) -> tuple[int, str]:
    """The portable C path: the program compiled with the host compiler (-Werror, UBSan) and run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cases.c").write_text(layers_program(cases))
    (out_dir / "main.c").write_text(HOST_MAIN)
    exe = out_dir / "cases"
    cmd = [HOST_CC, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
           "-fno-sanitize-recover=all", f"-I{KERNELS}", str(out_dir / "cases.c"), str(out_dir / "main.c"),
           *[str(KERNELS / f) for f in kernel_files], "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    return run.returncode, run.stdout + run.stderr


def run_arm_cases(out_dir: Path, cases: list[Layer], kernel_files, opt: str = "-O2",
                  board_name: str = "mps3-an547") -> tuple[int, str]:
    """The Helium path: the same program on mps3-an547 under QEMU, built at `opt` (at -O0 the kernels' C loops
    replace their inline assembly); on another board (`board_name`, e.g. mps2-an386 for the DSP paths) without
    the check that the Helium path is built."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cases.c").write_text(layers_program(cases))
    main = ARM_MAIN if board_name == "mps3-an547" else ARM_MAIN.replace("#if !TINYAOT_USE_MVE", "#if 0")
    res = run_program(out_dir, main, [*kernel_files, out_dir / "cases.c"], board_name=board_name,
                      extra_cflags=[opt])
    return res.exit_code, res.stdout + res.stderr
