"""The compressed-weight kernels (int4, clustered, bitmap-sparse, run-length-sparse x conv, pointwise, depthwise,
fully connected) against the dense numpy references, bit for bit.

The weights are random int8 values shaped for each kind (values in [-7, 7] for int4; per group of output channels a
codebook of K distinct values, K from 2 to 256 so every index width 1..8 occurs; real zeros, empty rows and gaps
longer than 255 for the sparse kinds), encoded with tinyaot.compress.encode (decode() must give them back), and:
  (a) the host C kernel through ctypes == the dense numpy reference on the values (conv: with its scratch column
      and without, also with unusable scratch);
  (b) the same C on Cortex-M0 (plain C) and Cortex-M4 (DSP path) under QEMU == the reference, for a subset;
  (c) instructions under QEMU, a 50 %-sparse pointwise conv and fully connected layer, dense kernel against every
      compressed kind (figures printed; the sparse kernels must execute fewer than dense where that is claimed);
  (d) end to end: kws_dscnn deployed with clusters 16, prune 0.5 and 4-bit weights (compile_model's compression,
      tinyaot/compress/pipeline.py) on mps2-an386 runs the compressed kernels, verifies under QEMU (outputs == the
      numpy reference) and stores fewer bytes.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pytest

from kernel_structs import (VP, Activation, Context, ConvParams, Dims, DwConvParams, FcParams,
                            Tile, i32)

from tinyaot.toolchain.host import compile_shared
from tinyaot.compress.encode import (decode, encode_clustered, encode_int4, encode_sparse_bitmap,
                                     encode_sparse_rle)
from tinyaot.compress.storage import WeightStorage
from tinyaot.ir import Tensor
from tinyaot.core import fixedpoint as fp
from tinyaot.ops.compressed import conv_scratch_bytes, kernel_name
from tinyaot.ops.conv import conv2d_s8, depthwise_conv2d_s8
from tinyaot.ops.fully_connected import fully_connected_s8
from tinyaot.paths import TEMPLATES

KERNELS_DIR = TEMPLATES / "kernels"
KINDS = ("int4", "clustered", "sparse_bitmap", "sparse_rle")
OPS = ("conv3x3", "pointwise", "depthwise", "fc")
OP_BASE = {"conv3x3": "conv", "pointwise": "conv", "depthwise": "depthwise", "fc": "fc"}
SOURCES = [KERNELS_DIR / f"{kernel_name(k, o)}.c" for k in KINDS for o in ("conv", "depthwise", "fc")]
DENSE_SOURCES = [KERNELS_DIR / n for n in ("tinyaot_convolve_s8.c", "tinyaot_depthwise_conv_s8.c",
                                          "tinyaot_fully_connected_s8.c")]
SENTINEL = 99


# ====================================================================================================================
# Random layers and their compressed weights
# ====================================================================================================================
def _rows_to_values(r: np.ndarray, shape, depthwise: bool) -> np.ndarray:
    """Inverse of storage.rows(): a [out_ch, row_len] array back to the IR layout."""
    return np.ascontiguousarray(r.T).reshape(shape) if depthwise else r.reshape(shape)


def make_weights(kind: str, shape, depthwise: bool, rng, density: float | None = None, k: int | None = None):
    """Random int8 weights suited to `kind` and their storage; decode(storage) is checked to give them back."""
    out_ch = shape[-1] if depthwise else shape[0]
    row_len = int(np.prod(shape)) // out_ch
    if kind == "int4":
        values = rng.integers(-7, 8, shape).astype(np.int8)
        st = encode_int4(values, depthwise)
    elif kind == "clustered":
        k = k or int(rng.choice([2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 40, 64, 100, 128, 129, 200, 256]))
        group_size = int(rng.choice([1, 2, 3, out_ch, out_ch + 5]))
        groups = -(-out_ch // group_size)
        cbs = np.stack([rng.choice(np.arange(-128, 128), k, replace=False) for _ in range(groups)]).astype(np.int8)
        idx = rng.integers(0, k, (out_ch, row_len))
        r = cbs[np.arange(out_ch) // group_size][np.arange(out_ch)[:, None], idx]
        values = _rows_to_values(r, shape, depthwise).astype(np.int8)
        st = encode_clustered(values, cbs, group_size, depthwise)
    else:
        d = float(rng.choice([0.5, 0.3, 0.1, 0.9])) if density is None else density
        r = rng.integers(-128, 128, (out_ch, row_len))
        r[r == 0] = 1
        r[rng.random((out_ch, row_len)) >= d] = 0
        if out_ch > 2 and density is None:
            r[rng.integers(0, out_ch)] = 0  # an empty row
        values = _rows_to_values(r, shape, depthwise).astype(np.int8)
        st = (encode_sparse_bitmap if kind == "sparse_bitmap" else encode_sparse_rle)(values, depthwise)
    t = Tensor("w", tuple(shape), "int8", values, None, st)
    assert np.array_equal(decode(t), values), f"{kind}: the encoder does not round-trip"
    return values, st


def _rand_quant(rng, n):
    scales = rng.uniform(2e-4, 2e-2, n)
    scales[rng.random(n) < 0.15] = rng.uniform(0.5, 3.0)  # now and then a positive shift
    return fp.quantize_multiplier_array(scales)


def _out_size(size, k, stride, dil, pad_lo, pad_hi):
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


@dataclass
class Case:
    op: str
    kind: str
    p: dict  # geometry and offsets
    x: np.ndarray
    w: np.ndarray  # the decoded int8 values (IR layout)
    st: WeightStorage
    bias: np.ndarray | None
    mult: np.ndarray
    shift: np.ndarray
    expected: np.ndarray = field(default=None)

    @property
    def kernel(self) -> str:
        if self.st.kind == "dense":
            return {"conv": "tinyaot_convolve_s8", "depthwise": "tinyaot_depthwise_conv_s8",
                    "fc": "tinyaot_fully_connected_s8"}[OP_BASE[self.op]]
        return kernel_name(self.kind, OP_BASE[self.op], self.st.meta.get("bits"))

    @property
    def k(self) -> int:  # positions of a conv column
        return int(np.prod(self.w.shape[1:]))


def make_case(op: str, kind: str, rng, **force) -> Case:
    p: dict = {"act_min": -128, "act_max": 127}
    if rng.random() < 0.3:
        lo = int(rng.integers(-128, 0))
        p.update(act_min=lo, act_max=int(rng.integers(lo + 1, 128)))
    p.update(input_offset=int(rng.integers(-127, 129)), output_offset=int(rng.integers(-128, 128)))
    if op == "fc":
        batches, depth, out_ch = int(rng.integers(1, 4)), int(rng.integers(1, 80)), int(rng.integers(1, 10))
        if rng.random() < 0.25:
            depth = int(rng.integers(600, 800))  # run-length gaps over 255
        batches, depth, out_ch = force.get("batches", batches), force.get("depth", depth), force.get("out", out_ch)
        x = rng.integers(-128, 128, (batches, depth)).astype(np.int8)
        w, st = make_weights(kind, (out_ch, depth), False, rng, force.get("density"), force.get("k"))
        per_channel = bool(rng.random() < 0.6)
        m, s = _rand_quant(rng, out_ch if per_channel else 1)
        p.update(per_channel=per_channel, filter_offset=int(rng.choice([0, 0, int(rng.integers(-127, 129))])))
        bias = None if rng.random() < 0.2 else rng.integers(-5000, 5000, out_ch).astype(np.int32)
        case = Case(op, kind, p, x, w, st, bias, m, s)
        case.expected = fully_connected_s8(x, w, bias, m, s, input_offset=p["input_offset"],
                                           filter_offset=p["filter_offset"], output_offset=p["output_offset"],
                                           act_min=p["act_min"], act_max=p["act_max"])
        return case
    while True:
        n, h, wd = int(rng.integers(1, 3)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
        if op == "pointwise":
            kh = kw = 1
            sh = sw = int(rng.choice([1, 1, 2]))
            dh = dw = 1
            pt = pl = pb = pr = 0
        else:
            kh, kw = force.get("kh", 3), force.get("kw", 3)
            if "kh" in force:
                pass
            elif op == "depthwise" and rng.random() < 0.3:
                kh, kw = [(5, 5), (7, 7), (1, 15), (9, 4)][int(rng.integers(0, 4))]  # 49 taps: several passes
            elif op == "conv3x3" and rng.random() < 0.2:
                kh, kw = [(1, 3), (2, 2), (4, 3)][int(rng.integers(0, 3))]
            sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
            dh, dw = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if rng.random() < 0.25 else (1, 1)
            pt, pl, pb, pr = (int(rng.integers(0, 3)) for _ in range(4))
        h, wd = max(h, kh - pt - pb if kh > 3 else h), max(wd, kw - pl - pr if kw > 3 else wd)
        h, wd = force.get("h", h), force.get("w", wd)
        oh, ow = _out_size(h, kh, sh, dh, pt, pb), _out_size(wd, kw, sw, dw, pl, pr)
        if oh >= 1 and ow >= 1:
            break
    if op == "depthwise":
        cin = force.get("cin", int(rng.integers(1, 10)))
        ch_mult = force.get("ch_mult", int(rng.choice([1, 1, 2, 3])))
        cout = cin * ch_mult
        w, st = make_weights(kind, (1, kh, kw, cout), True, rng, force.get("density"), force.get("k"))
        p["ch_mult"] = ch_mult
    else:
        groups = force.get("groups", int(rng.choice([1, 1, 1, 2, 3])) if op == "conv3x3" else 1)
        cin = groups * int(rng.integers(1, 7 if op == "conv3x3" else 40))
        cout = groups * int(rng.integers(1, 7 if op == "conv3x3" else 20))
        cin, cout = force.get("cin", cin), force.get("cout", cout)
        w, st = make_weights(kind, (cout, kh, kw, cin // groups), False, rng, force.get("density"), force.get("k"))
        p["groups"] = groups
    x = rng.integers(-128, 128, (n, h, wd, cin)).astype(np.int8)
    m, s = _rand_quant(rng, cout)
    bias = None if rng.random() < 0.2 else rng.integers(-5000, 5000, cout).astype(np.int32)
    p.update(stride=(sh, sw), pad=(pt, pl), dilation=(dh, dw), out_hw=(oh, ow))
    case = Case(op, kind, p, x, w, st, bias, m, s)
    common = dict(input_offset=p["input_offset"], output_offset=p["output_offset"], stride_hw=(sh, sw),
                  pad_top_left=(pt, pl), dilation_hw=(dh, dw), output_hw=(oh, ow), act_min=p["act_min"],
                  act_max=p["act_max"])
    if op == "depthwise":
        case.expected = depthwise_conv2d_s8(x, w, bias, m, s, ch_mult=p["ch_mult"], **common)
    else:
        case.expected = conv2d_s8(x, w, bias, m, s, groups=p["groups"], **common)
    return case


@lru_cache(maxsize=None)
def random_cases(op: str, kind: str, count: int = 14) -> tuple:
    rng = np.random.default_rng(sum(map(ord, op + kind)))  # fixed per (op, kind): reproducible failures
    return tuple(make_case(op, kind, rng) for _ in range(count))


# ====================================================================================================================
# (a) host C through ctypes
# ====================================================================================================================
class PerChannelQuant(ctypes.Structure):
    _fields_ = [("multiplier", VP), ("shift", VP)]


class ClusteredWeights(ctypes.Structure):  # tinyaot_clustered_weights
    _fields_ = [("codebooks", VP), ("packed", VP), ("bits", i32), ("k", i32), ("group_size", i32),
                ("row_bytes", i32)]


class SparseWeights(ctypes.Structure):  # tinyaot_sparse_weights / tinyaot_rle_weights
    _fields_ = [("a", VP), ("values", VP), ("row_offsets", VP)]


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    path = compile_shared(SOURCES, [KERNELS_DIR], extra_flags=("-Wpedantic", "-Werror"))
    return ctypes.CDLL(str(path))


def _p(a) -> VP:
    return None if a is None else VP(a.ctypes.data)


_ALIVE: list = []  # ctypes structures passed by address stay alive until the call returns (cleared by run_host)


def _r(obj) -> VP:
    _ALIVE.append(obj)
    return ctypes.cast(ctypes.byref(obj), VP)


def _filter_arg(st: WeightStorage, keep: list):
    """The kernel's filter argument for a storage (arrays copied and kept alive in `keep`)."""
    arr = {k: np.ascontiguousarray(v) for k, v in st.arrays.items()}
    keep.append(arr)
    if st.kind == "int4":
        return _p(arr["packed"])
    if st.kind == "clustered":
        m = st.meta
        s = ClusteredWeights(_p(arr["codebooks"]), _p(arr["packed"]), m["bits"], m["k"], m["group_size"],
                             m["row_bytes"])
    else:
        first = arr["bitmap"] if st.kind == "sparse_bitmap" else arr["runs"]
        arr["row_offsets"] = np.ascontiguousarray(arr["row_offsets"], np.int32)
        s = SparseWeights(_p(first), _p(arr["values"]), _p(arr["row_offsets"]))
    keep.append(s)
    return _r(s)


def run_host(lib, c: Case, scratch: str = "none", overlap: int | None = None) -> np.ndarray:
    """scratch (conv only): "none" (ctx NULL: stack column), "full" (the size get_buffer_size asks for),
    "misaligned" or "short" (unusable: the kernel must fall back). overlap = d (conv, depthwise): input and output
    in one buffer, the output starting d bytes before the input, as the memory planner may place them."""
    keep: list = []
    p = c.p
    fn = getattr(lib, c.kernel)
    fn.restype = ctypes.c_int
    filt = _filter_arg(c.st, keep)
    mult, shift = np.ascontiguousarray(c.mult, np.int32), np.ascontiguousarray(c.shift, np.int32)
    q = PerChannelQuant(_p(mult), _p(shift))
    bias = None if c.bias is None else np.ascontiguousarray(c.bias, np.int32)
    out = np.full(c.expected.shape, SENTINEL, np.int8)
    x = np.ascontiguousarray(c.x)
    if overlap is not None:
        arena = np.full(max(overlap + c.x.size, c.expected.size), SENTINEL, np.int8)
        arena[overlap:overlap + c.x.size] = c.x.reshape(-1)
        x = arena[overlap:overlap + c.x.size].reshape(c.x.shape)  # views into one buffer
        out = arena[:c.expected.size].reshape(c.expected.shape)
    act = Activation(p["act_min"], p["act_max"])
    if c.op == "fc":
        batches, depth = x.shape
        oc = c.w.shape[0]
        prm = FcParams(p["input_offset"], p["filter_offset"], p["output_offset"], act)
        rc = fn(None, _r(prm), _r(q), i32(int(p["per_channel"])), _r(Dims(batches, 1, 1, depth)), _p(x),
                _r(Dims(depth, 1, 1, oc)), filt, _r(Dims(1, 1, 1, oc)), _p(bias), _r(Dims(batches, 1, 1, oc)),
                _p(out))
    else:
        n, h, w, cin = x.shape
        oh, ow = p["out_hw"]
        oc = c.expected.shape[3]
        geo = dict(input_offset=p["input_offset"], output_offset=p["output_offset"], stride=Tile(*p["stride"]),
                   padding=Tile(*p["pad"]), dilation=Tile(*p["dilation"]), activation=act)
        fdims = Dims(*c.w.shape)
        ctx = Context(None, 0)
        if c.op == "depthwise":
            prm = DwConvParams(**geo, ch_mult=p["ch_mult"])
        else:
            prm = ConvParams(**geo)
            size_fn = getattr(lib, c.kernel + "_get_buffer_size")
            size_fn.restype = i32
            size = size_fn(None, _r(fdims))
            assert size == conv_scratch_bytes(c.w.shape[1:3], c.w.shape[3])  # the planner's twin agrees
            if scratch != "none":
                buf = np.full(size // 4 + 2, 0x55555555, np.uint32)  # stale contents must not leak
                keep.append(buf)
                ctx = Context(buf.ctypes.data + (1 if scratch == "misaligned" else 0),
                              size - (4 if scratch == "short" else 0))
        rc = fn(_r(ctx), _r(prm), _r(q), _r(Dims(n, h, w, cin)), _p(x), _r(fdims), filt, _r(Dims(1, 1, 1, oc)),
                _p(bias), _r(Dims(n, oh, ow, oc)), _p(out))
    _ALIVE.clear()
    assert rc == 0, f"{c.kernel} returned {rc}"
    return out


def _assert_same(got, want, what):
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        raise AssertionError(f"{what}: {len(bad)} of {want.size} outputs differ; first at {tuple(bad[0])}: "
                             f"got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", KINDS)
def test_host_kernel_matches_dense_reference(lib, kind, op):
    for i, c in enumerate(random_cases(op, kind)):
        what = f"{c.kernel} case {i} w{c.w.shape} x{c.x.shape} {c.p} {c.st.meta}"
        if OP_BASE[op] == "conv":
            for scratch in ("full", "none", "misaligned", "short"):
                _assert_same(run_host(lib, c, scratch), c.expected, f"{what} scratch={scratch}")
        else:
            _assert_same(run_host(lib, c), c.expected, what)


def test_every_index_width_and_odd_int4_rows(lib):
    """Clustered indices of every width 1..8 (K = 2..256) on each op, and int4 rows that start mid-byte (odd K)."""
    rng = np.random.default_rng(11)
    seen = set()
    for op in OPS:
        for _ in range(40):
            c = make_case(op, "clustered", rng)
            seen.add(c.st.meta["bits"])
            _assert_same(run_host(lib, c, "full" if OP_BASE[op] == "conv" else "none"), c.expected,
                         f"{c.kernel} bits={c.st.meta['bits']}")
        c = make_case(op, "int4", rng, **({"depth": 37} if op == "fc" else {"cin": 3} if op != "depthwise" else {}))
        _assert_same(run_host(lib, c, "none"), c.expected, f"{c.kernel} int4")
    assert seen == set(range(1, 9))


@pytest.mark.parametrize("kind", KINDS)
def test_output_over_input_at_the_planners_offset(lib, kind):
    """The planner lets a conv write its output over its own input, d bytes before it, with d from
    conv_inplace_offset for the order the kernel keeps (compressed: four pixels at a time for conv, sixteen for
    depthwise, aligned; tinyaot_nn.h). The C kernels doing so must still give the reference's outputs."""
    from tinyaot.ops.compressed import CONV_PIXELS_AT_ONCE, DW_PIXELS_AT_ONCE
    from tinyaot.ops.conv import conv_inplace_offset

    rng = np.random.default_rng(31)
    layers = [("pointwise", dict(h=9, w=9, cin=8, cout=16)), ("conv3x3", dict(h=9, w=7, cin=8, cout=8, groups=1)),
              ("depthwise", dict(h=9, w=7, cin=8, ch_mult=1)), ("depthwise", dict(h=11, w=6, cin=6, ch_mult=1)),
              ("depthwise", dict(h=7, w=5, cin=3, ch_mult=2))]
    overlapped = 0
    for op, spec in layers:
        for _ in range(3):
            c = make_case(op, kind, rng, **spec)
            pads = (c.p["pad"][0], c.p["pad"][1])
            group = DW_PIXELS_AT_ONCE if op == "depthwise" else CONV_PIXELS_AT_ONCE
            d = conv_inplace_offset(c.x.shape, c.expected.shape, c.p["stride"], pads, aligned_group=group)
            if c.p["dilation"] != (1, 1):
                continue  # conv_inplace_offset's window origin bound assumes what Conv.inplace_offset is given
            d = -(-d // 4) * 4
            overlapped += d < c.expected.size
            scratch = "full" if OP_BASE[op] == "conv" else "none"
            _assert_same(run_host(lib, c, scratch, overlap=d), c.expected, f"{c.kernel} {op} overlap {d}")
    assert overlapped >= 5  # the buffers really overlapped in most cases


def test_depthwise_windows_over_64_taps(lib):
    """Windows of more than 64 taps leave the four-channel tiles for per-channel lists of nonzero taps, decoded in
    passes of 32 (tinyaot_nn_compressed.h): every kind, dense-ish and sparse rows, border and interior pixels."""
    rng = np.random.default_rng(17)
    for kind in KINDS:
        for kh, kw in ((9, 9), (3, 25)):
            for density in (None, 0.2):
                c = make_case("depthwise", kind, rng, kh=kh, kw=kw, h=kh + 2, w=kw + 3, density=density)
                assert c.w.shape[1] * c.w.shape[2] > 64
                _assert_same(run_host(lib, c), c.expected, f"{c.kernel} {c.w.shape} density {density}")


def test_all_zero_and_all_dense_sparse_rows(lib):
    """Sparse storages at density 0 (nothing stored: bias only) and 1 (no zero to skip) are still exact."""
    rng = np.random.default_rng(5)
    for kind in ("sparse_bitmap", "sparse_rle"):
        for op in OPS:
            for density in (0.0, 1.0):
                c = make_case(op, kind, rng, density=density)
                _assert_same(run_host(lib, c, "full" if OP_BASE[op] == "conv" else "none"), c.expected,
                             f"{c.kernel} density {density}")


# ====================================================================================================================
# Weights decoded once per call for the dense kernels (tinyaot_decode.h, tinyaot/ops/decoded.py)
# ====================================================================================================================
class DecodedWeights(ctypes.Structure):  # tinyaot_decoded_weights (tinyaot_nn_types.h)
    _fields_ = [("packed", VP), ("codebooks", VP)] + [(n, ctypes.c_int32) for n in
                                                      ("bits", "k", "region", "div", "mod", "count", "cycle")]


DECODE_SHIM = """#include "tinyaot_decode.h"
void shim_decode(const tinyaot_decoded_weights *f, int32_t first, int32_t n, int8_t *dst)
{
    tinyaot_decode(f, first, n, dst);
}
"""


@pytest.mark.parametrize("layout_name", ["fold", "helium", "dw3x3"])
def test_decoded_layouts_give_the_dense_kernels_weights(layout_name, tmp_path):
    """tinyaot_decode (host C) turns the codes that decoded.layout_codes writes back into the dense kernel's weight
    layout (the positions it reads), whole and tile by tile, for int4 and for clustered weights with one codebook
    per group of 4 or 16 channels and per channel (group_size 1: the block layouts' runs of one channel, cycle 4),
    at index widths 2..8; starts and lengths off the word and block boundaries too (the word paths' heads and
    tails)."""
    from tinyaot.ops import decoded
    from tinyaot.ops.depthwise3x3 import arrange_weights
    from tinyaot.ops.fully_connected import interleave_quads
    from tinyaot.ops.mve import block_filter
    src = tmp_path / "shim.c"
    src.write_text(DECODE_SHIM)
    shim = ctypes.CDLL(str(compile_shared([src, KERNELS_DIR / "tinyaot_decode.c"], [KERNELS_DIR],
                                          extra_flags=("-Wpedantic", "-Werror"))))
    rng = np.random.default_rng(23)
    for kind, group_size, k in (("int4", None, 16), ("clustered", 1, 16), ("clustered", 1, 32), ("clustered", 1, 3),
                                ("clustered", 4, 16), ("clustered", 4, 32), ("clustered", 16, 20),
                                ("clustered", 16, 256), ("clustered", 1, 200)):
        dw = layout_name == "dw3x3"
        out_c, row = 16, 9 if dw else int(rng.choice([8, 36, 64]))
        shape = (1, 3, 3, out_c) if dw else (out_c, 1, 1, row)
        if kind == "int4":
            values, st = make_weights("int4", shape, dw, rng)
        else:
            groups = -(-out_c // group_size)
            cbs = np.stack([rng.choice(np.arange(-128, 128), k, replace=False) for _ in range(groups)]).astype(np.int8)
            r = cbs[np.arange(out_c) // group_size][np.arange(out_c)[:, None], rng.integers(0, k, (out_c, row))]
            values = _rows_to_values(r, shape, dw).astype(np.int8)
            st = encode_clustered(values, cbs, group_size, dw)
        t = Tensor("w", shape, "int8", values, None, st)
        if layout_name == "fold":
            layout, (region, div, mod, cycle) = interleave_quads(values.reshape(out_c, -1)), \
                decoded.block_layout(t, 4 * row, 4)
        elif layout_name == "helium":
            layout = block_filter(values.reshape(out_c, -1))
            region, div, mod, cycle = decoded.block_layout(t, len(layout) // (out_c // 4), 16)
        else:
            layout, (region, div, mod, cycle) = arrange_weights(values), decoded.block_layout(t, 36, 1)
        assert (cycle == 4) == (kind == "clustered" and group_size == 1)
        # Helium's padding past each row's K (what the kernel never uses: any code, checked as its decoded value)
        free = block_filter(np.ones((out_c, row), np.int8)) == 0 if layout_name == "helium" else None
        codes = decoded.layout_codes(t, layout, region, div, mod, "w", free, cycle)
        used = np.ones(layout.size, bool) if free is None else ~free
        arrays = {c.name: np.ascontiguousarray(c.values) for c in codes.consts if hasattr(c, "values")}
        fields = codes.consts[-1].fields  # the struct: its arrays by name (int4: no codebook, NULL)
        f = DecodedWeights(*(VP(arrays[a].ctypes.data) if a in arrays else None for a in fields[:2]), *fields[2:])
        block = layout.size // (out_c // 4)
        for first, n in ((0, layout.size), (block, 2 * block), (3 * block, block), (5, layout.size - 5),
                         (block + 3, 37)):
            dst = np.full(n + 1, SENTINEL, np.int8)
            shim.shim_decode(ctypes.byref(f), first, n, VP(dst.ctypes.data))
            keep = used[first:first + n]
            assert np.array_equal(dst[:n][keep], layout[first:first + n][keep]), (layout_name, kind, group_size, k,
                                                                                  first, n)
            assert dst[n] == SENTINEL


def test_clustered_kernels_reject_inconsistent_parameters(lib):
    rng = np.random.default_rng(3)
    c = make_case("fc", "clustered", rng)
    for bad in ({"bits": 0}, {"bits": 9}, {"k": 0}, {"group_size": 0}, {"row_bytes": 0}):
        st = WeightStorage("clustered", c.st.arrays, {**c.st.meta, **bad})
        keep: list = []
        fn = lib.tinyaot_fully_connected_s8_clustered
        mult, shift = np.ascontiguousarray(c.mult, np.int32), np.ascontiguousarray(c.shift, np.int32)
        q = PerChannelQuant(_p(mult), _p(shift))
        prm = FcParams(0, 0, 0, Activation(-128, 127))
        out = np.zeros(c.expected.shape, np.int8)
        b, d = c.x.shape
        o = c.w.shape[0]
        rc = fn(None, _r(prm), _r(q), i32(1), _r(Dims(b, 1, 1, d)), _p(c.x), _r(Dims(d, 1, 1, o)),
                _filter_arg(st, keep), None, None, _r(Dims(b, 1, 1, o)), _p(out))
        assert rc == -1, bad


# ====================================================================================================================
# (b) the same C on Cortex-M0 and Cortex-M4 under QEMU
# ====================================================================================================================
def _c_array(name: str, arr, ctype: str) -> str:
    flat = np.asarray(arr).ravel()
    vals = ",".join(str(int(v)) for v in flat) or "0"
    return f"static const {ctype} {name}[{max(flat.size, 1)}] = {{{vals}}};\n"


def _c_filter(pre: str, st: WeightStorage) -> tuple[str, str]:
    """C definitions of a storage and the filter argument expression (as tinyaot/ops/compressed.py emits them)."""
    a = st.arrays
    if st.kind == "int4":
        return _c_array(pre + "packed", a["packed"], "uint8_t"), pre + "packed"
    if st.kind == "clustered":
        m = st.meta
        d = _c_array(pre + "cb", a["codebooks"], "int8_t") + _c_array(pre + "packed", a["packed"], "uint8_t")
        d += (f"static const tinyaot_clustered_weights {pre}wt = {{{pre}cb, {pre}packed, {m['bits']}, {m['k']}, "
              f"{m['group_size']}, {m['row_bytes']}}};\n")
        return d, f"&{pre}wt"
    first, stype = (("bitmap", "tinyaot_sparse_weights") if st.kind == "sparse_bitmap"
                    else ("runs", "tinyaot_rle_weights"))
    d = _c_array(pre + first, a[first], "uint8_t") + _c_array(pre + "values", a["values"], "int8_t")
    d += _c_array(pre + "rows", a["row_offsets"], "int32_t")
    d += f"static const {stype} {pre}wt = {{{pre}{first}, {pre}values, {pre}rows}};\n"
    return d, f"&{pre}wt"


def c_call(c: Case, pre: str, ctx: str, out: str) -> tuple[str, str]:
    """Declarations and the statements calling c's kernel into `out` (rc holds the status)."""
    p = c.p
    if c.st.kind == "dense":
        decl, filt = _c_array(pre + "w", c.w, "int8_t"), pre + "w"
    else:
        decl, filt = _c_filter(pre, c.st)
    decl += _c_array(pre + "in", c.x, "int8_t") + _c_array(pre + "mult", c.mult, "int32_t")
    decl += _c_array(pre + "shift", c.shift, "int32_t")
    bias = "NULL"
    if c.bias is not None:
        decl += _c_array(pre + "bias", c.bias, "int32_t")
        bias = pre + "bias"
    act = f"{{{p['act_min']}, {p['act_max']}}}"
    s = f"    {{\n    const tinyaot_per_channel_quant_params q = {{{pre}mult, {pre}shift}};\n"
    if c.op == "fc":
        b, d = c.x.shape
        o = c.w.shape[0]
        s += (f"    const tinyaot_dims in_d = {{{b}, 1, 1, {d}}}, f_d = {{{d}, 1, 1, {o}}}, b_d = {{1, 1, 1, {o}}}, "
              f"o_d = {{{b}, 1, 1, {o}}};\n"
              f"    const tinyaot_fc_params prm = {{{p['input_offset']}, {p['filter_offset']}, {p['output_offset']}, "
              f"{act}}};\n"
              f"    rc = {c.kernel}({ctx}, &prm, &q, {int(p['per_channel'])}, &in_d, {pre}in, &f_d, {filt}, &b_d, "
              f"{bias}, &o_d, {out});\n    }}\n")
        return decl, s
    n, h, w, cin = c.x.shape
    oh, ow = p["out_hw"]
    oc = c.expected.shape[3]
    geo = (f"{p['input_offset']}, {p['output_offset']}, {{{p['stride'][0]}, {p['stride'][1]}}}, "
           f"{{{p['pad'][0]}, {p['pad'][1]}}}, {{{p['dilation'][0]}, {p['dilation'][1]}}}, {act}")
    ptype = "tinyaot_dw_conv_params" if c.op == "depthwise" else "tinyaot_conv_params"
    if c.op == "depthwise":
        geo += f", {p['ch_mult']}"
    s += (f"    const tinyaot_dims in_d = {{{n}, {h}, {w}, {cin}}}, f_d = {{{', '.join(map(str, c.w.shape))}}}, "
          f"b_d = {{1, 1, 1, {oc}}}, o_d = {{{n}, {oh}, {ow}, {oc}}};\n"
          f"    const {ptype} prm = {{{geo}}};\n"
          f"    rc = {c.kernel}({ctx}, &prm, &q, &in_d, {pre}in, &f_d, {filt}, &b_d, {bias}, &o_d, {out});\n    }}\n")
    return decl, s


def firmware_source(cases: list[Case]) -> str:
    out_size = max(c.expected.size for c in cases)
    scratch_words = max([conv_scratch_bytes(c.w.shape[1:3], c.w.shape[3]) // 4 for c in cases
                         if OP_BASE[c.op] == "conv"] + [1])
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn.h"\n',
             "void harness_puts(const char *s);\n", f"static int8_t out_buf[{out_size}];\n",
             f"static uint32_t scratch_buf[{scratch_words}];\n",
             "static const tinyaot_context nctx = {NULL, 0};\n",
             "static const tinyaot_context sctx = {scratch_buf, (int32_t)sizeof scratch_buf};\n",
             "static int mismatches(const int8_t *a, const int8_t *b, int n)\n"
             "{\n    int bad = 0, i;\n    for (i = 0; i < n; i++) bad += a[i] != b[i];\n    return bad;\n}\n"]
    calls = []
    for i, c in enumerate(cases):
        pre = f"c{i}_"
        parts.append(_c_array(pre + "exp", c.expected, "int8_t"))
        paths = [("&nctx", "stack")] + ([("&sctx", "scratch")] if OP_BASE[c.op] == "conv" else [])
        body = [f"static int case_{i}(void)\n{{\n    int rc = 0;\n    int bad = 0;\n"]
        decl = ""
        for ctx, _ in paths:
            d, call = c_call(c, pre, ctx, "out_buf")
            decl = d
            body.append(f"    memset(out_buf, {SENTINEL}, sizeof out_buf);\n" + call +
                        f"    bad += rc != 0 ? 1000 : mismatches(out_buf, {pre}exp, {c.expected.size});\n")
        body.append("    return bad;\n}\n")
        parts += [decl, "".join(body)]
        calls.append(f'    if (case_{i}() != 0) {{ harness_puts("FAIL {c.kernel} {i}\\n"); fails++; }}\n')
    parts.append("int main(void)\n{\n    int fails = 0;\n    (void)nctx;\n    (void)sctx;\n")
    parts += calls
    parts.append('    harness_puts(fails ? "SOME FAILED\\n" : "ALL PASSED\\n");\n    return fails != 0;\n}\n')
    return "".join(parts)


def _qemu_cases() -> list[Case]:
    """Every (kind, op) pair, its first random layers that fit the micro:bit (16 KiB RAM, 256 KiB flash)."""
    cases = []
    for kind in KINDS:
        for op in OPS:
            fit = [c for c in random_cases(op, kind) if c.expected.size <= 1200 and c.x.size <= 6000
                   and (OP_BASE[op] != "conv" or conv_scratch_bytes(c.w.shape[1:3], c.w.shape[3]) <= 2048)]
            cases += fit[:4]
    rng = np.random.default_rng(23)
    for kind in KINDS:  # a window over 64 taps: the per-channel tap lists
        cases.append(make_case("depthwise", kind, rng, kh=9, kw=9, h=10, w=11, cin=3, ch_mult=1))
    for k, depth in ((32, 77), (17, 24)):  # 5-bit indices: the DSP row pairs (cl_dot2_books5), tails 5 and 0
        cases.append(make_case("fc", "clustered", rng, k=k, depth=depth, out=5))
    return cases


@pytest.mark.parametrize("cpu", ["cortex-m0", "cortex-m4"])
def test_cortex_m_kernels_match_reference_under_qemu(arm_runner, cpu):
    cases = _qemu_cases()
    elf = arm_runner.build(cpu, "compressed", firmware_source(cases), SOURCES, [KERNELS_DIR],
                           ("-Wall", "-Wextra", "-Werror"))
    rc, out = arm_runner.run(cpu, elf)
    assert "ALL PASSED" in out and rc == 0, f"{cpu}: {len(cases)} cases, exit {rc}:\n{out[-3000:]}"


# ====================================================================================================================
# (c) executed instructions under QEMU: dense against each compressed kind
# ====================================================================================================================
BENCH_LAYERS = {
    # kws_dscnn's pointwise layers are 64 -> 64 channels; 8x8 pixels keep input and output within the micro:bit
    "pointwise": dict(op="pointwise", h=8, w=8, cin=64, cout=64),
    "fc": dict(op="fc", batches=1, depth=256, out=64),
    "depthwise": dict(op="depthwise", h=8, w=8, cin=64, ch_mult=1),  # 3x3, pads 1, stride 1 (drawn until so)
}


def _bench_case(layer: str, kind: str, density: float = 0.5) -> Case:
    spec = dict(BENCH_LAYERS[layer])
    op = spec.pop("op")
    rng = np.random.default_rng(2024)
    while True:  # the same geometry for every kind: redraw until the random parts take the plain form
        c = make_case(op, kind, rng, density=density, k=16, **spec)  # clustered: 16 entries, 4-bit indices
        if op == "fc" or (c.p["stride"] == (1, 1) and c.x.shape[0] == 1 and c.p["dilation"] == (1, 1)
                          and (op != "depthwise" or c.w.shape[1:3] == (3, 3) and c.p["pad"] == (1, 1)
                               and tuple(c.p["out_hw"]) == (8, 8))):
            return c


def bench_macs(c: Case) -> int:
    return int(np.prod(c.expected.shape)) * int(np.prod(c.w.shape[1:3] if c.op == "depthwise" else c.w.shape[1:]))


def _dense_call(c: Case, pre: str) -> tuple[str, str]:
    """The dense kernel on the same layer, as generated code calls it (conv: no scratch for 64 input channels)."""
    dense = Case(c.op, c.kind, c.p, c.x, c.w, WeightStorage("dense"), c.bias, c.mult, c.shift, c.expected)
    return c_call(dense, pre, "&nctx", "out_buf")


def bench_source(layer: str, density: float) -> tuple[str, list[str]]:
    """Firmware running the dense kernel, then each compressed kind, on one layer (`density` nonzero weights for
    the sparse kinds), each call between two tinyaot_mark() calls and checked against the reference."""
    parts = ['#include <stddef.h>\n#include <string.h>\n#include "tinyaot_nn.h"\n',
             "void harness_puts(const char *s);\n",
             "__attribute__((noinline)) void tinyaot_mark(void) { __asm__ volatile(\"\" ::: \"memory\"); }\n"]
    cases = [_bench_case(layer, k, density) for k in KINDS]
    out_size = max(c.expected.size for c in cases)
    scratch = max(conv_scratch_bytes(c.w.shape[1:3], c.w.shape[3]) for c in cases) // 4 if layer == "pointwise" else 1
    parts += [f"static int8_t out_buf[{out_size}];\n", f"static uint32_t scratch_buf[{scratch}];\n",
              "static const tinyaot_context nctx = {NULL, 0};\n",
              "static const tinyaot_context sctx = {scratch_buf, (int32_t)sizeof scratch_buf};\n",
              "static int mismatches(const int8_t *a, const int8_t *b, int n)\n"
              "{\n    int bad = 0, i;\n    for (i = 0; i < n; i++) bad += a[i] != b[i];\n    return bad;\n}\n"]
    runs = [("dense", cases[2], _dense_call(cases[2], "d_"))]  # dense on the sparse layer's weights
    runs += [(c.kind, c, c_call(c, f"k{i}_", "&sctx", "out_buf")) for i, c in enumerate(cases)]
    body = ["int main(void)\n{\n    int rc = 0;\n    int bad = 0;\n    (void)nctx;\n    (void)sctx;\n"]
    for i, (label, c, (decl, call)) in enumerate(runs):
        parts.append(decl + _c_array(f"e{i}_exp", c.expected, "int8_t"))
        body.append(f"    memset(out_buf, {SENTINEL}, sizeof out_buf);\n    tinyaot_mark();\n" + call +
                    f"    bad += rc != 0 ? 1000 : mismatches(out_buf, e{i}_exp, {c.expected.size});\n")
    body.append('    tinyaot_mark();\n    harness_puts(bad ? "SOME FAILED\\n" : "ALL PASSED\\n");\n'
                "    return bad != 0;\n}\n")
    return "".join(parts + body), [r[0] for r in runs]


def instruction_counts(arm_runner, cpu: str, layer: str, density: float = 0.5) -> dict[str, int]:
    """{kind: instructions} of one call of each kernel on the layer (outputs checked == reference first)."""
    from tinyaot.boards import load_board
    from tinyaot.toolchain.qemu import run_qemu

    board = {"cortex-m0": "microbit", "cortex-m4": "mps2-an386"}[cpu]
    src, labels = bench_source(layer, density)
    elf = arm_runner.build(cpu, f"bench-{layer}-{density}", src, SOURCES + DENSE_SOURCES, [KERNELS_DIR],
                           ("-Wall", "-Wextra", "-Werror"))
    res = run_qemu(elf, load_board(board), elf.parent / "run", timeout_s=60)
    assert res.exit_code == 0 and "ALL PASSED" in res.stderr + res.stdout, res.stderr[-2000:]
    # marks: one before each call and one after the last, so segment i is call i (plus the mark's own few)
    assert len(res.segments) == len(labels), res.segments
    return dict(zip(labels, res.segments))


def _report(cpu, layer, density, n) -> str:
    macs = bench_macs(_bench_case(layer, "sparse_bitmap", density))
    return (f"{cpu} {layer} ({macs} MACs; sparse kinds {100 * (1 - density):.0f} % zeros): " +
            ", ".join(f"{k} {v} ({v / macs:.2f}/MAC)" for k, v in n.items()))


@pytest.mark.parametrize("cpu", ["cortex-m0", "cortex-m4"])
def test_sparse_kernels_execute_fewer_instructions_than_dense(arm_runner, cpu):
    """Half the weights zero: the bitmap and run-length kernels skip them. Figures printed (pytest -s).

    Pointwise conv: both sparse kernels beat dense on both cores (four pixels share each decoded value). Fully
    connected with one input row: each stored value serves one multiply-accumulate, so the run-length kernel
    beats plain-C dense on the M0 at 50 %, and on the M4, whose dense kernel does two SIMD products per
    instruction, both sparse kernels do at 90 %."""
    pw = instruction_counts(arm_runner, cpu, "pointwise", 0.5)
    print("\n" + _report(cpu, "pointwise", 0.5, pw))
    fc = instruction_counts(arm_runner, cpu, "fc", 0.5)
    print(_report(cpu, "fc", 0.5, fc))
    fc90 = instruction_counts(arm_runner, cpu, "fc", 0.1)
    print(_report(cpu, "fc", 0.1, fc90))
    # depthwise is not measured here: its count was only printed (4-channel tiles, within ~25 % of dense, see
    # tinyaot_nn_compressed.h), a figure with no line to hold, for a build and a QEMU run per core; its bit-exactness
    # is test_cortex_m_kernels_match_reference_under_qemu's, the models' instructions ci/compression_benchmark.py's
    for kind in ("sparse_bitmap", "sparse_rle"):
        assert pw[kind] < pw["dense"], f"{cpu} pointwise: {kind} {pw[kind]} >= dense {pw['dense']}"
        assert fc90[kind] < fc[kind] and fc90[kind] < fc90["dense"], f"{cpu} fc 90 % sparse: {kind}"
    if cpu == "cortex-m0":
        assert fc["sparse_rle"] < fc["dense"], f"{cpu} fc: run-length {fc['sparse_rle']} >= dense {fc['dense']}"


# ====================================================================================================================
# (d) end to end: kws_dscnn compressed, deployed and verified under QEMU on an M4
# ====================================================================================================================
@pytest.mark.parametrize("compression,kinds", [({"clusters": 16}, {"clustered", "int4"}),
                                               ({"prune": 0.5}, {"sparse_bitmap", "sparse_rle"}),
                                               ({"weight_bits": 4}, {"int4"})])
def test_kws_dscnn_compressed_deploys_and_verifies(tmp_path, cal_dir, compression, kinds):
    """The compression pipeline stores the weights compressed; codegen emits the compressed kernels and arrays;
    the firmware under QEMU gives exactly the numpy reference's outputs (which run on the decoded values). The
    dense figures compared with are the report's own (compression.uncompressed: the same model, calibration and
    board without compression, built and run under QEMU by the same deploy)."""
    from shared_data import MODELS, few_calibration_samples
    from tinyaot.api import deploy

    out = tmp_path / "out"
    # storage, kernels and bit-exactness, not accuracy: 16 calibration samples keep the reconstruction short
    report = deploy(MODELS / "kws_dscnn.onnx", "mps2-an386", few_calibration_samples(cal_dir, "kws_dscnn"), out,
                    compression=compression, verify_samples=2).report
    v, m = report["verify"], report["memory"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    weighted = [l for l in report["layers"] if l.get("storage")]
    used = {l["storage"] for l in weighted}
    assert used & kinds and used <= kinds | {"dense"}, used
    if "clusters" in compression:  # codebooks, but the final fully connected layer (each weight used once) on its grid
        grid = [l for l in weighted if (l.get("clusters") or {}).get("form") == "grid"]
        assert len(grid) == 1 and grid[0]["storage"] == "int4" and grid[0]["kernel"].startswith(
            "tinyaot_fully_connected") and "clustered" in used, [(l["name"], l["storage"]) for l in weighted]
    for layer in weighted:  # the kernel follows the storage; weights_bytes counts what the storage keeps
        if layer["storage"] != "dense":
            suffix = {"int4": "_s4", "clustered": "_s8_clustered", "sparse_bitmap": "_s8_sparse",
                      "sparse_rle": "_s8_rle"}
            # the kind's own kernel (variant generic) or a dense variant on decoded weights (ops/decoded.py)
            assert layer["kernel"].endswith(suffix[layer["storage"]]) if layer["variant"] == "generic" else \
                layer["kernel"].endswith(("_decoded", "_s4_fold", "_s4_fold_rq")), layer
    dense = report["compression"]["uncompressed"]
    assert m["weights_bytes"] < dense["weights_bytes"]
    assert m["flash_bytes"] < dense["flash_bytes"]  # the dense weights are not emitted as well
    c_files = {p.name for p in out.glob("*.c")}
    assert any(k in f for f in c_files for k in ("_s4", "clustered", "sparse", "rle", "_decoded")), c_files
    print(f"\nkws_dscnn {compression}: weights {m['weights_bytes']} B (dense {dense['weights_bytes']}),"
          f" flash {m['flash_bytes']} B (dense {dense['flash_bytes']}), instructions "
          f"{v['instructions']} (dense {dense['instructions']})")
    for layer in weighted:
        if layer["instructions"] and layer.get("instructions_uncompressed"):
            print(f"  {layer['kernel']:40s} {layer['weights_bytes']:6d} B (dense {layer['weights_bytes_dense']:6d})"
                  f" {layer['instructions']:9d} insns (dense {layer['instructions_uncompressed']:9d})")
