"""MaxPool / AveragePool options end to end: ceil_mode=1, count_include_pad=1, auto_pad SAME_UPPER / SAME_LOWER /
VALID, and average pools whose calibrated output range differs from their input's. Each deploy checks C under
QEMU == numpy reference and the layer against onnxruntime's QDQ pool on the same int8 input; `float_model_gap`
checks tinyaot's reading of the attributes against the untouched float model. The count_include_pad kernel is also
checked against its reference on random layers on the host, and the oracle's rewrite of count_include_pad=1
against onnxruntime's own float AveragePool."""
from __future__ import annotations

import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError
from tinyaot.ops.pool import avgpool_count_pad_s8
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

from op_models import calibration, conv_node, deploy_verified, save_model
from spatial_models import Activation, Dims, PoolParams, Tile, float_model_gap, host_kernels, layer_diff, ptr, ref

# Pools keep or requantize values without weights: input rounding (half an input LSB, averaged or not) plus output
# rounding. Measured <= 1.0 here; a window misplaced by one row or a wrong divisor costs several LSB.
FLOAT_GAP_LSB = 1.1


def _pool(tmp_path, op, attrs, in_shape, out_shape, name="pool"):
    node = helper.make_node(op, ["x"], ["y"], name=name, **attrs)
    return save_model(tmp_path / f"{op}.onnx", [node], in_shape, out_shape)


def _kernel(report, op):
    return [l["kernel"] for l in report["layers"] if l["op"] == op]


def test_maxpool_ceil_mode(tmp_path):
    m = _pool(tmp_path, "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1),
              [1, 3, 8, 7], [1, 3, 4, 4])
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 7])
    report = deploy_verified(m, cal, tmp_path / "out")
    assert layer_diff(report, "MaxPool") == 0  # a maximum of int8 values under shared parameters is exact
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


def test_averagepool_ceil_mode_excluding_padding(tmp_path):
    m = _pool(tmp_path, "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
              [1, 3, 6, 7], [1, 3, 4, 4])
    cal = calibration(tmp_path / "cal.npz", [1, 3, 6, 7])
    report = deploy_verified(m, cal, tmp_path / "out")
    assert _kernel(report, "AveragePool") == ["tinyaot_avgpool_s8"]
    assert layer_diff(report, "AveragePool") <= 1
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


def test_averagepool_count_include_pad_with_ceil_mode(tmp_path):
    """The last row and column of windows reach past the end padding: the divisor counts padded cells, not those."""
    m = _pool(tmp_path, "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                            count_include_pad=1), [1, 3, 6, 7], [1, 3, 4, 4])
    cal = calibration(tmp_path / "cal.npz", [1, 3, 6, 7])
    report = deploy_verified(m, cal, tmp_path / "out")
    assert _kernel(report, "AveragePool") == ["tinyaot_avgpool_count_pad_s8"]
    assert layer_diff(report, "AveragePool") <= 1
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


def test_count_include_pad_after_conv_with_asymmetric_pads(tmp_path):
    """A non-zero input zero point (the Conv's output) is what padded cells must stand for."""
    conv, inits = conv_node("x", "c", "w", 2, 3)
    pool = helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[2, 3], strides=[1, 2], pads=[1, 2, 0, 1],
                            count_include_pad=1)
    m = save_model(tmp_path / "conv_pool.onnx", [conv, pool], [1, 2, 5, 6], [1, 3, 5, 4], inits)
    cal = calibration(tmp_path / "cal.npz", [1, 2, 5, 6])
    report = deploy_verified(m, cal, tmp_path / "out")
    assert layer_diff(report, "AveragePool") <= 1
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


@pytest.mark.parametrize("op, auto_pad, extra, out_hw", [
    ("MaxPool", "SAME_UPPER", {}, [3, 4]),
    ("MaxPool", "SAME_LOWER", {}, [3, 4]),
    ("MaxPool", "VALID", {"ceil_mode": 1}, [3, 3]),
    ("AveragePool", "SAME_UPPER", {"count_include_pad": 1}, [3, 4]),
    ("AveragePool", "SAME_LOWER", {"count_include_pad": 1}, [3, 4]),
    ("AveragePool", "SAME_LOWER", {}, [3, 4]),
    ("AveragePool", "VALID", {"ceil_mode": 1}, [3, 3]),
])
def test_auto_pad_matches_the_float_model(tmp_path, op, auto_pad, extra, out_hw):
    """Odd total padding (6 rows, 7 columns, 3x3 windows, stride 2) puts the extra pad on the side auto_pad names."""
    m = _pool(tmp_path, op, dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad=auto_pad, **extra), [1, 2, 6, 7],
              [1, 2, *out_hw])
    cal = calibration(tmp_path / "cal.npz", [1, 2, 6, 7], n=6)
    compiled = compile_model(m, cal)
    (node,) = [n for n in compiled.graph.nodes if n.op == op]
    assert "auto_pad" not in node.attrs
    assert float_model_gap(m, cal) <= FLOAT_GAP_LSB


def test_auto_pad_same_lower_count_include_pad_deploys(tmp_path):
    m = _pool(tmp_path, "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER",
                                            count_include_pad=1), [1, 2, 6, 7], [1, 2, 3, 4])
    report = deploy_verified(m, calibration(tmp_path / "cal.npz", [1, 2, 6, 7]), tmp_path / "out")
    assert layer_diff(report, "AveragePool") <= 1


@pytest.mark.parametrize("pads, requantized", [([1, 1, 1, 1], False), ([0, 0, 0, 0], True)],
                         ids=["padded_keeps_input_params", "unpadded_requantizes"])
def test_averagepool_whose_output_range_is_narrower(tmp_path, pads, requantized):
    """Averaging 4x4 windows of noise shrinks the range ~4x, so onnxruntime's calibration gives the output other
    parameters than the input. A padded pool keeps the input's (TFLite's rule; the divisor varies per window), an
    unpadded one requantizes to the calibrated output's; either way the oracle quantizes onnxruntime's output with
    the parameters tinyaot's output really has, so the layer still agrees within 1 LSB."""
    m = _pool(tmp_path, "AveragePool", dict(kernel_shape=[4, 4], strides=[4, 4], pads=pads), [1, 3, 8, 8],
              [1, 3, 2, 2])
    cal = calibration(tmp_path / "cal.npz", [1, 3, 8, 8], scale=3.0)
    g = compile_model(m, cal).graph
    (node,) = [n for n in g.nodes if n.op == "AveragePool"]
    q_in, q_out = g.tensors[node.inputs[0]].quant, g.tensors[node.outputs[0]].quant
    assert (q_out.s < 0.6 * q_in.s) is requantized and (q_out.s == q_in.s) is (not requantized)
    report = deploy_verified(m, cal, tmp_path / "out")
    assert layer_diff(report, "AveragePool") <= 1
    # the input's rounding (half an input LSB) counts in output LSB as s_in / s_out of them
    assert float_model_gap(m, cal) <= 0.5 * q_in.s / q_out.s + 0.6


def test_ceil_mode_window_starting_in_end_padding_is_refused(tmp_path):
    """ONNX shape inference keeps the last window (output 4), onnxruntime drops it (3): refused, saying why."""
    m = _pool(tmp_path, "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
              [1, 1, 5, 5], [1, 1, 4, 4])
    with pytest.raises(TinyaotError) as err:
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 1, 5, 5], n=2))
    msg = str(err.value)
    assert "MaxPool node 'pool'" in msg and "[4, 4]" in msg and "[3, 3]" in msg and "\n" not in msg


def _float_avgpool(x, nodes, inits=()):
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "g", [xi], [y], list(inits)),
                              opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("k, s, pads", [([3, 3], [2, 2], [1, 1, 1, 1]), ([2, 3], [3, 2], [1, 0, 1, 1]),
                                        ([3, 2], [2, 2], [0, 1, 1, 0])])
def test_oracle_rewrite_of_count_include_pad_equals_onnxruntime_float_pool(k, s, pads):
    """The oracle writes count_include_pad=1 as Pad + AveragePool (onnxruntime's fused int8 pool divides ceil_mode
    windows past the end padding differently). Here the rewrite equals onnxruntime's float AveragePool, on 7x8
    inputs whose last ceil_mode windows reach past the end padding (the first and third layers, both axes). A last
    window starting inside the end padding would make the two differ in size; tinyaot refuses those (see above)."""
    from onnx import numpy_helper

    x = np.random.default_rng(1).standard_normal((1, 2, 7, 8)).astype(np.float32)
    attrs = dict(kernel_shape=k, strides=s, ceil_mode=1)
    direct = _float_avgpool(x, [helper.make_node("AveragePool", ["x"], ["y"], pads=pads, count_include_pad=1,
                                                 **attrs)])
    p = numpy_helper.from_array(np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64), "p")
    rewritten = _float_avgpool(x, [helper.make_node("Pad", ["x", "p"], ["xp"]),
                                   helper.make_node("AveragePool", ["xp"], ["y"], **attrs)], [p])
    assert direct.shape == rewritten.shape
    assert np.allclose(direct, rewritten, atol=1e-6)


def _windows_inside(rng, size, k, s):
    """Pads (begin, end) smaller than the window and an output size with ceil_mode's rule."""
    b, e = int(rng.integers(0, k)), int(rng.integers(0, k))
    span = size + b + e - k
    if span < 0:
        return None
    out = -(-span // s) + 1
    if (out - 1) * s >= size + b:
        out -= 1
    return b, e, out


def test_count_pad_kernel_matches_reference_on_random_layers():
    lib = host_kernels("tinyaot_avgpool_count_pad_s8.c")
    fn = lib.tinyaot_avgpool_count_pad_s8
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32] + [ctypes.c_void_p] * 5
    rng = np.random.default_rng(11)
    done = 0
    while done < 60:
        n, h, w, c = (int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9)),
                      int(rng.integers(1, 7)))
        kh, kw, sh, sw = (int(v) for v in rng.integers(1, 5, 4))
        gy, gx = _windows_inside(rng, h, kh, sh), _windows_inside(rng, w, kw, sw)
        if gy is None or gx is None:
            continue
        (pt, pb, oh), (pl, pr, ow) = gy, gx
        x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
        off = int(rng.integers(-127, 129))
        lo, hi = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)), int(rng.integers(0, 128)))
        want = avgpool_count_pad_s8(x, kernel_hw=(kh, kw), stride_hw=(sh, sw), pads=(pt, pl, pb, pr),
                                    output_hw=(oh, ow), input_offset=off, act_min=lo, act_max=hi)
        out = np.full((n, oh, ow, c), 99, np.int8)
        # named, so that the structures outlive the call (ref() does not keep them alive)
        params, end = PoolParams(Tile(sh, sw), Tile(pt, pl), Activation(lo, hi)), Tile(pb, pr)
        in_d, f_d, o_d = Dims(n, h, w, c), Dims(1, kh, kw, 1), Dims(n, oh, ow, c)
        rc = fn(ref(params), ref(end), off, ref(in_d), ptr(x), ref(f_d), ref(o_d), ptr(out))
        assert rc == 0 and np.array_equal(out, want), (n, h, w, c, kh, kw, sh, sw, pt, pl, pb, pr, off)
        done += 1


def test_count_pad_reference_against_float_definition():
    """The integer reference is the exact average (zero point for padded cells, divisor = cells inside the padded
    input) rounded half away from zero: checked against a float computation of that definition."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 5, 6, 3), dtype=np.int8)
    zp = 17
    got = avgpool_count_pad_s8(x, kernel_hw=(3, 3), stride_hw=(2, 2), pads=(1, 1, 1, 1), output_hw=(3, 3),
                               input_offset=-zp)
    padded = np.pad(x.astype(np.float64) - zp, ((0, 0), (1, 1), (1, 1), (0, 0)))  # real zero = zero point
    for oy in range(3):
        for ox in range(3):
            win = padded[0, oy * 2:oy * 2 + 3, ox * 2:ox * 2 + 3]  # clipped at the padded edge, as numpy slices
            mean = win.sum(axis=(0, 1)) / (win.shape[0] * win.shape[1])
            want = np.sign(mean) * np.floor(np.abs(mean) + 0.5) + zp
            assert np.array_equal(got[0, oy, ox], np.clip(want, -128, 127)), (oy, ox)
