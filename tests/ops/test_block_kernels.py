"""The block-sparse kernels (tinyaot_convolve_s8_block, tinyaot_fully_connected_s8_block and their Helium forms
tinyaot_*_block_mve) against the dense numpy references, bit for bit.

Weights: random int8 values in random 4x4 blocks (compress/pattern.py), encoded with encode_sparse_block (decode()
must give them back), at densities from empty to full, with empty block-rows, out_ch and K not multiples of 4, and
rows longer than 1020 positions (stored zero blocks bridge long gaps). The constants are rendered exactly as
tinyaot/ops/compressed.py renders them for a deploy (the fold requantization table where exact, else multipliers
and shifts; the Helium stream). One C program runs every case:
  - on the host (portable C, UBSan, -Werror),
  - on mps2-an386 (Cortex-M4: the DSP inline assembly) and mps2-an385 (Cortex-M3: plain C) under QEMU,
  - on mps3-an547 (Cortex-M55: the Helium gathers) under QEMU, at -O2 (assembly) and -O0 (intrinsics),
and each output must equal the reference, no byte past the output written.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from mve.mve_harness import HOST_CC, KERNELS, needs_arm, run_program
from tinyaot.compress.encode import decode, encode_sparse_block
from tinyaot.core.fixedpoint import quantize_multiplier_array
from tinyaot.ir import Tensor
from tinyaot.ops.compressed import (MVE_2X1_CONST_ROW, block2x1_arrays, block2x1_scratch_bytes, block_requant,
                                    mve_2x1_const_rows, mve_block2x1_constants, mve_block2x1_positions,
                                    mve_block2x1_storage, mve_block2x1_stream, mve_block2x1_values, mve_block_params,
                                    mve_block_stream)
from tinyaot.ops.conv import conv2d_s8
from tinyaot.ops.fully_connected import fully_connected_s8

SENTINEL = 0x5A
DSP_FILES = ["tinyaot_convolve_s8_block.c", "tinyaot_fully_connected_s8_block.c", "tinyaot_convolve_s8_block2x1.c"]
MVE_FILES = ["tinyaot_convolve_s8_block_mve.c", "tinyaot_fully_connected_s8_block_mve.c",
             "tinyaot_convolve_s8_block2x1_mve.c"]


def _arr(name, values, ctype):
    flat = np.asarray(values).astype(np.int64).ravel()
    items = ", ".join(f"({v + 1} - 1)" if v == -(1 << 31) else str(int(v)) for v in flat)
    return f"static const {ctype} {name}[{max(len(flat), 1)}] = {{{items or '0'}}};\n"


def _block_weights(rng, out_c, k, density, extreme=None, block=(4, 4), kept=None, mask=None):
    nbr, nbc = -(-out_c // block[0]), -(-k // block[1])
    given = mask is not None  # the blocks kept, given
    mask = np.asarray(mask, bool) if given else rng.random((nbr, nbc)) < density
    if kept is not None:  # per block-row this many blocks kept (the first ones)
        mask = np.arange(nbc)[None, :] < np.asarray(kept)[:, None]
    if nbr > 1 and kept is None and not given:
        mask[int(rng.integers(0, nbr))] = False  # an empty block-row
    vals = rng.integers(-128, 128, (out_c, k)) if extreme is None else np.full((out_c, k), extreme)
    keep = np.repeat(np.repeat(mask, block[0], axis=0), block[1], axis=1)[:out_c, :k]
    w = np.where(keep, vals, 0).astype(np.int8)
    st = encode_sparse_block(w, block=block)
    assert np.array_equal(decode(Tensor("w", w.shape, "int8", w, None, st)), w)
    return w, st


def _quant(rng, n, positive=False):
    scales = rng.uniform(0.0004, 0.02, n)
    if positive:
        scales[0] = rng.uniform(1.0, 3.0)  # a positive shift: no fold table
    return quantize_multiplier_array(scales)


def _case(rng, *, conv, out_c, density, n=1, h=1, w=1, cin=8, kh=1, kw=1, stride=(1, 1), pads=(0, 0, 0, 0),
          dil=(1, 1), rows=1, depth=8, zp=None, out_zp=None, act=(-128, 127), extreme=None, positive=False,
          block=(4, 4), kept=None, mask=None):
    if conv:
        k = kh * kw * cin
        x = rng.integers(-128, 128, (n, h, w, cin)).astype(np.int8) if extreme is None else \
            np.full((n, h, w, cin), 127 if extreme < 0 else -128, np.int8)
    else:
        k = depth
        x = rng.integers(-128, 128, (rows, depth)).astype(np.int8) if extreme is None else \
            np.full((rows, depth), 127 if extreme < 0 else -128, np.int8)
    w2, st = _block_weights(rng, out_c, k, density, extreme, block, kept, mask)
    bias = rng.integers(-20000, 20000, out_c).astype(np.int32)
    mult, shift = _quant(rng, out_c, positive)
    zp = int(rng.integers(-128, 128)) if zp is None else zp
    out_zp = int(rng.integers(-128, 128)) if out_zp is None else out_zp
    if conv:
        wt = w2.reshape(out_c, kh, kw, cin)
        oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        exp = conv2d_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, stride_hw=stride,
                        pad_top_left=pads[:2], dilation_hw=dil, output_hw=(oh, ow), act_min=act[0], act_max=act[1])
    else:
        wt = w2
        exp = fully_connected_s8(x, wt, bias, mult, shift, input_offset=-zp, output_offset=out_zp, act_min=act[0],
                                 act_max=act[1])
    return dict(conv=conv, x=x, w=wt, st=st, bias=bias, mult=mult, shift=shift, in_off=-zp, out_off=out_zp,
                act=act, exp=exp, geo=dict(stride=stride, pad=pads[:2], dil=dil), k=k, b2x1=block == (2, 1))


def _cases():
    rng = np.random.default_rng(2020)
    cs = []
    for i, d in enumerate([0.0, 0.1, 0.35, 0.6, 1.0]):
        cs.append(_case(rng, conv=True, out_c=16 + i % 3, density=d, h=5, w=4, cin=16))  # 1x1 in place (MVE)
    cs.append(_case(rng, conv=True, out_c=13, density=0.5, h=7, w=6, cin=12, kh=3, kw=3, pads=(1, 1, 1, 1)))
    cs.append(_case(rng, conv=True, out_c=8, density=0.5, h=8, w=9, cin=3, kh=3, kw=3, stride=(2, 2),
                    pads=(0, 1, 1, 1), n=2))
    cs.append(_case(rng, conv=True, out_c=6, density=0.4, h=9, w=9, cin=5, kh=3, kw=2, dil=(2, 3),
                    pads=(2, 1, 2, 2)))
    cs.append(_case(rng, conv=True, out_c=10, density=0.5, h=12, w=5, cin=1, kh=10, kw=4, stride=(2, 2),
                    pads=(4, 1, 5, 1)))  # kws's first layer shape class
    cs.append(_case(rng, conv=True, out_c=7, density=0.05, h=3, w=3, cin=128, kh=3, kw=3, pads=(1, 1, 1, 1)))
    cs.append(_case(rng, conv=True, out_c=5, density=0.3, h=3, w=1, cin=6))  # 1x1, in_ch not a multiple of 4
    cs.append(_case(rng, conv=True, out_c=9, density=0.5, h=4, w=4, cin=8, positive=True))
    cs.append(_case(rng, conv=True, out_c=8, density=0.5, h=3, w=3, cin=16, act=(-20, 90)))
    for extreme, zp in [(127, -128), (-128, 127)]:
        cs.append(_case(rng, conv=True, out_c=8, density=1.0, h=3, w=3, cin=8, kh=3, kw=3, pads=(1, 1, 1, 1),
                        zp=zp, extreme=extreme))
    for rows, depth, out_c, d in [(1, 640, 128, 0.5), (1, 8, 5, 0.7), (2, 37, 7, 0.5), (3, 128, 12, 0.3),
                                  (1, 30, 9, 0.6), (4, 16, 4, 1.0), (1, 64, 12, 0.0), (1, 1500, 6, 0.02),
                                  (3, 12, 3, 0.6)]:  # fewer than four channels: no whole block-row
        cs.append(_case(rng, conv=False, out_c=out_c, density=d, rows=rows, depth=depth))
    cs.append(_case(rng, conv=False, out_c=10, density=0.5, rows=1, depth=64, positive=True, act=(-50, 60)))
    for extreme, zp in [(127, -128), (-128, 127)]:
        cs.append(_case(rng, conv=False, out_c=6, density=1.0, rows=2, depth=40, zp=zp, extreme=extreme))
    # 2x1 blocks (the block2x1 pattern's convolutions): odd channel counts (a lone last channel pair, a block-row of
    # two), odd kept counts, rows past 255 positions (uint16 positions) and past 255 blocks (bridging zero blocks)
    for i, d in enumerate([0.0, 0.3, 0.55, 1.0]):
        cs.append(_case(rng, conv=True, out_c=16 + i, density=d, h=5, w=4, cin=16 + 4 * i, block=(2, 1)))
    cs.append(_case(rng, conv=True, out_c=13, density=0.5, h=7, w=5, cin=10, kh=3, kw=3, pads=(1, 1, 1, 1),
                    block=(2, 1)))  # odd width: pixel pairs across rows, window rows of 30 (not whole words)
    cs.append(_case(rng, conv=True, out_c=6, density=0.5, n=3, h=5, w=5, cin=7, stride=(2, 2),
                    block=(2, 1)))  # 1x1 read two pixels at a time: pairs across images, a lone last pixel
    cs.append(_case(rng, conv=True, out_c=10, density=0.4, h=12, w=5, cin=1, kh=10, kw=4, stride=(2, 2),
                    pads=(4, 1, 5, 1), block=(2, 1)))
    cs.append(_case(rng, conv=True, out_c=6, density=0.4, h=9, w=9, cin=5, kh=3, kw=2, dil=(2, 3), pads=(2, 1, 2, 2),
                    n=2, block=(2, 1)))
    cs.append(_case(rng, conv=True, out_c=7, density=0.1, h=3, w=3, cin=64, kh=3, kw=3, pads=(1, 1, 1, 1),
                    block=(2, 1)))  # K = 576: uint16 positions; Helium: three segments of 256 positions
    cs.append(_case(rng, conv=True, out_c=10, density=0.3, h=4, w=3, cin=32, kh=3, kw=3, pads=(1, 1, 1, 1),
                    block=(2, 1)))  # K = 288 (ic_resnet8's 3x3x32): two segments
    segs = np.zeros((6, 800), bool)  # 1x1 in place, four segments: channel pairs with an empty first segment, an
    segs[0, 600:610] = segs[1, [3, 700]] = segs[2, 300] = segs[4, 790:800] = True  # empty middle one, only a
    segs[5] = rng.random(800) < 0.3  # middle one, nothing kept, only the last
    cs.append(_case(rng, conv=True, out_c=12, density=0.0, h=3, w=1, cin=800, block=(2, 1), mask=segs))
    # Helium: a sparse pair (fewer than one position in 8: the next pair takes the zero-skipping decoder) before a
    # dense one, an empty one and one kept only in the last bitmap byte (K = 144: 4 words and 2 bytes); in_c 16 (one
    # vector a band chunk), a row of 6: bands of 4 pixels then 2
    sp = np.zeros((5, 144), bool)
    sp[0, [3, 40, 77]] = sp[3, 143] = True
    sp[1], sp[4] = rng.random(144) < 0.6, rng.random(144) < 0.1
    cs.append(_case(rng, conv=True, out_c=10, density=0.0, h=5, w=6, cin=16, kh=3, kw=3, pads=(1, 1, 1, 1),
                    block=(2, 1), mask=sp))
    cs.append(_case(rng, conv=True, out_c=9, density=0.5, h=4, w=4, cin=8, positive=True, act=(-20, 90),
                    block=(2, 1)))
    for extreme, zp in [(127, -128), (-128, 127)]:
        cs.append(_case(rng, conv=True, out_c=8, density=1.0, h=3, w=3, cin=8, kh=3, kw=3, pads=(1, 1, 1, 1),
                        zp=zp, extreme=extreme, block=(2, 1)))
    # kept positions per channel pair at the Helium groups' edges (16, 17, 32 and 1: a whole first group, one past
    # it, two whole groups, a lone odd one with its filler; 255 and all 256: position bytes to the top, 16 groups)
    cs.append(_case(rng, conv=True, out_c=8, density=0.0, h=3, w=2, cin=48, block=(2, 1), kept=[16, 17, 32, 1]))
    cs.append(_case(rng, conv=True, out_c=4, density=0.0, h=2, w=2, cin=256, block=(2, 1), kept=[255, 256]))
    # Helium in-flash streams' constant block-rows (nothing kept in either pair; mve_block2x1_stream): first, between
    # kept ones and before an empty partial row (out_c 14), their outputs clamped by the activation; 1x1 only (the
    # _const entry), in place (5 pixels: a lone last one) and with in_c 6 (columns)
    for cin, kh, act in [(16, 1, (-20, 90)), (6, 1, (-128, 40))]:
        empty = np.zeros((7, cin * kh * kh), bool)
        empty[2, [0, cin - 1]] = empty[3, 1] = True
        cs.append(_case(rng, conv=True, out_c=14, density=0.0, h=5, w=1 if kh == 1 else 4, cin=cin, kh=kh, kw=kh,
                        pads=(1, 1, 1, 1) if kh == 3 else (0, 0, 0, 0), act=act, block=(2, 1), mask=empty))
    return cs


CASES = _cases()
# the Helium variant is offered for rows of at most 1024 positions (one index byte per block; ops/compressed.py)
# (2x1: any row; past 256 positions the segmented stream and the _long entry); each 2x1 case twice: its bitmaps
# decoded per call, and its position stream read from flash (mve_block2x1_positions, decoded 0)
HELIUM_CASES = [c for c in CASES if c["b2x1"] or -(-c["k"] // 4) <= 256] + \
    [{**c, "in_flash": True} for c in CASES if c["b2x1"]]


def _positions(c, helium: bool):
    """(positions array, decoded scratch bytes) of a 2x1 case as ops/compressed.py renders it (Helium: in the
    kernel's window order, the bitmaps or, for the in_flash copies, the stream itself)."""
    if not helium:
        return block2x1_arrays(c["st"])[1:]
    st = mve_block2x1_storage(c["st"], c["w"].shape)  # the kernel's window order (kernel-column-major)
    out_c = c["w"].shape[0]
    params = mve_block_params(c["bias"], c["w"].reshape(out_c, -1), c["in_off"], c["mult"], c["shift"])
    const = mve_2x1_const_rows(c["w"].shape, c["k"] > 256)  # 1x1: constant block-rows, the _const entry
    return mve_block2x1_positions(st, c["k"] > 256, c.get("in_flash", False),
                                  mve_block2x1_constants(params, out_c, c["out_off"]) if const else None)


def _decoded(c, helium: bool) -> int:
    """Scratch bytes a 2x1 case's kernel decodes its bitmaps into (as ops/conv.py plans them)."""
    return _positions(c, helium)[1]


def _program(cases, helium: bool) -> str:
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn.h"\n#include "tinyaot_nn_mve.h"\n',
             "void report(int i, int bad);\n"]
    out_size = max(c["exp"].size for c in cases) + 16
    scratch = max(8 * (-(-c["k"] // 4) * 4) + (_decoded(c, helium) if c["b2x1"] else 0) for c in cases) + 16
    parts.append(f"static int8_t out_buf[{out_size}];\nstatic int32_t scratch_buf[{scratch // 4}];\n")
    parts.append("static int bad_bytes(const int8_t *a, const int8_t *e, int n, int total)\n{\n    int bad = 0, i;\n"
                 "    for (i = 0; i < n; i++) bad += a[i] != e[i];\n"
                 f"    for (; i < total; i++) bad += a[i] != {SENTINEL};\n    return bad;\n}}\n")
    for i, c in enumerate(cases):
        p = f"c{i}_"
        out_c = c["w"].shape[0]
        w2 = c["w"].reshape(out_c, -1)
        wtype = "tinyaot_block_weights"
        if c["b2x1"] and not helium:  # as ops/compressed.py renders the 2x1 kernel
            bias, mult, shift, table = block_requant(c["bias"], w2, c["in_off"], c["mult"], c["shift"], c["out_off"])
            values, bitmap, decoded = block2x1_arrays(c["st"])
            assert block2x1_scratch_bytes(c["k"], decoded) <= 4 * c["k"] + decoded
            parts.append(_arr(p + "v", values, "int8_t") + _arr(p + "d", bitmap, "uint8_t"))
            wtype, table = "tinyaot_block2x1_weights", table
        elif helium and c["b2x1"]:
            params = mve_block_params(c["bias"], w2, c["in_off"], c["mult"], c["shift"])
            bias, mult, shift, table = params, [0], [0], 0
            st = mve_block2x1_storage(c["st"], c["w"].shape)  # the kernel's window order (kernel-column-major)
            values = mve_block2x1_values(st, c["k"] > 256)[0]
            positions, decoded = _positions(c, helium)
            parts.append(_arr(p + "v", values, "int8_t") + _arr(p + "d", positions, "uint8_t"))
            wtype, table = "tinyaot_block2x1_weights", 0
        elif helium:  # as ops/compressed.py renders the Helium variant
            params = mve_block_params(c["bias"], w2, c["in_off"], c["mult"], c["shift"])
            bias, mult, shift, table = params, [0], [0], 0
            parts.append(_arr(p + "v", mve_block_stream(c["st"]), "int8_t") + _arr(p + "d", [0], "uint8_t"))
        else:
            bias, mult, shift, table = block_requant(c["bias"], w2, c["in_off"], c["mult"], c["shift"], c["out_off"])
            parts.append(_arr(p + "v", c["st"].arrays["values"], "int8_t")
                         + _arr(p + "d", c["st"].arrays["deltas"], "uint8_t"))
        if not c["b2x1"]:
            parts.append(_arr(p + "n", c["st"].arrays["counts"], "uint16_t"))
        parts.append(_arr(p + "x", c["x"], "int8_t")
                     + _arr(p + "b", bias, "int32_t") + _arr(p + "m", mult, "int32_t")
                     + _arr(p + "s", shift, "int32_t") + _arr(p + "e", c["exp"], "int8_t"))
        if c["b2x1"]:  # flash: the values (each kernel's order) and the storage's bitmap, as many bytes as stored
            assert values.size + c["st"].arrays["bitmap"].size == c["st"].nbytes(c["w"])
            parts.append(f"static const {wtype} {p}w = {{{p}v, {p}d, {decoded}, {table}}};\n")
        else:
            parts.append(f"static const {wtype} {p}w = {{{p}v, {p}d, {p}n, {table}}};\n")
        suffix = ("2x1" if c["b2x1"] else "") + ("_mve" if helium else "") + \
            ("_long" if helium and c["b2x1"] and c["k"] > 256 else "") + \
            ("_const" if helium and c["b2x1"] and not decoded and mve_2x1_const_rows(c["w"].shape, c["k"] > 256)
             else "")
        body = [f"static int case_{i}(void)\n{{\n    int rc;\n",
                f"    const tinyaot_per_channel_quant_params q = {{{p}m, {p}s}};\n",
                "    const tinyaot_context ctx = {scratch_buf, (int32_t)sizeof scratch_buf};\n"]
        if c["conv"]:
            n, h, w, cin = c["x"].shape
            _, oh, ow, _ = c["exp"].shape
            g = c["geo"]
            body.append(f"    const tinyaot_conv_params prm = {{{c['in_off']}, {c['out_off']}, {{{g['stride'][0]}, "
                        f"{g['stride'][1]}}}, {{{g['pad'][0]}, {g['pad'][1]}}}, {{{g['dil'][0]}, {g['dil'][1]}}}, "
                        f"{{{c['act'][0]}, {c['act'][1]}}}}};\n"
                        f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {cin}}}, f_d = {{{out_c}, {c['w'].shape[1]}, "
                        f"{c['w'].shape[2]}, {cin}}}, b_d = {{1, 1, 1, {out_c}}}, o_d = {{{n}, {oh}, {ow}, "
                        f"{out_c}}};\n")
            call = f"tinyaot_convolve_s8_block{suffix}(&ctx, &prm, &q, &in_d, {p}x, &f_d, &{p}w, &b_d, {p}b, &o_d, " \
                   "out_buf)"
        else:
            rows, depth = c["x"].shape
            body.append(f"    const tinyaot_fc_params prm = {{{c['in_off']}, 0, {c['out_off']}, "
                        f"{{{c['act'][0]}, {c['act'][1]}}}}};\n"
                        f"    const tinyaot_dims in_d = {{{rows}, 1, 1, {depth}}}, f_d = {{{depth}, 1, 1, {out_c}}}, "
                        f"b_d = {{1, 1, 1, {out_c}}}, o_d = {{{rows}, 1, 1, {out_c}}};\n")
            call = f"tinyaot_fully_connected_s8_block{suffix}(&ctx, &prm, &q, 1, &in_d, {p}x, &f_d, &{p}w, &b_d, " \
                   f"{p}b, &o_d, out_buf)"
        if c["b2x1"]:  # the kernel's own bound (every position kept) covers what the compiler plans
            planned = (0 if helium and c["w"].shape[1:3] == (1, 1) and c["x"].shape[3] % 4 == 0 and
                       c["geo"]["pad"] == (0, 0) else (2 * (-(-c["k"] // 4) * 4) if helium else 4 * c["k"]))
            body.append(f"    if (tinyaot_convolve_s8_block{suffix}_get_buffer_size(&in_d, &f_d) < "
                        f"{planned + decoded}) return 2000;\n")
        body.append(f"    memset(out_buf, {SENTINEL}, sizeof out_buf);\n"
                    "    __asm__ volatile(\"\" : : \"r\"(out_buf) : \"memory\");\n"
                    f"    rc = {call};\n    if (rc != 0) return 1000;\n"
                    f"    return bad_bytes(out_buf, {p}e, {c['exp'].size}, (int)sizeof out_buf);\n}}\n")
        parts.append("".join(body))
    parts.append("int run_cases(void)\n{\n    int fails = 0, bad;\n")
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


def test_cases_cover_the_kernels_paths():
    ks = {c["k"] for c in CASES}
    assert any(k % 4 for k in ks) and max(ks) > 1020  # partial groups; stored zero blocks bridging gaps
    assert any(c["w"].shape[0] % 4 for c in CASES)
    assert any(c["st"].arrays["values"].size == 0 for c in CASES if not c["b2x1"])  # nothing stored
    assert any(c["st"].arrays["values"].size == 0 for c in CASES if c["b2x1"])
    # in flash (the last two cases): a constant block-row (pairs 0, 1 empty), pair 2's two positions and pair 3's one
    # with its filler, a constant row again, then the partial row's two empty pairs as they are
    flash = [_positions({**c, "in_flash": True}, True)[0] for c in CASES[-2:]]
    assert flash[0][0] == flash[0][13] == flash[1][0] == MVE_2X1_CONST_ROW
    assert flash[0][5:13].tolist() == [2, 0, 15, 0, 2, 1, 1, 0] and flash[0][18:22].tolist() == [0] * 4
    outs = np.concatenate([c["exp"].ravel() for c in CASES])
    assert (outs == -128).any() and (outs == 127).any() and (outs == -20).any() and (outs == 90).any()


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
@pytest.mark.parametrize("helium", [False, True], ids=["dsp", "helium"])
def test_portable_c_matches_reference_on_host(tmp_path, helium):
    (tmp_path / "cases.c").write_text(_program(HELIUM_CASES if helium else CASES, helium))
    (tmp_path / "main.c").write_text(HOST_MAIN)
    exe = tmp_path / "cases"
    files = MVE_FILES if helium else DSP_FILES
    cmd = [HOST_CC, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", f"-I{KERNELS}", str(tmp_path / "cases.c"), str(tmp_path / "main.c"),
           *[str(KERNELS / f) for f in files], "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "ALL PASSED" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


@needs_arm
@pytest.mark.parametrize("board, helium, opt", [("mps2-an386", False, "-O2"), ("mps2-an385", False, "-O2"),
                                                ("mps3-an547", True, "-O2"), ("mps3-an547", True, "-O0")])
def test_kernels_match_reference_under_qemu(tmp_path, board, helium, opt):
    (tmp_path / "cases.c").write_text(_program(HELIUM_CASES if helium else CASES, helium))
    res = run_program(tmp_path, ARM_MAIN, [*(MVE_FILES if helium else DSP_FILES), tmp_path / "cases.c"],
                      board_name=board, extra_cflags=[opt])
    out = res.stdout + res.stderr
    assert res.exit_code == 0 and "ALL PASSED" in out, out[-3000:]


def test_block2x1_storage_is_bitmaps_and_pairs_of_weights():
    """compress/storage.py's 2x1 form, byte for byte: per channel pair its K-bit bitmap (LSB first), then per kept
    position its two weights, an odd count followed by one zero block; the C arrays are exactly those bytes."""
    w = np.zeros((3, 10), np.int8)  # pairs (0, 1) and (2, -)
    w[0, [1, 9]], w[1, [1, 4]], w[2, [0]] = [5, -6], [7, 8], [9]
    st = encode_sparse_block(w, block=(2, 1))
    assert st.meta == {"depthwise": False, "block": [2, 1], "row_bytes": 2}
    assert st.arrays["bitmap"].tolist() == [0b00010010, 0b10, 0b1, 0]
    assert st.arrays["values"].tolist() == [5, 7, 0, 8, -6, 0, 0, 0, 9, 0, 0, 0]
    assert st.nbytes(w) == 4 + 12 == block2x1_arrays(st)[0].size + block2x1_arrays(st)[1].size
    assert np.array_equal(decode(Tensor("w", w.shape, "int8", w, None, st)), w)
    values, decoded = mve_block2x1_values(st)  # Helium: the same bytes reordered (first group of m, channel by channel)
    assert sorted(values.tolist()) == sorted(st.arrays["values"].tolist()) and decoded == 2 * 2 + 4 + 2 + 20
    assert values.tolist() == [5, 0, -6, 0, 7, 8, 0, 0, 9, 0, 0, 0]
    # the stream the Helium kernel decodes those bitmaps into (pair 0: m = 4 with its filler, F = 0; pair 1: 0, 0
    # twice; 16 zero bytes), decoded - 4 bytes: more than the 4 bitmap bytes, so the bitmaps stay in flash
    assert mve_block2x1_stream(st).tolist() == [4, 1, 4, 9, 9, 0, 2, 0, 0, 0] + [0] * 16
    assert mve_block2x1_positions(st)[1] == decoded and mve_block2x1_positions(st, in_flash=True)[1] == 0
    w = np.zeros((2, 300), np.int8)  # segmented (two segments): pair 0 keeps 5 | 260, 299; a missing pair 1
    w[0, [5, 260]], w[1, [299]] = 3, -4
    st = encode_sparse_block(w, block=(2, 1))
    assert mve_block2x1_stream(st, True).tolist() == [1, 5, 0, 0, 2, 4, 43, 0, 2, 0, 0, 0, 0, 0, 2] + [0] * 16
    assert mve_block2x1_stream(st, True).size == mve_block2x1_values(st, True)[1] - 4
    w = np.zeros((4, 256), np.int8)  # 1 of 256 positions kept: 2 + 2 stream bytes a pair against 32 of bitmap
    w[:, 7] = 1
    st = encode_sparse_block(w, block=(2, 1))
    stream, decoded = mve_block2x1_positions(st)
    assert decoded == 0 and stream.tolist() == [2, 7, 7, 0] * 2 + [0] * 16 and stream.size < st.arrays["bitmap"].size
