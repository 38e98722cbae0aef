"""tinyaot_depthwise_conv_s8_mve (Helium depthwise, input offset folded into the bias) == the numpy reference
(ops/conv.py depthwise_conv2d_s8; the table built by ops/mve_depthwise.py dw_table) bit for bit under QEMU on
mps3-an547, over small layers at the extremes: every channel count 1..17 and a few wider (16-channel blocks,
8-channel blocks, predicated 4-lane tails), inputs and weights at -128/127, input offsets -128, -127, 0, 127, 128,
output offsets -128/127, padding on each side alone and on all sides, strides 1 and 2, dilation 2, kernels 1x1 to
5x5, windows partly or wholly in the padding, two batches, per-channel shifts of both signs, both
requantizations; CMSIS-NN's depthwise vectors with channel multiplier 1 (tests/fixtures); each case also in place
(the output d bytes before its input, d the planner's offset); the table layout (C twin of table_slots); and the
same file's plain C path on the host under ASan/UBSan. Bytes around the output are checked untouched."""
from __future__ import annotations

import numpy as np

from tinyaot.core import fixedpoint as fp
from tinyaot.ops.common import fold_input_offset
from tinyaot.ops.conv import conv_inplace_offset, depthwise_conv2d_s8
from tinyaot.ops.mve_depthwise import dw_table, table_slots

from mve.mve_harness import c_array, needs_arm, run_program
from mve.mve_host import run_host
from ops.test_cmsis_nn_vectors import _arrays, _cases

GUARD = 16  # bytes either side of each output, filled with a sentinel


def _out(size, k, s, d, lo, hi):
    return (size + lo + hi - ((k - 1) * d + 1)) // s + 1


def make_case(rng, c, kh=3, kw=3, h=None, w=None, stride=(1, 1), dil=(1, 1), pads=(1, 1, 1, 1), n=1,
              in_off=None, extreme=False, max_scale=4.0, small=False):
    h = h or int(rng.integers(kh, kh + 4))
    w = w or int(rng.integers(kw, kw + 4))
    in_off = int(rng.integers(-128, 129)) if in_off is None else in_off
    if extreme:  # every value at an end of int8
        x = rng.choice(np.array([-128, 127], np.int8), (n, h, w, c))
        wt = rng.choice(np.array([-128, 127], np.int8), (1, kh, kw, c))
    else:
        x = rng.integers(-128, 128, (n, h, w, c)).astype(np.int8)
        wt = rng.integers(-128, 128, (1, kh, kw, c)).astype(np.int8)
    if small:  # sums within a few dozen: outputs of scales near 1 stay unclamped, so each rounding shows
        x = rng.integers(-3, 4, (n, h, w, c)).astype(np.int8)
        wt = rng.integers(-3, 4, (1, kh, kw, c)).astype(np.int8)
    bias = rng.integers(-40000, 40000, c).astype(np.int32) if not small else rng.integers(-20, 21, c).astype(np.int32)
    # effective scales spread over two decades around the usual ~1/1000, a few above one (positive shifts)
    scale = np.exp(rng.uniform(np.log(2e-5), np.log(max_scale), c))
    mult, shift = fp.quantize_multiplier_array(scale)
    oh = _out(h, kh, stride[0], dil[0], pads[0], pads[2])
    ow = _out(w, kw, stride[1], dil[1], pads[1], pads[3])
    out_off = int(rng.choice([-128, 127, int(rng.integers(-128, 128))]))
    act = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
    want = depthwise_conv2d_s8(x, wt, bias, mult, shift, input_offset=in_off, output_offset=out_off,
                               stride_hw=stride, pad_top_left=pads[:2], dilation_hw=dil, output_hw=(oh, ow),
                               act_min=act[0], act_max=act[1])
    return dict(x=x, w=wt, fb=dw_table(fold_input_offset(bias, wt.reshape(-1, c).T, in_off), bias, mult, shift),
                mult=mult, shift=shift, in_off=in_off,
                out_off=out_off, act=act, stride=stride, dil=dil, pads=pads, want=want)


def cases() -> list[dict]:
    rng = np.random.default_rng(55)
    out = []
    for c in range(1, 18):  # every tail 1..15 after 0 or 1 sixteen-channel blocks; offsets at the ends
        out.append(make_case(rng, c, in_off=[-128, 128, 127, -127, 0][c % 5], extreme=c % 3 == 0,
                             max_scale=0.4 if c % 2 else 4.0))
    for pads in [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (2, 2, 2, 2), (0, 0, 0, 0), (1, 2, 0, 1)]:
        out.append(make_case(rng, int(rng.choice([5, 16, 20])), pads=pads, in_off=128, extreme=True))
    for stride in [(2, 2), (1, 2), (2, 1)]:
        out.append(make_case(rng, int(rng.choice([7, 16, 35])), h=7, w=8, stride=stride, pads=(1, 1, 1, 1)))
    out.append(make_case(rng, 19, kh=3, kw=3, h=7, w=7, dil=(2, 2), pads=(2, 2, 2, 2), in_off=-128))
    out.append(make_case(rng, 32, kh=1, kw=1, h=3, w=4, pads=(0, 0, 0, 0), in_off=127))
    out.append(make_case(rng, 13, kh=5, kw=3, h=4, w=5, pads=(2, 1, 2, 1)))
    out.append(make_case(rng, 6, kh=3, kw=3, h=2, w=2, pads=(3, 3, 3, 3)))  # windows wholly in the padding
    out.append(make_case(rng, 48, kh=3, kw=3, h=5, w=4, n=2, stride=(2, 2), pads=(1, 1, 1, 1), in_off=-127))
    out.append(make_case(rng, 64, kh=3, kw=3, h=6, w=5, pads=(1, 1, 1, 1)))  # kws_dscnn's layer, smaller
    for c in (9, 16, 24):  # shifts 0 and negative mixed, clamp all of int8: the general form's unshifted lanes
        case = make_case(rng, c, h=5, w=6, pads=(1, 1, 1, 1), max_scale=0.99, small=True, in_off=2)
        while case["act"] != (-128, 127) or not (case["shift"] == 0).any() or (case["shift"] > 0).any():
            case = make_case(rng, c, h=5, w=6, pads=(1, 1, 1, 1), max_scale=0.99, small=True, in_off=2)
        out.append(case)
    # CMSIS-NN's depthwise vectors with channel multiplier 1 (tests/fixtures), their parameters as given
    for v in _cases(("depthwise_conv2d",)):
        p, arr = v["params"], _arrays(v)
        if p["ch_mult"] != 1:
            continue
        c = arr["input"].shape[3]
        mult = np.broadcast_to(arr["output_mult"], (c,))
        shift = np.broadcast_to(arr["output_shift"], (c,))
        fb = fold_input_offset(arr["bias"], arr["weights"].reshape(-1, c).T, p["input_offset"])
        out.append(dict(x=arr["input"], w=arr["weights"], fb=dw_table(fb, arr["bias"], mult, shift), mult=mult,
                        shift=shift, in_off=p["input_offset"], out_off=p["output_offset"],
                        act=(p["activation_min"], p["activation_max"]), stride=tuple(p["stride_hw"]),
                        dil=tuple(p["dilation_hw"]), pads=(*p["pad_top_left"], *p["pad_bottom_right"]),
                        want=arr["expected"]))
    return out


def program(cs) -> str:
    # in place: the output starting d bytes before the input, d the planner's offset (Conv.inplace_offset)
    for c in cs:
        c["d"] = conv_inplace_offset(c["x"].shape, c["want"].shape, c["stride"], c["pads"])
    arena = max(max(c["d"] + c["x"].size, c["want"].size) for c in cs)
    parts = ['#include <string.h>\n#include "tinyaot_hal.h"\n#include "tinyaot_nn.h"\n',
             f"static int8_t out_buf[{max(c['want'].size for c in cs) + 2 * GUARD}];\n",
             f"static int8_t arena[{arena}];\n"]
    calls = []
    for i, c in enumerate(cs):
        p = f"c{i}_"
        n, h, w, ch = c["x"].shape
        _, kh, kw, _ = c["w"].shape
        _, oh, ow, _ = c["want"].shape
        parts += [c_array(p + "x", c["x"], "int8_t"), c_array(p + "w", c["w"], "int8_t"),
                  c_array(p + "b", c["fb"], "int32_t"), c_array(p + "want", c["want"], "int8_t")]
        parts.append(
            f"static int case_{i}(void)\n{{\n"
            f"    static const tinyaot_dw_conv_params prm = {{.input_offset = {c['in_off']}, "
            f".output_offset = {c['out_off']}, .stride = {{{c['stride'][0]}, {c['stride'][1]}}}, "
            f".padding = {{{c['pads'][0]}, {c['pads'][1]}}}, .dilation = {{{c['dil'][0]}, {c['dil'][1]}}}, "
            f".activation = {{{c['act'][0]}, {c['act'][1]}}}, .ch_mult = 1}};\n"
            f"    static const tinyaot_per_channel_quant_params q = {{NULL, NULL}};\n"
            f"    static const tinyaot_dims in_d = {{{n}, {h}, {w}, {ch}}}, f_d = {{1, {kh}, {kw}, {ch}}}, "
            f"b_d = {{1, 1, 1, {ch}}}, o_d = {{{n}, {oh}, {ow}, {ch}}};\n"
            f"    int i, bad = 0;\n    memset(out_buf, 0x5A, sizeof out_buf);\n"
            f"    __asm__ volatile(\"\" : : \"r\"(out_buf) : \"memory\");\n"
            f"    if (tinyaot_depthwise_conv_s8_mve(NULL, &prm, &q, &in_d, {p}x, &f_d, {p}w, &b_d, {p}b, &o_d, "
            f"out_buf + {GUARD}) != 0) return 1000;\n"
            f"    for (i = 0; i < {c['want'].size}; i++) bad += out_buf[{GUARD} + i] != {p}want[i];\n"
            f"    for (i = 0; i < {GUARD}; i++) bad += (out_buf[i] != 0x5A) + "
            f"(out_buf[{GUARD + c['want'].size} + i] != 0x5A);\n"
            f"    memcpy(arena + {c['d']}, {p}x, {c['x'].size});\n"
            f"    __asm__ volatile(\"\" : : \"r\"(arena) : \"memory\");\n"
            f"    if (tinyaot_depthwise_conv_s8_mve(NULL, &prm, &q, &in_d, arena + {c['d']}, &f_d, {p}w, &b_d, {p}b, "
            f"&o_d, arena) != 0) return 1000;\n"
            f"    for (i = 0; i < {c['want'].size}; i++) bad += arena[i] != {p}want[i];\n"
            f"    return bad;\n}}\n")
        calls.append(f"    r = case_{i}(); if (r) {{ tinyaot_hal_puts(\"FAIL case \"); "
                     f"tinyaot_hal_put_uint({i}); tinyaot_hal_puts(\"\\n\"); fails++; }}\n")
    # the table layout: C's slot of every channel == ops/mve_depthwise.py table_slots, for every count 1..40
    slots = [(ch, c, int(table_slots(ch)[c])) for ch in range(1, 41) for c in range(ch)]
    parts.append(c_array("slot_tab", np.array(slots), "int32_t"))
    calls.append(f"    for (r = 0; r < {len(slots)}; r++) if (tinyaot_depthwise_conv_s8_mve_table_slot("
                 "slot_tab[3 * r + 1], slot_tab[3 * r]) != slot_tab[3 * r + 2]) { "
                 'tinyaot_hal_puts("FAIL slot\\n"); fails++; break; }\n')
    parts.append("int main(void)\n{\n    int fails = 0, r;\n" + "".join(calls) +
                 '    tinyaot_hal_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


@needs_arm
def test_mve_depthwise_matches_reference_under_qemu(tmp_path):
    cs = cases()
    assert {c["x"].shape[3] % 16 for c in cs} >= set(range(1, 16)) | {0}
    assert any((c["shift"] > 0).any() for c in cs) and {-128, 128, 127} <= {c["in_off"] for c in cs}
    # both requantizations run: the shorter one (every shift negative, clamp all of int8) and the general one,
    # also for layers whose only non-negative shifts are 0 (small sums, so each rounding shows)
    short = [c["act"] == (-128, 127) and (c["shift"] < 0).all() for c in cs]
    assert 5 <= sum(short) <= len(cs) - 5, sum(short)
    assert sum(1 for c in cs if (c["shift"] == 0).any() and (c["shift"] <= 0).all()) >= 3
    res = run_program(tmp_path, program(cs), ["tinyaot_depthwise_conv_s8_mve.c"])
    assert res.exit_code == 0 and "ALL PASSED" in res.stderr, (res.exit_code, res.stderr[-2000:])


def test_plain_c_path_matches_reference_on_the_host_under_sanitizers(tmp_path):
    """The file's fallback for cores without MVE (what evaluate's host build of an MVE deploy runs)."""
    res = run_host(tmp_path, program(cases()), ["tinyaot_depthwise_conv_s8_mve.c"])
    assert res.returncode == 0 and "ALL PASSED" in res.stderr, res.stderr[-2000:]
