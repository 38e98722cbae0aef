"""onnxruntime baseline: float predictions, onnxruntime's static int8 QDQ model, and top-1, on the real KWS model."""

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.compress.ort_baseline import (
    float_predictions,
    int8_session,
    ort_int8_predictions,
    ort_quantize_static,
    top1,
)
from tinyaot.errors import TinyaotError
from tinyaot.frontend.normalize import flatten_gemm_biases
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

from shared_data import DATA, MODELS

KWS_MODEL = MODELS / "kws_dscnn.onnx"
KWS_DATA = DATA / "kws01.npz"
MNIST_MODEL = MODELS / "mnist8_opset13.onnx"
MNIST_DATA = DATA / "mnist01.npz"

# Benchmark convention (shared/models/README.md): calibrate on the first 100 samples, evaluate on the others.
N_CAL, N_EVAL = 100, 200


@pytest.fixture(scope="module")
def kws():
    d = np.load(KWS_DATA)
    return d["x"], d["y"]


@pytest.fixture(scope="module")
def kws_qdq(kws, tmp_path_factory):
    x, _ = kws
    out = tmp_path_factory.mktemp("ort_q") / "kws_qdq.onnx"
    return ort_quantize_static(KWS_MODEL, {"input_1": x[:N_CAL]}, out)


@pytest.fixture(scope="module")
def kws_eval(kws):
    x, y = kws
    return x[N_CAL:N_CAL + N_EVAL], y[N_CAL:N_CAL + N_EVAL]


def _plain_run(model_path, name, x):
    """The float model run without tinyaot's code: one plain session, one sample at a time."""
    sess = ort.InferenceSession(str(model_path), session_options(), providers=["CPUExecutionProvider"])
    return np.stack([sess.run(None, {name: x[i:i + 1]})[0][0] for i in range(len(x))])


def test_float_predictions_match_a_plain_session(kws_eval):
    x, y = kws_eval
    got = float_predictions(KWS_MODEL, {"input_1": x})
    want = _plain_run(KWS_MODEL, "input_1", x)
    assert got.shape == (N_EVAL, 12)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    independent_top1 = float(np.count_nonzero(want.argmax(axis=1) == y)) / len(y)
    assert top1(got, y) == independent_top1
    assert independent_top1 > 0.8  # a trained 12-class model, not chance: guards against a data/model mix-up


def test_ort_int8_top1_within_5_points_of_float(kws_eval, kws_qdq):
    x, y = kws_eval
    f = float_predictions(KWS_MODEL, {"input_1": x})
    q = ort_int8_predictions(kws_qdq, {"input_1": x})
    assert q.shape == f.shape
    # Quantization really happened: int8 softmax outputs are multiples of a coarse step, not the float values.
    assert not np.allclose(q, f, atol=1e-4)
    assert abs(top1(q, y) - top1(f, y)) <= 0.05


def test_qdq_model_is_int8_per_channel(kws_qdq):
    m = onnx.load(str(kws_qdq))
    inits = {t.name: t for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    ops = [n.op_type for n in m.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    weighted = [n for n in m.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    assert len(weighted) == 10  # 9 Conv + 1 MatMul in kws_dscnn
    per_channel = 0
    for n in weighted:
        dq = producer[n.input[1]]  # weights reach the op only through a DequantizeLinear of an int8 constant
        assert dq.op_type == "DequantizeLinear"
        assert inits[dq.input[0]].data_type == TensorProto.INT8
        scale = numpy_helper.to_array(inits[dq.input[1]])
        per_channel += scale.size > 1
    assert per_channel >= 9  # every Conv has one scale per output channel
    # Activations are int8 too (QInt8, not the default-elsewhere uint8).
    q_zero_points = [inits[n.input[2]] for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert q_zero_points and all(z.data_type == TensorProto.INT8 for z in q_zero_points)


def test_int8_session_allows_int8_qdq_fusion(kws_qdq):
    opts = int8_session(kws_qdq).get_session_options()
    assert opts.get_session_config_entry("session.qdqisint8allowed") == "1"


def test_gemm_with_2d_bias_quantizes(tmp_path):
    # mnist8's MatMul + Add becomes a Gemm with a [1, 10] bias in quant_pre_process, which onnxruntime's per-channel
    # bias check cannot handle (its issue #24815); ort_quantize_static must still produce a working int8 model.
    d = np.load(MNIST_DATA)
    x, y = d["x"], d["y"]
    q = ort_quantize_static(MNIST_MODEL, {"Input3": x[:N_CAL]}, tmp_path / "mnist_qdq.onnx")
    xe, ye = x[N_CAL:N_CAL + N_EVAL], y[N_CAL:N_CAL + N_EVAL]
    f_top1 = top1(float_predictions(MNIST_MODEL, {"Input3": xe}), ye)
    assert f_top1 > 0.9
    assert abs(top1(ort_int8_predictions(q, {"Input3": xe}), ye) - f_top1) <= 0.05


def _gemm_model(bias_shape, batch):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "B")
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["h"]), helper.make_node("Gemm", ["h", "W2", "B2"], ["y"]),
             helper.make_node("Gemm", ["x", "W", "B"], ["z"])]  # shares W and B with the first Gemm
    w2 = numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "W2")
    b2 = numpy_helper.from_array(rng.standard_normal(bias_shape[:-1] + (2,)).astype(np.float32), "B2")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 4])],
        [w, b, w2, b2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_flatten_gemm_biases_keeps_results_and_sharing(tmp_path):
    model = _gemm_model((1, 4), 1)
    before = tmp_path / "before.onnx"
    onnx.save(model, str(before))
    assert flatten_gemm_biases(model)
    onnx.checker.check_model(model)
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    assert "B" not in inits and "B2" not in inits  # no longer used by anything
    assert {n.input[2] for n in model.graph.node} == {"B_1d", "B2_1d"}
    assert inits["B_1d"] == [4] and inits["B2_1d"] == [2]
    after = tmp_path / "after.onnx"
    onnx.save(model, str(after))
    x = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(float_predictions(before, {"x": x}), float_predictions(after, {"x": x}))
    assert not flatten_gemm_biases(_gemm_model((4,), 1))  # already 1-D: nothing to do


def test_symbolic_batch_runs_batched_and_fixed_batch_loops(tmp_path):
    x = np.random.default_rng(5).standard_normal((7, 3)).astype(np.float32)
    outs = []
    for batch in ("N", 1):
        path = tmp_path / f"gemm_{batch}.onnx"
        onnx.save(_gemm_model((4,), batch), str(path))
        outs.append(float_predictions(path, {"x": x}))
    # Same numbers either way, and the result of the first output only ("y": [7, 2]).
    assert outs[0].shape == outs[1].shape == (7, 2)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
    m = _gemm_model((4,), 1)
    w, b = (numpy_helper.to_array(t) for t in m.graph.initializer[:2])
    w2, b2 = (numpy_helper.to_array(t) for t in m.graph.initializer[2:])
    np.testing.assert_allclose(outs[1], (x @ w + b) @ w2 + b2, rtol=1e-5, atol=1e-5)


def test_bad_inputs_name_the_problem(kws):
    x, _ = kws
    with pytest.raises(TinyaotError, match="input_1"):
        float_predictions(KWS_MODEL, {"wrong": x[:2]})
    with pytest.raises(TinyaotError, match=r"\[1, 10, 49, 1\]"):
        # Same element count, wrong layout: must not be reshaped silently.
        float_predictions(KWS_MODEL, {"input_1": x[:2].transpose(0, 2, 1, 3)})


def test_top1():
    out = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    assert top1(out, np.array([1, 0, 0, 2])) == 0.75
    assert top1(out[:, None, :], np.array([1, 0, 2, 2])) == 1.0  # [N, 1, C] outputs are fine too
    assert top1(out, np.array([2, 2, 1, 0])) == 0.0
    with pytest.raises(ValueError):
        top1(out, np.array([1, 0]))


def test_the_quantizer_logs_nothing_for_a_standalone_batchnorm(tmp_path, caplog):
    # pt_shapes_resnet has a BatchNormalization after its residual Add: onnxruntime's quantizer logged "Axis 1 is
    # out-of-range for weight 'post_bn.weight'" on the root logger, which `tinyaot evaluate` printed to the user
    root = Path(__file__).resolve().parents[1] / "models"
    with np.load(root / "pt_shapes_resnet_data.npz") as z:
        x = z["x"][:4].astype(np.float32)
    caplog.set_level(logging.WARNING)
    ort_quantize_static(root / "pt_shapes_resnet.onnx", {"x": x}, tmp_path / "q.onnx")
    assert (tmp_path / "q.onnx").exists()
    assert not [r for r in caplog.records if "out-of-range" in r.getMessage()]
    assert logging.getLogger().level == logging.WARNING  # the level is given back
