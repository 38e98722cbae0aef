"""Sigmoid and Tanh at 16 bits (tinyaot/ops/s16_lut.py, a 513-entry table with linear interpolation): for all 65,536
int16 inputs at input ranges from tiny to saturating, the numpy reference is within 1 LSB of the float function
followed by QuantizeLinear's float32 rounding (onnxruntime's int16 QDQ) and within 0.5 + 0.25 LSB of the exact
value (the interpolation's error bound), and the host-compiled C kernel equals it bit for bit (table position
scales 0, small, typical and at the saturation cap). The same sweep runs through onnxruntime's own int16 QDQ for
Sigmoid, Tanh, HardSigmoid and HardSwish."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from spatial_models import host_kernels
from tinyaot.core.quant16 import activation_qparams16
from tinyaot.ops.s16_lut import K_CAP, lut_interp_s16, make_table, position_scale
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

ALL16 = np.arange(-32768, 32768, dtype=np.int64)
RANGES = (1e-4, 0.5, 3.0, 8.0, 12.0, 40.0, 1e5)


def _f(kind, x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x)) if kind == "sigmoid" else np.tanh(x)


@pytest.mark.parametrize("kind", ["sigmoid", "tanh"])
def test_all_inputs_within_one_lsb_of_float_qdq(kind):
    table = make_table(kind)
    for r in RANGES:
        s = activation_qparams16(-r, r).s
        ours = lut_interp_s16(ALL16, table, position_scale(kind, s), kind == "tanh").astype(np.int64)
        x32 = ALL16.astype(np.float32) * np.float32(s)  # DequantizeLinear in float32
        y32 = _f(kind, x32.astype(np.float64)).astype(np.float32)
        qdq = np.clip(np.rint(y32 / np.float32(1.0 / 32768)), -32768, 32767)
        assert np.abs(ours - qdq).max() <= 1, (kind, r)
        exact = np.clip(_f(kind, ALL16 * s) * 32768, -32768, 32767)
        assert np.abs(ours - exact).max() < 0.75, (kind, r, float(np.abs(ours - exact).max()))
    assert lut_interp_s16(np.array([0]), table, 1, kind == "tanh")[0] == (16384 if kind == "sigmoid" else 0)


def test_host_c_equals_numpy_for_all_inputs():
    lib = host_kernels("tinyaot_lut_interp_s16.c")
    fn = lib.tinyaot_lut_interp_s16
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    x16 = np.ascontiguousarray(ALL16.astype(np.int16))
    for kind in ("sigmoid", "tanh"):
        table = np.ascontiguousarray(make_table(kind))
        for k in (0, 1, position_scale(kind, 3.0 / 32767), position_scale(kind, 40.0 / 32767), K_CAP):
            p = np.array([k, int(kind == "tanh")], np.int64)
            out = np.zeros(ALL16.size, np.int16)
            assert fn(x16.ctypes.data, ALL16.size, table.ctypes.data, p.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, lut_interp_s16(ALL16, table, k, kind == "tanh"), err_msg=f"{kind} {k}")


def _ort_int16(op_nodes, s_in, s_out):
    """onnxruntime's int16 QDQ of a float op: DequantizeLinear -> op -> QuantizeLinear (opset 21, unfused), fed
    all 65,536 int16 values."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(v, t), n) for v, t, n in ((s_in, np.float32, "si"), (0, np.int16, "z"),
                                                                        (s_out, np.float32, "so"))]
    nodes = ([helper.make_node("DequantizeLinear", ["q", "si", "z"], ["x"])] + op_nodes
             + [helper.make_node("QuantizeLinear", ["y", "so", "z"], ["qo"])])
    io = [helper.make_tensor_value_info(n, onnx.TensorProto.INT16, [ALL16.size]) for n in ("q", "qo")]
    model = helper.make_model(helper.make_graph(nodes, "qdq16", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 21)])
    opts = session_options()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"q": ALL16.astype(np.int16)})[0].astype(np.int64)


@pytest.mark.parametrize("r", [0.5, 12.0])
def test_all_inputs_within_one_lsb_of_onnxruntime(r):
    """The same sweep against onnxruntime itself (its own float sigmoid / tanh / hard activations) for the four
    interpolated and hard activations."""
    from onnx import helper

    from tinyaot.core.quant16 import exact_multiplier
    from tinyaot.ops.hard_gate_s16 import GATE_BITS, SWISH_DROP, hard_params, hard_sigmoid_s16, hard_swish_s16

    s = activation_qparams16(-r, r).s
    for kind, op in (("sigmoid", "Sigmoid"), ("tanh", "Tanh")):
        ours = lut_interp_s16(ALL16, make_table(kind), position_scale(kind, s), kind == "tanh")
        got = _ort_int16([helper.make_node(op, ["x"], ["y"])], s, 1.0 / 32768)
        assert np.abs(ours - got).max() <= 1, (kind, r)
    for swish in (False, True):
        x = ALL16 * s
        y = x * np.clip(x / 6 + 0.5, 0, 1) if swish else np.clip(0.2 * x + 0.5, 0, 1)
        s_out = activation_qparams16(y.min(), y.max()).s
        alpha = 1.0 / 6.0 if swish else 0.2
        a_coef, b_coef = hard_params(alpha, 0.5, s, "test")
        mult, shift = exact_multiplier(s / (s_out * 2.0 ** SWISH_DROP) if swish else 1.0 / (s_out * 2.0 ** GATE_BITS))
        ours = (hard_swish_s16 if swish else hard_sigmoid_s16)(ALL16, a_coef=a_coef, b_coef=b_coef, mult=mult,
                                                               shift=shift)
        nodes = [helper.make_node("HardSigmoid", ["x"], ["g" if swish else "y"], alpha=alpha, beta=0.5)]
        if swish:
            nodes.append(helper.make_node("Mul", ["x", "g"], ["y"]))  # ONNX's definition of HardSwish
        assert np.abs(ours - _ort_int16(nodes, s, s_out)).max() <= 1, (swish, r)
