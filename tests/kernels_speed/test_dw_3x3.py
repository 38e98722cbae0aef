"""The dw3x3 depthwise variant (templates/kernels/tinyaot_depthwise_conv_s8_3x3.c, tinyaot/ops/depthwise3x3.py):
bit-exact against the numpy reference, offered only where it is exact, and chosen on DSP and plain cores.

(a) host C (plain path) == depthwise_conv2d_s8 on random layers and on the extremes: every input and weight -128 or
    127, input offsets -127 and 128, output offsets -128 and 127, channel counts 1..13 (tails), strides 1..3,
    padding 0..2 on every side, tiny images (windows wholly in the padding), clamped and full activation ranges;
    both table kinds: plain, and folded (variant dw3x3_fold: interior pixels from bias + offset * sum of weights);
(b) the same kernel on Cortex-M4 (DSP path: SXTAB16/SMLABB, SMMULR, SSAT) and Cortex-M3 (plain C, both tables)
    under QEMU;
(c) the variant is listed with a cost on boards, never for the generic target, 5x5 filters, dilation or channel
    multipliers; channels outside its short requantization are marked per group; a tiny model deployed on
    mps2-an386 runs it (and the fast residual add) and verifies.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np
import pytest

from tinyaot.core import fixedpoint as fp
from tinyaot.ops import depthwise3x3 as d3
from tinyaot.ops.conv import depthwise_conv2d_s8
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.host import compile_shared

KERNELS = TEMPLATES / "kernels"
SOURCE = KERNELS / "tinyaot_depthwise_conv_s8_3x3.c"


def _case(rng, extreme: bool, small: bool = False, folded: bool = False) -> dict | None:
    n = int(rng.integers(1, 3))
    h, w = (int(v) for v in rng.integers(1, 5 if small else 9, 2))
    c = int(rng.integers(1, 14))
    sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    pt, pl, pb, pr = (int(v) for v in rng.integers(0, 3, 4))
    oh, ow = (h + pt + pb - 3) // sh + 1, (w + pl + pr - 3) // sw + 1
    if oh <= 0 or ow <= 0:
        return None
    draw = (lambda shape: rng.choice(np.array([-128, 127]), shape)) if extreme else \
        (lambda shape: rng.integers(-128, 128, shape))
    x = draw((n, h, w, c)).astype(np.int8)
    wt = draw((1, 3, 3, c)).astype(np.int8)
    off = int(rng.choice([-127, 128, int(rng.integers(-127, 129))]))
    ooff = int(rng.choice([-128, 127, int(rng.integers(-128, 128))]))
    bias = rng.integers(-2**20, 2**20, c).astype(np.int32)
    scales = rng.uniform(1e-5, 0.4, c)
    if rng.random() < 0.3:  # a channel outside the short requantization: shift 0, a left shift, a huge bias, or
        k = int(rng.integers(0, c))  # multiplier 0 (the output is its zero point: short form as if e were 1)
        kind = int(rng.integers(0, 4))
        if kind == 3:
            scales[k] = 0.0
            bias[k] = int(rng.choice([-1, 1])) * int(rng.integers(2**30, 2**31 - 2**25))
            wt[..., k] = rng.integers(-3, 4, 9).reshape(1, 3, 3)
        elif kind == 2:
            bias[k] = int(rng.choice([-1, 1])) * int(rng.integers(2**30, 2**31 - 2**25))
            wt[..., k] = rng.integers(-3, 4, 9).reshape(1, 3, 3)
        else:
            scales[k] = float(rng.uniform(0.5, 0.99)) if kind == 0 else float(rng.uniform(1.0, 40.0))
    m, s = fp.quantize_multiplier_array(scales)
    lo, hi = (-128, 127) if rng.random() < 0.6 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
    assert d3.applicable(wt, bias, s, off, (3, 3), (1, 1), 1)
    bound = d3.accumulator_bound(wt, bias, off)
    short, left = d3.short_form(bound, s, m), d3.left_form(bound, s)
    exp = depthwise_conv2d_s8(x, wt, bias, m, s, input_offset=off, output_offset=ooff, stride_hw=(sh, sw),
                              pad_top_left=(pt, pl), output_hw=(oh, ow), act_min=lo, act_max=hi)
    fb = bias.astype(np.int64) + off * wt.astype(np.int64).reshape(9, c).sum(axis=0) if folded else None
    return dict(x=x, w=d3.arrange_weights(wt).astype(np.int8), q=d3.channel_table(bias, m, s, ooff, c, fb, short, left),
                exp=exp, dims=[n, h, w, c, oh, ow, sh, sw, pt, pl, off, ooff, lo, hi, int(folded)], short=short)


def cases(count: int, seed: int, folded=(False, True)) -> list[dict]:
    """Layers alternating between the plain and the folded table (`folded`: the kinds to draw from)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        c = _case(rng, extreme=len(out) % 3 == 0, small=len(out) % 5 == 0, folded=folded[len(out) % len(folded)])
        if c is not None:
            out.append(c)
    return out


@lru_cache(maxsize=1)
def _host_kernel():
    lib = ctypes.CDLL(str(compile_shared([SOURCE], [KERNELS], extra_flags=["-Werror"])))
    f = lib.tinyaot_depthwise_conv_s8_3x3
    f.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int32] * 15
    f.restype = ctypes.c_int
    return f


def test_host_kernel_matches_reference():
    f = _host_kernel()
    for i, c in enumerate(cases(500, seed=1)):
        out = np.full(c["exp"].shape, 99, np.int8)
        x = np.ascontiguousarray(c["x"])
        assert f(x.ctypes.data, c["w"].ctypes.data, c["q"].ctypes.data, out.ctypes.data, *c["dims"]) == 0
        assert np.array_equal(out, c["exp"]), f"case {i} {c['dims']}: {np.argwhere(out != c['exp'])[:4]}"


def _arr(ctype: str, name: str, values) -> str:
    v = np.asarray(values).reshape(-1)
    return f"static const {ctype} {name}[{max(1, v.size)}] = {{{', '.join(str(int(t)) for t in v) or '0'}}};\n"


def firmware(cs: list[dict]) -> str:
    parts = ['#include <string.h>\n#include "tinyaot_nn.h"\n', "void harness_puts(const char *s);\n",
             "int tinyaot_depthwise_conv_s8_3x3(const int8_t *, const int8_t *, const int32_t *, int8_t *, int32_t,"
             " int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t,"
             " int32_t, int32_t, int32_t);\n", f"static int8_t out_buf[{max(c['exp'].size for c in cs)}];\n"]
    body = ["int main(void)\n{\n    int bad = 0;\n    int i;\n"]
    for k, c in enumerate(cs):
        parts += [_arr("int8_t", f"x{k}", c["x"]), _arr("int8_t", f"w{k}", c["w"]), _arr("int32_t", f"q{k}", c["q"]),
                  _arr("int8_t", f"e{k}", c["exp"])]
        body.append(f"    memset(out_buf, 99, sizeof out_buf);\n"
                    f"    bad += tinyaot_depthwise_conv_s8_3x3(x{k}, w{k}, q{k}, out_buf, "
                    f"{', '.join(str(int(d)) for d in c['dims'])}) != 0;\n"
                    f"    for (i = 0; i < {c['exp'].size}; i++) bad += out_buf[i] != e{k}[i];\n")
    body.append('    harness_puts(bad ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return bad != 0;\n}\n')
    return "".join(parts + body)


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m3"])
def test_kernel_under_qemu_matches_reference(tmp_path, cpu):
    from tests.ops.conftest import ARM_GCC, QEMU, ArmRunner

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    runner = ArmRunner(tmp_path)
    # the folded tables are made for cores without DSP only (the DSP build refuses them)
    cs = [c for c in cases(60, seed=7, folded=(False,) if cpu == "cortex-m4" else (False, True))
          if c["x"].size <= 1200]
    elf = runner.build(cpu, "dw3x3", firmware(cs), [SOURCE], [KERNELS], ("-Wall", "-Wextra", "-Werror"))
    rc, out = runner.run(cpu, elf)
    assert rc == 0 and "ALL PASSED" in out, f"{cpu}: {len(cs)} cases, exit {rc}:\n{out[-2000:]}"


def test_offered_for_the_shape_class_short_form_per_channel():
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (1, 3, 3, 8)).astype(np.int8)
    bias = rng.integers(-1000, 1000, 8)
    shift = np.full(8, -9)
    assert d3.applicable(w, bias, shift, -128, (3, 3), (1, 1), 1)
    assert not d3.applicable(w, bias, shift, -128, (5, 5), (1, 1), 1)
    assert not d3.applicable(w, bias, shift, -128, (3, 3), (2, 2), 1)
    assert not d3.applicable(w, bias, shift, -128, (3, 3), (1, 1), 2)
    bound = d3.accumulator_bound(w, bias, -128)
    assert d3.short_form(bound, shift).all()
    assert not d3.short_form(bound, np.zeros(8)).any()  # e = 0: no rounding half
    assert not d3.short_form(bound, np.full(8, 2)).any()  # a left shift
    assert not d3.short_form(bound + 2**30, shift).any()  # 2*acc would leave int32
    assert not d3.short_form(bound, np.full(8, -24)).any()  # 128 * 2^e leaves int32
    # a group with such a channel is marked slow (bit 31) and says per channel how: e, a shift s >= 0 whose left
    # shift cannot saturate (radd = output offset), or general (radd = the shift)
    m = np.full(8, 1 << 30)
    sh = np.array([-9, -9, -9, -9, -9, 0, 3, 25])
    t = d3.channel_table(bias, m, sh, 5, 8, short=d3.short_form(bound, sh), left=d3.left_form(bound, sh))
    t = t.reshape(2, 13)
    assert t[0, 12] > 0 and t[1, 12] < 0 and list(t[1, 9:12]) == [5, 5, 25]
    assert [(int(t[1, 12]) >> (8 * j)) & 0x7F for j in range(4)] == [9, d3.MODE_LEFT, d3.MODE_LEFT + 3,
                                                                        d3.MODE_GENERAL]


def test_cases_reach_both_requantizations():
    cs = cases(60, seed=7)
    assert any(not c["short"].all() for c in cs) and any(c["short"].all() for c in cs)


def test_deployed_on_dsp_board_runs_variants(tmp_path):
    """A pointwise conv, a depthwise 3x3 (12 channels: three groups of four) and a residual Add, deployed on
    mps2-an386: the dw3x3 and the fast add variants are chosen (tests/kernels_speed/test_add_fast.py) and the
    firmware verifies under QEMU (== the numpy reference)."""
    from onnx import helper

    from tinyaot.ops.add import FAST
    from tests.op_models import calibration, const, deploy_verified, save_model

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["t"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Conv", ["r", "w1", "b1"], ["u"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=12),
             helper.make_node("Add", ["u", "r"], ["y"])]
    inits = [const("w0", rng.standard_normal((12, 3, 1, 1)) * 0.5), const("b0", rng.standard_normal(12) * 0.1),
             const("w1", rng.standard_normal((12, 1, 3, 3)) * 0.5), const("b1", rng.standard_normal(12) * 0.1)]
    model = save_model(tmp_path / "dw.onnx", nodes, (1, 3, 7, 6), (1, 12, 7, 6), inits)
    report = deploy_verified(model, calibration(tmp_path / "cal.npz", (1, 3, 7, 6)), tmp_path / "out")
    variants = {layer["op"]: layer.get("variant") for layer in report["layers"] if layer["op"] in ("Conv", "Add")
                and layer.get("variant") != "fold"}
    assert variants == {"Conv": d3.DW3X3, "Add": FAST}, report["layers"]


def test_variant_per_core():
    """dw3x3 on DSP cores, dw3x3_fold on plain cores, nothing for the generic target or --optimize size."""
    from tinyaot.boards import load_board
    from tinyaot.ir import Graph, Node
    from tinyaot.ir.graph import Tensor
    from tinyaot.ops.conv import Conv

    rng = np.random.default_rng(2)
    tensors = {"x": Tensor("x", (1, 6, 6, 8), "int8"), "y": Tensor("y", (1, 6, 6, 8), "int8"),
               "w": Tensor("w", (1, 3, 3, 8), "int8", rng.integers(-128, 128, (1, 3, 3, 8)).astype(np.int8)),
               "b": Tensor("b", (8,), "int32", rng.integers(-999, 999, 8).astype(np.int32))}
    node = Node("Conv", "dw", ["x", "w", "b"], ["y"],
                {"depthwise": True, "kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1),
                 "dilations": (1, 1), "output_shift": np.full(8, -8), "input_offset": 5})
    g = Graph("g", tensors, [node], ["x"], ["y"])
    names = {b: [v.name for v in Conv().variants(node, g, load_board(b).target())]
             for b in ("mps2-an386", "mps2-an385")}
    assert names == {"mps2-an386": ["generic", d3.DW3X3], "mps2-an385": ["generic", d3.DW3X3_FOLD]}
    from tinyaot.core.target import GENERIC
    assert [v.name for v in Conv().variants(node, g, GENERIC)] == ["generic"]
