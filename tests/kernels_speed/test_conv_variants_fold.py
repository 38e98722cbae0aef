"""The "fold" kernels (templates/kernels/tinyaot_convolve_s8_fold.c, tinyaot_fully_connected_s8_fold.c): input
offset folded into the bias at compile time, weights rearranged for the register block (ops/fully_connected.py
interleave_quads), requantization by the table of ops/common.py fold_requant_table (tinyaot_fold_support.h). Each
must equal the numpy reference computed on the original weights, bias, multipliers and shifts, bit for bit:
  (a) host C (the plain-C path) over random small layers: 1x1 and k x k windows, in_ch a multiple of 4 (windows read
      in place, clipped ones tap by tap) and 1, 2, 3, 5, 6, 7 (the int16 column), strides 1 and 2, dilation, padding
      on every side, two batches, odd output-channel counts, group tails; fully connected with depth and channel
      tails, per-tensor and per-channel; plus the extremes: all inputs -128 or 127, input offsets -127 and +128
      (zero points 127 and -128), weights all -127 or 127, act ranges clipped;
  (b) the same C under QEMU on Cortex-M4 at -O2 (the inline-assembly 4x2 loop), on Cortex-M4 with
      TINYAOT_FOLD_NO_ASM (its C twin with SMLAD) and on Cortex-M3 (plain C);
  (c) the variant choice: offered only where valid (not depthwise, one group, dense weights, filter offset 0, a real
      board), "generic" always listed, and a folded bias equals bias + input_offset * sum(w).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from kernel_structs import VP, Activation, Context, ConvParams, Dims, FcParams, Tile, i32
from tinyaot.core import fixedpoint as fp
from tinyaot.ops.common import fold_input_offset, fold_requant_table
from tinyaot.ops.conv import conv2d_s8, fold_scratch_bytes
from tinyaot.ops.fully_connected import fully_connected_s8, interleave_fc, interleave_quads
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.host import compile_shared

KERNELS = TEMPLATES / "kernels"
SOURCES = [KERNELS / "tinyaot_convolve_s8_fold.c", KERNELS / "tinyaot_fully_connected_s8_fold.c"]


class Quant(ctypes.Structure):
    _fields_ = [("multiplier", VP), ("shift", VP)]


def _quant(rng, n):
    """Right shifts 1 .. 22 (the fold variants are offered only with right shifts that keep the table exact)."""
    scales = rng.uniform(2e-5, 2e-2, n)
    scales[rng.random(n) < 0.15] = rng.uniform(0.26, 0.49)  # shift -1 (e = 1)
    scales[rng.random(n) < 0.1] = rng.uniform(1e-7, 2e-7)  # e = 22
    return fp.quantize_multiplier_array(scales)


def _table(c):
    """(folded bias, {mult, radd} pairs, e) as the compiler passes them."""
    t = fold_requant_table(c["bias"], c["w"], c["p"]["input_offset"], c["mult"], c["shift"],
                           c["p"]["output_offset"])
    assert t is not None
    return t


def _out(size, k, s, d, lo, hi):
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


def _dead_channel(rng, wt, bias, m, s):
    """Now and then a dead filter as per-channel quantization leaves it: all-zero weights, a bias near 2^31 and any
    shift (a constant output; see ops/common.py fold_requant_table)."""
    if rng.random() < 0.35 and m.size == wt.shape[0]:
        c = int(rng.integers(0, wt.shape[0]))
        wt[c] = 0
        bias[c] = int(rng.choice([-1, 1])) * 2113929036
        m[c], s[c] = (0, 0) if rng.random() < 0.3 else (int(rng.integers(2**30, 2**31 - 1)), -31)


def conv_case(rng, cin, k, extreme=None):
    """A random conv layer with in_ch `cin` and window `k` (kh, kw), its reference output."""
    while True:
        kh, kw = k
        n = int(rng.integers(1, 3))
        h, w = int(rng.integers(1, 8)) + kh - 1, int(rng.integers(1, 8)) + kw - 1
        sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        dh, dw = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if rng.random() < 0.25 else (1, 1)
        pads = [int(rng.integers(0, 3)) for _ in range(4)] if kh * kw > 1 or rng.random() < 0.3 else [0] * 4
        oh, ow = _out(h, kh, sh, dh, pads[0], pads[2]), _out(w, kw, sw, dw, pads[1], pads[3])
        if oh >= 1 and ow >= 1:
            break
    cout = int(rng.integers(1, 12))
    x = rng.integers(-128, 128, (n, h, w, cin)).astype(np.int8)
    wt = rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8)
    in_off = int(rng.integers(-127, 129))
    if extreme is not None:  # every input at one end, offset and weights at the end that maximises |acc|
        xv, in_off, wv = extreme
        x[:] = xv
        wt[:] = wv
    bias = rng.integers(-20000, 20000, cout).astype(np.int32)
    m, s = _quant(rng, cout)
    _dead_channel(rng, wt, bias, m, s)
    lo = int(rng.integers(-128, 0)) if rng.random() < 0.3 else -128
    hi = int(rng.integers(lo + 1, 128)) if rng.random() < 0.3 else 127
    p = dict(input_offset=in_off, output_offset=int(rng.integers(-128, 128)), stride_hw=(sh, sw),
             pad_top_left=(pads[0], pads[1]), dilation_hw=(dh, dw), output_hw=(oh, ow), act_min=lo, act_max=hi)
    ref = conv2d_s8(x, wt, bias, m, s, **p)
    return dict(x=x, w=wt, bias=bias, mult=m, shift=s, p=p, expected=ref)


def fc_case(rng, depth, out_c, extreme=None):
    b = int(rng.integers(1, 3))
    x = rng.integers(-128, 128, (b, depth)).astype(np.int8)
    wt = rng.integers(-127, 128, (out_c, depth)).astype(np.int8)
    in_off = int(rng.integers(-127, 129))
    if extreme is not None:
        xv, in_off, wv = extreme
        x[:] = xv
        wt[:] = wv
    bias = rng.integers(-20000, 20000, out_c).astype(np.int32)
    per_channel = bool(rng.random() < 0.7)
    m, s = _quant(rng, out_c if per_channel else 1)
    _dead_channel(rng, wt, bias, m, s)
    lo = int(rng.integers(-128, 0)) if rng.random() < 0.3 else -128
    p = dict(input_offset=in_off, output_offset=int(rng.integers(-128, 128)), act_min=lo, act_max=127)
    ref = fully_connected_s8(x, wt, bias, m, s, **p)
    return dict(x=x, w=wt, bias=bias, mult=m, shift=s, p=p, per_channel=per_channel, expected=ref)


EXTREMES = [(-128, 128, 127), (127, -127, -127), (127, 128, 127), (-128, -127, -127)]


def all_cases():
    rng = np.random.default_rng(1234)
    convs = []
    for cin in (4, 8, 12, 1, 2, 3, 5, 6, 7):
        for k in ((1, 1), (3, 3), (2, 3), (1, 1)):
            convs.append(conv_case(rng, cin, k))
    # clipped windows of a pixel pair through zero-point rows (k_w * in_ch <= 256) and past that bound (tap by tap)
    convs += [conv_case(rng, 32, (3, 3)), conv_case(rng, 88, (2, 3)), conv_case(rng, 64, (3, 3))]
    for e in EXTREMES:
        convs.append(conv_case(rng, 8, (3, 3), e))
        convs.append(conv_case(rng, 3, (3, 3), e))
        convs.append(conv_case(rng, 16, (1, 1), e))
    fcs = [fc_case(rng, d, o) for d, o in ((1, 1), (3, 5), (4, 4), (7, 9), (8, 128), (17, 6), (64, 12), (130, 7),
                                           (12, 8), (9, 15), (36, 13), (5, 16))]
    fcs += [fc_case(rng, 33, 10, e) for e in EXTREMES] + [fc_case(rng, 36, 13, e) for e in EXTREMES]
    return convs, fcs


def _arr(a, dtype):
    return np.ascontiguousarray(np.asarray(a, dtype))


@pytest.fixture(scope="module")
def lib():
    return ctypes.CDLL(str(compile_shared(SOURCES, [KERNELS], extra_flags=("-Wpedantic", "-Werror"))))


def run_conv(lib, c):
    x, w, p = c["x"], c["w"], c["p"]
    n, h, wd, cin = x.shape
    cout = w.shape[0]
    oh, ow = p["output_hw"]
    keep = [_arr(x, np.int8), _arr(interleave_quads(w.reshape(cout, -1)), np.int8), *_table(c)]
    scratch = np.zeros(max(fold_scratch_bytes(w.shape[1:3], cin), 4) // 4, np.uint32)
    out = np.full((n, oh, ow, cout), 99, np.int8)
    ctx = Context(VP(scratch.ctypes.data), scratch.nbytes)
    prm = ConvParams(p["input_offset"], p["output_offset"], Tile(*p["stride_hw"]), Tile(*p["pad_top_left"]),
                     Tile(*p["dilation_hw"]), Activation(p["act_min"], p["act_max"]))
    q = Quant(VP(keep[3].ctypes.data), VP(keep[4].ctypes.data))
    rc = lib.tinyaot_convolve_s8_fold(ctypes.byref(ctx), ctypes.byref(prm), ctypes.byref(q),
                                      ctypes.byref(Dims(n, h, wd, cin)), VP(keep[0].ctypes.data),
                                      ctypes.byref(Dims(*w.shape)), VP(keep[1].ctypes.data),
                                      ctypes.byref(Dims(1, 1, 1, cout)), VP(keep[2].ctypes.data),
                                      ctypes.byref(Dims(n, oh, ow, cout)), VP(out.ctypes.data))
    return rc, out


def run_fc(lib, c):
    x, w, p = c["x"], c["w"], c["p"]
    b, d = x.shape
    o = w.shape[0]
    keep = [_arr(x, np.int8), _arr(interleave_fc(w), np.int8), *_table(c)]
    out = np.full((b, o), 99, np.int8)
    prm = FcParams(p["input_offset"], 0, p["output_offset"], Activation(p["act_min"], p["act_max"]))
    q = Quant(VP(keep[3].ctypes.data), VP(keep[4].ctypes.data))
    rc = lib.tinyaot_fully_connected_s8_fold(None, ctypes.byref(prm), ctypes.byref(q), i32(int(c["per_channel"])),
                                             ctypes.byref(Dims(b, 1, 1, d)), VP(keep[0].ctypes.data),
                                             ctypes.byref(Dims(d, 1, 1, o)), VP(keep[1].ctypes.data),
                                             ctypes.byref(Dims(1, 1, 1, o)), VP(keep[2].ctypes.data),
                                             ctypes.byref(Dims(b, 1, 1, o)), VP(out.ctypes.data))
    return rc, out


def test_interleaved_layouts_are_permutations():
    rng = np.random.default_rng(5)
    for o, k in ((1, 1), (2, 4), (3, 7), (5, 9), (8, 16), (7, 130)):
        w = rng.integers(-128, 128, (o, k)).astype(np.int8)
        for f in (interleave_quads, interleave_fc):
            v = f(w)
            assert v.size == w.size and np.array_equal(np.sort(v), np.sort(w.reshape(-1)))
    w = np.arange(5 * 5).reshape(5, 5)
    assert list(interleave_quads(w)[:20]) == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18, 4, 9, 14, 19]
    assert list(interleave_quads(w)[20:]) == list(range(20, 25))


def test_fold_requant_table_bounds_and_dead_channels():
    w = np.array([[1, -2, 3], [0, 0, 0]], np.int8)
    bias = np.array([100, 2113929036], np.int32)
    m, s = np.array([1 << 30, 1 << 30], np.int32), np.array([-3, -31], np.int32)
    fb, mr, e = fold_requant_table(bias, w, 5, m, s, -7)
    assert list(fb) == [int(fold_input_offset(bias[:1], w[:1], 5)[0]), 0]  # a dead channel: bias 0, mult 0, e 1
    assert list(e) == [3 + (1 << 8)] and mr[2] == 0 and mr[1] == 4 + (-7) * 8
    assert mr[3] == 2 * int(fp.requantize_to_int8(np.array([2113929036]), np.array([1 << 30]), np.array([-31]), -7,
                                                  -128, 127)[0])
    assert fold_requant_table(bias[:1], w[:1], 5, m[:1], np.array([1]), -7) is None  # a left shift
    assert fold_requant_table(bias[:1], w[:1], 5, m[:1], np.array([0]), -7) is None  # shift 0
    assert fold_requant_table(np.array([2**30]), w[:1], 5, m[:1], s[:1], -7) is None  # |acc| may reach 2^30
    assert fold_requant_table(np.array([2**29]), w[:1], 5, m[:1], np.array([-24]), 0) is None  # B + 128 * 2^e >= 2^31
    # B = 898 below 2^(e-1): the output is the offset whatever the input (a constant channel, as a dead one)
    fb, mr, e = fold_requant_table(bias[:1], w[:1], 5, m[:1], np.array([-24]), -7)
    assert list(fb) == [0] and list(mr) == [0, -14] and list(e) == [1]


def test_host_conv_fold_matches_reference(lib):
    convs, _ = all_cases()
    for i, c in enumerate(convs):
        rc, out = run_conv(lib, c)
        assert rc == 0 and np.array_equal(out, c["expected"]), f"conv case {i}: w {c['w'].shape} {c['p']}"


def test_host_fc_fold_matches_reference(lib):
    _, fcs = all_cases()
    for i, c in enumerate(fcs):
        rc, out = run_fc(lib, c)
        assert rc == 0 and np.array_equal(out, c["expected"]), f"fc case {i}: w {c['w'].shape} {c['p']}"


def test_conv_fold_refuses_missing_scratch_and_bias(lib):
    rng = np.random.default_rng(9)
    c = conv_case(rng, 3, (3, 3))
    x, w = c["x"], c["w"]
    prm = ConvParams(0, 0, Tile(1, 1), Tile(0, 0), Tile(1, 1), Activation(-128, 127))
    out = np.zeros(c["expected"].shape, np.int8)
    q = Quant(VP(c["mult"].ctypes.data), VP(c["shift"].ctypes.data))
    rc = lib.tinyaot_convolve_s8_fold(None, ctypes.byref(prm), ctypes.byref(q), ctypes.byref(Dims(*x.shape)),
                                      VP(x.ctypes.data), ctypes.byref(Dims(*w.shape)), VP(w.ctypes.data), None,
                                      VP(c["bias"].ctypes.data), ctypes.byref(Dims(*out.shape)), VP(out.ctypes.data))
    assert rc == -1  # in_ch 3: the column is required
    ctx = Context(None, 0)
    rc = lib.tinyaot_convolve_s8_fold(ctypes.byref(ctx), ctypes.byref(prm), ctypes.byref(q),
                                      ctypes.byref(Dims(*x.shape)), VP(x.ctypes.data), ctypes.byref(Dims(*w.shape)),
                                      VP(w.ctypes.data), None, None, ctypes.byref(Dims(*out.shape)),
                                      VP(out.ctypes.data))
    assert rc == -1  # no (folded) bias


# ---- (b) under QEMU ----
def _c_array(name, arr, ctype):
    flat = np.asarray(arr).ravel()
    return f"static const {ctype} {name}[{max(flat.size, 1)}] = {{{','.join(str(int(v)) for v in flat) or '0'}}};\n"


def firmware(convs, fcs) -> str:
    out_size = max(c["expected"].size for c in convs + fcs)
    scratch = max(fold_scratch_bytes(c["w"].shape[1:3], c["w"].shape[3]) for c in convs) // 4 + 1
    src = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn.h"\n',
           "void harness_puts(const char *s);\n", f"static int8_t out_buf[{out_size}];\n",
           f"static uint32_t scratch_buf[{scratch}];\n",
           "static const tinyaot_context sctx = {scratch_buf, (int32_t)sizeof scratch_buf};\n",
           "static int bad(const int8_t *a, const int8_t *b, int n)\n"
           "{\n    int k = 0, i;\n    for (i = 0; i < n; i++) k += a[i] != b[i];\n    return k;\n}\n"]
    calls = []
    for i, c in enumerate(convs + fcs):
        pre = f"c{i}_"
        w, p, x = c["w"], c["p"], c["x"]
        is_fc = i >= len(convs)
        wl = interleave_fc(w) if is_fc else interleave_quads(w.reshape(w.shape[0], -1))
        fb, mr, e = _table(c)
        src += [_c_array(pre + "x", x, "int8_t"), _c_array(pre + "w", wl, "int8_t"), _c_array(pre + "b", fb, "int32_t"),
                _c_array(pre + "m", mr, "int32_t"), _c_array(pre + "s", e, "int32_t"),
                _c_array(pre + "e", c["expected"], "int8_t")]
        act = f"{{{p['act_min']}, {p['act_max']}}}"
        body = (f"static int case_{i}(void)\n{{\n    int rc;\n"
                f"    const tinyaot_per_channel_quant_params q = {{{pre}m, {pre}s}};\n")
        if is_fc:
            b, d = x.shape
            o = w.shape[0]
            body += (f"    const tinyaot_dims in_d = {{{b}, 1, 1, {d}}}, f_d = {{{d}, 1, 1, {o}}}, "
                     f"b_d = {{1, 1, 1, {o}}}, o_d = {{{b}, 1, 1, {o}}};\n"
                     f"    const tinyaot_fc_params prm = {{{p['input_offset']}, 0, {p['output_offset']}, {act}}};\n"
                     f"    rc = tinyaot_fully_connected_s8_fold(NULL, &prm, &q, {int(c['per_channel'])}, &in_d, "
                     f"{pre}x, &f_d, {pre}w, &b_d, {pre}b, &o_d, out_buf);\n")
        else:
            n, h, wd, cin = x.shape
            oh, ow = p["output_hw"]
            oc = w.shape[0]
            geo = (f"{p['input_offset']}, {p['output_offset']}, {{{p['stride_hw'][0]}, {p['stride_hw'][1]}}}, "
                   f"{{{p['pad_top_left'][0]}, {p['pad_top_left'][1]}}}, "
                   f"{{{p['dilation_hw'][0]}, {p['dilation_hw'][1]}}}, {act}")
            body += (f"    const tinyaot_dims in_d = {{{n}, {h}, {wd}, {cin}}}, "
                     f"f_d = {{{', '.join(map(str, w.shape))}}}, "
                     f"b_d = {{1, 1, 1, {oc}}}, o_d = {{{n}, {oh}, {ow}, {oc}}};\n"
                     f"    const tinyaot_conv_params prm = {{{geo}}};\n"
                     f"    rc = tinyaot_convolve_s8_fold(&sctx, &prm, &q, &in_d, {pre}x, &f_d, {pre}w, &b_d, {pre}b, "
                     f"&o_d, out_buf);\n")
        body += f"    return rc != 0 ? 1000 : bad(out_buf, {pre}e, {c['expected'].size});\n}}\n"
        src.append(body)
        calls.append(f'    if (case_{i}() != 0) {{ harness_puts("FAIL {i}\\n"); fails++; }}\n')
    src.append("int main(void)\n{\n    int fails = 0;\n")
    src += calls
    src.append('    harness_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(src)


@pytest.mark.parametrize("cpu, flags", [("cortex-m4", ()), ("cortex-m4", ("-DTINYAOT_FOLD_NO_ASM",)),
                                        ("cortex-m3", ())])
def test_fold_kernels_match_reference_under_qemu(cpu, flags, tmp_path_factory):
    from ops.conftest import ARM_GCC, QEMU, ArmRunner  # the shared bare-metal harness (tests/ops/conftest.py)

    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed")
    runner = ArmRunner(tmp_path_factory.mktemp("fold"))
    convs, fcs = all_cases()
    elf = runner.build(cpu, "fold", firmware(convs, fcs), SOURCES, [KERNELS], ("-Wall", "-Wextra", "-Werror", *flags))
    rc, out = runner.run(cpu, elf)
    assert "ALL PASSED" in out and rc == 0, f"{cpu}: exit {rc}:\n{out[-3000:]}"


# ---- (c) the variant under a whole deploy, and where it is offered ----
def test_deployed_fold_variants_verify_under_qemu(tmp_path):
    """A thin 3x3 conv (the column path), a 3x3 conv on 8 channels with padding (in place, clipped pixel pairs), a
    1x1 conv and a fully connected layer of 14 outputs (blocks of eight and four, two single rows), deployed on
    mps2-an386: every one takes the fold variant and the firmware verifies under QEMU (== the numpy reference,
    onnxruntime within 1 LSB)."""
    from onnx import helper

    from tests.op_models import calibration, const, deploy_verified, save_model

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1", "b1"], ["c"], kernel_shape=[3, 3], pads=[1, 0, 1, 1],
                              strides=[1, 2]),
             helper.make_node("Conv", ["c", "w2", "b2"], ["d"], kernel_shape=[1, 1]),
             helper.make_node("Flatten", ["d"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    inits = [const("w0", rng.standard_normal((8, 3, 3, 3)) * 0.4), const("b0", rng.standard_normal(8) * 0.1),
             const("w1", rng.standard_normal((12, 8, 3, 3)) * 0.2), const("b1", rng.standard_normal(12) * 0.1),
             const("w2", rng.standard_normal((8, 12, 1, 1)) * 0.3), const("b2", rng.standard_normal(8) * 0.1),
             const("w3", rng.standard_normal((14, 8 * 7 * 3)) * 0.1), const("b3", rng.standard_normal(14) * 0.1)]
    model = save_model(tmp_path / "fold.onnx", nodes, (1, 3, 7, 6), (1, 14), inits)
    report = deploy_verified(model, calibration(tmp_path / "cal.npz", (1, 3, 7, 6)), tmp_path / "out")
    chosen = [(layer["op"], layer.get("variant")) for layer in report["layers"]
              if layer["op"] in ("Conv", "FullyConnected")]
    assert chosen == [("Conv", "fold")] * 3 + [("FullyConnected", "fold")], report["layers"]


def test_fold_offered_only_where_exact():
    """Offered on real boards for a standard conv whose requantization table exists; not for the generic target,
    not with a left shift (fold_requant_table None)."""
    from tinyaot.boards import load_board
    from tinyaot.core.target import GENERIC
    from tinyaot.ir import Graph, Node
    from tinyaot.ir.graph import Tensor
    from tinyaot.ops.conv import Conv

    rng = np.random.default_rng(4)

    def names(shift, target):
        tensors = {"x": Tensor("x", (1, 5, 5, 8), "int8"), "y": Tensor("y", (1, 5, 5, 4), "int8"),
                   "w": Tensor("w", (4, 1, 1, 8), "int8", rng.integers(-127, 128, (4, 1, 1, 8)).astype(np.int8)),
                   "b": Tensor("b", (4,), "int32", rng.integers(-999, 999, 4).astype(np.int32))}
        node = Node("Conv", "c", ["x", "w", "b"], ["y"],
                    {"depthwise": False, "kernel_shape": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0),
                     "dilations": (1, 1), "output_mult": np.full(4, 1 << 30), "output_shift": np.full(4, shift),
                     "input_offset": 5, "output_offset": -3})
        return [v.name for v in Conv().variants(node, Graph("g", tensors, [node], ["x"], ["y"]), target)]

    m4, m3 = load_board("mps2-an386").target(), load_board("mps2-an385").target()
    assert names(-8, m4) == ["generic", "fold"] and names(-8, m3) == ["generic", "fold"]
    assert names(1, m4) == ["generic"] and names(-8, GENERIC) == ["generic"]


# ---- (d) the cost model's counts of what the fold and generic kernels do ----
def _walk_counts(in_shape, out_shape, k, s, p, d):
    """The loops of fold_fill (copy calls per pixel) and fold_in_place (fold_mac_4x2_s8 calls per block), walked
    pixel by pixel as the C does."""
    n, h, w, c = in_shape
    _, oh, ow, _ = out_shape
    pix = [(oy * s[0] - p[0], ox * s[1] - p[1]) for _ in range(n) for oy in range(oh) for ox in range(ow)]
    runs = 0
    for by, bx in pix:
        row_run = d[1] == 1 and bx >= 0 and bx + k[1] <= w
        for ky in range(k[0]):
            iy = by + ky * d[0]
            runs += 1 if (iy < 0 or iy >= h or row_run) else k[1]

    def inside(q):
        return q[0] >= 0 and q[0] + (k[0] - 1) * d[0] < h and q[1] >= 0 and q[1] + (k[1] - 1) * d[1] < w

    def whole(q, ky):  # fold_row non-NULL
        iy = q[0] + ky * d[0]
        if d[1] != 1:
            return False
        if iy < 0 or iy >= h:
            return k[1] * c <= 256
        return q[1] >= 0 and q[1] + k[1] <= w

    calls = 0
    for i in range(0, len(pix), 2):
        a, b = pix[i], pix[min(i + 1, len(pix) - 1)]
        if d[1] == 1 and inside(a) and inside(b):
            calls += k[0]
        else:
            calls += sum(1 if whole(a, ky) and whole(b, ky) else k[1] for ky in range(k[0]))
    return runs, calls


@pytest.mark.parametrize("geo", [((1, 28, 28, 1), 5, 5, 1, 1, (2, 2), (1, 1)),   # mnist8's first conv
                                 ((1, 14, 14, 8), 5, 5, 1, 1, (2, 2), (1, 1)),   # its second: half the pairs clipped
                                 ((2, 7, 6, 4), 3, 3, 1, 2, (1, 0), (1, 1)),     # odd pixel count per batch
                                 ((1, 9, 11, 3), 3, 2, 2, 1, (0, 3), (2, 1)),    # vertical dilation
                                 ((1, 9, 11, 12), 2, 3, 1, 1, (1, 1), (1, 2)),   # horizontal dilation: taps
                                 ((1, 5, 5, 128), 3, 3, 1, 1, (1, 1), (1, 1))])  # padded rows past the stack row
def test_cost_counts_follow_the_kernel_loops(geo):
    from tinyaot.ops.common import spatial_out
    from tinyaot.ops.conv import column_runs, fold_block_calls

    x, kh, kw, sh, sw, (pt, pl), dil = geo
    oh, ow = spatial_out(x[1:3], (kh, kw), (sh, sw), (pt, pl, pt, pl), dil)
    args = (x, (x[0], oh, ow, 4), (kh, kw), (sh, sw), (pt, pl), dil)
    assert (column_runs(*args), fold_block_calls(*args)) == _walk_counts(*args)


def test_cost_model_picks_the_measured_variant_of_thin_and_clipped_convs():
    """mnist8_opset13's convs, whose counts under QEMU (ci/speed_benchmark.md) the earlier tables mispredicted: the
    5x5 conv on 1 channel (copy-bound: mve_conv on the M55, generic on the M3, fold on the M4) and the padded 5x5 on
    8 channels (half its pixel pairs clipped: generic on the M4, fold on the M3; on the M55 mve_conv reading its
    windows in place, 255,060 instructions against generic's 1,236,103 in mnist8 under QEMU); and a fully connected
    layer of two outputs keeps mve_fc on the M55 without fold."""
    from tinyaot.boards import load_board
    from tinyaot.ir import Graph, Node
    from tinyaot.ir.graph import Tensor
    from tinyaot.ops.conv import Conv
    from tinyaot.ops.fully_connected import FullyConnected
    from tinyaot.pipeline.variants import cost_choice

    rng = np.random.default_rng(5)

    def conv_pick(hw, cin, cout, board):
        tensors = {"x": Tensor("x", (1, hw, hw, cin), "int8"), "y": Tensor("y", (1, hw, hw, cout), "int8"),
                   "w": Tensor("w", (cout, 5, 5, cin), "int8",
                               rng.integers(-127, 128, (cout, 5, 5, cin)).astype(np.int8)),
                   "b": Tensor("b", (cout,), "int32", rng.integers(-999, 999, cout).astype(np.int32))}
        node = Node("Conv", "c", ["x", "w", "b"], ["y"],
                    {"depthwise": False, "kernel_shape": (5, 5), "strides": (1, 1), "pads": (2, 2, 2, 2),
                     "dilations": (1, 1), "output_mult": np.full(cout, 1 << 30), "output_shift": np.full(cout, -8),
                     "input_offset": 5, "output_offset": -3})
        return cost_choice(Conv().variants(node, Graph("g", tensors, [node], ["x"], ["y"]),
                                           load_board(board).target()))

    assert [conv_pick(28, 1, 8, b) for b in ("mps2-an386", "mps2-an385", "mps3-an547")] == \
        ["fold", "generic", "mve_conv"]
    assert [conv_pick(14, 8, 16, b) for b in ("mps2-an386", "mps2-an385", "mps3-an547")] == \
        ["generic", "fold", "mve_conv"]

    tensors = {"x": Tensor("x", (1, 256), "int8"), "y": Tensor("y", (1, 2), "int8"),
               "w": Tensor("w", (2, 256), "int8", rng.integers(-127, 128, (2, 256)).astype(np.int8)),
               "b": Tensor("b", (2,), "int32", rng.integers(-999, 999, 2).astype(np.int32))}
    node = Node("FullyConnected", "f", ["x", "w", "b"], ["y"],
                {"output_mult": np.full(1, 1 << 30), "output_shift": np.full(1, -8), "input_offset": 5,
                 "output_offset": -3, "act_min": -128, "act_max": 127})
    graph = Graph("g", tensors, [node], ["x"], ["y"])
    listed = FullyConnected().variants(node, graph, load_board("mps3-an547").target())
    assert [v.name for v in listed] == ["generic", "mve_fc"] and cost_choice(listed) == "mve_fc"
    assert [v.name for v in FullyConnected().variants(node, graph, load_board("mps2-an386").target())] == ["generic"]
