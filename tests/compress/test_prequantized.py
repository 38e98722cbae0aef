"""Pre-quantized (QDQ) models deploy with the parameters they carry, with no calibration.

The QDQ models are onnxruntime's `quantize_static` output of the reference models (first 100 samples of their data
set, per-channel int8 weights, int8 activations). Each is deployed without calibration data and verified under
QEMU; its int8 weights, int32 biases and activation scales must reach the generated graph unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType, quant_pre_process,
                                      quantize_static)

from tinyaot.api import compile_model, deploy, evaluate
from tinyaot.compress.ort_baseline import _SampleReader, ort_quantize_static
from tinyaot.frontend.normalize import flatten_gemm_biases
from tinyaot.errors import TinyaotError
from tinyaot.oracle.reference import run_reference

from shared_data import DATA as FIXTURE_DATA, MODELS

DATA = {"kws_dscnn": "kws01", "ic_resnet8": "ic01", "mnist8_opset13": "mnist01"}
N_CAL = 100


def _samples(model: str) -> tuple[str, np.ndarray]:
    name = onnx.load(str(MODELS / f"{model}.onnx")).graph.input[0].name
    with np.load(FIXTURE_DATA / f"{DATA[model]}.npz") as z:
        return name, z["x"][:N_CAL].astype(np.float32)


@pytest.fixture(scope="module")
def qdq(tmp_path_factory):
    """model name -> path of onnxruntime's QDQ model of it (made once per module)."""
    made: dict[str, Path] = {}
    tmp = tmp_path_factory.mktemp("qdq")

    def get(model: str) -> Path:
        if model not in made:
            name, x = _samples(model)
            # The raw graph's QDQ form (no onnxruntime pre-processing), so the structures checked below do not
            # depend on whether sympy happens to be installed; test_gemm_with_int32_bias covers the other form.
            made[model] = ort_quantize_static(MODELS / f"{model}.onnx", {name: x},
                                              tmp / f"{model}_qdq.onnx", preprocess=False)
        return made[model]

    return get


def _qdq_params(path: Path):
    """What the QDQ model stores: int arrays behind each DequantizeLinear of a constant (by its output name),
    and (scale, zero point) of each QuantizeLinear by the float tensor it quantizes (and of the last
    DequantizeLinear by the graph output it writes, the name tinyaot's output keeps)."""
    m = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    outputs = {o.name for o in m.graph.output}
    consts, acts = {}, {}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            consts[n.output[0]] = inits[n.input[0]]
        elif n.op_type == "QuantizeLinear" or n.op_type == "DequantizeLinear" and n.output[0] in outputs:
            acts[n.output[0] if n.op_type == "DequantizeLinear" else n.input[0]] = (
                np.float32(inits[n.input[1]]), int(inits[n.input[2]]))
    return m, consts, acts


def _check_given_params(path: Path, graph) -> int:
    """Weights and int32 biases bit for bit, activation scales exact; returns how many layers' weights matched."""
    m, consts, acts = _qdq_params(path)
    ours = {n.name: n for n in graph.nodes}
    matched = 0
    for n in m.graph.node:
        if n.op_type not in ("Conv", "MatMul", "Gemm") or n.input[1] not in consts:
            continue
        w = consts[n.input[1]]
        node = ours[n.name]
        got = graph.tensors[node.inputs[1]].data
        assert got.dtype == np.int8, n.name
        if n.op_type == "Conv":
            # ONNX OIHW -> tinyaot's OHWI, or 1HWC for depthwise (channels last)
            want = w.transpose(1, 2, 3, 0) if node.attrs["depthwise"] else w.transpose(0, 2, 3, 1)
            assert np.array_equal(got, want), n.name
        else:
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            want = w if trans_b else w.T  # -> [out, in]
            # A flatten of NHWC data is absorbed by permuting the weight columns (the same way in every row;
            # verification proves the order): the integers themselves are unchanged.
            assert np.array_equal(got, want) or np.array_equal(np.sort(got, 1), np.sort(want, 1)), n.name
        if len(n.input) > 2 and n.input[2] in consts and consts[n.input[2]].dtype == np.int32:
            assert np.array_equal(graph.tensors[node.inputs[2]].data, consts[n.input[2]]), n.name
        matched += 1
    layers = [n for n in graph.nodes if n.op in ("Conv", "FullyConnected", "Add")]
    for node in layers:  # every layer's output has the scale the model gave it (so the check is never vacuous)
        t = graph.tensors[node.outputs[0]]
        assert t.name in acts, t.name
    for name in graph.activations():
        t = graph.tensors[name]
        if name in acts and graph.producer(name) is not None and graph.producer(name).op != "Softmax":
            assert (np.float32(t.quant.s), t.quant.zp) == acts[name], name
    return matched


@pytest.mark.parametrize("model,layers", [("kws_dscnn", 10), ("ic_resnet8", 10), ("mnist8_opset13", 2)])
def test_qdq_model_deploys_without_calibration(qdq, model, layers, tmp_path):
    path = qdq(model)
    result = deploy(path, "mps2-an386", None, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    v, q = report["verify"], report["quantization"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    assert all(l["max_abs_diff"] <= l["tolerance"] for l in v["layers_vs_onnxruntime"])
    assert "random int8" in v["inputs"] and "seed 0" in v["inputs"]
    assert "random int8" in (tmp_path / "out" / "report.md").read_text()
    assert q["calibration_samples"] == 0 and "QuantizeLinear" in q["source"]
    assert result.report["verify"]["outputs_match"]

    compiled = compile_model(path, None)
    assert compiled.prequantized
    assert _check_given_params(path, compiled.graph) == layers
    # The softmax kernel's output is fixed at 1/256, -128; the model's own (calibrated) scale is reported.
    notes = compiled.graph.meta["quantization_notes"]
    assert all(n["op"] == "Softmax" for n in notes) and len(notes) == (model != "mnist8_opset13")


def test_mnist_fc_weights_with_zero_point(qdq):
    """mnist8's fully connected weight is quantized at run time, per tensor and asymmetric (as an activation):
    tinyaot folds that QuantizeLinear with ONNX semantics and keeps the zero point as the kernel's filter offset."""
    path = qdq("mnist8_opset13")
    m, _, acts = _qdq_params(path)
    g = compile_model(path, None).graph
    fc = next(n for n in g.nodes if n.op == "FullyConnected")
    reshape = next(n for n in m.graph.node if n.op_type == "Reshape" and n.output[0] in acts)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    s, zp = acts[reshape.output[0]]
    w = inits[reshape.input[0]].reshape(inits[reshape.input[1]])
    want = np.clip(np.rint(w / s) + zp, -128, 127).astype(np.int8).T  # ONNX QuantizeLinear, then [out, in]
    got = g.tensors[fc.inputs[1]].data
    # the flatten's NCHW -> NHWC order is absorbed by permuting the weight columns, the same way in every row
    assert np.array_equal(np.sort(got, axis=1), np.sort(want, axis=1))
    assert fc.attrs["filter_offset"] == -zp != 0


def test_gemm_with_int32_bias(tmp_path):
    """With onnxruntime's pre-processing (what quantize_static expects), mnist8's MatMul + Add becomes a Gemm
    whose bias is int32: it is kept bit for bit."""
    name, x = _samples("mnist8_opset13")
    pre = tmp_path / "pre.onnx"
    quant_pre_process(str(MODELS / "mnist8_opset13.onnx"), str(pre), skip_symbolic_shape=True)
    m = onnx.load(str(pre))
    if flatten_gemm_biases(m):  # onnxruntime's own workaround need (see ort_baseline)
        onnx.save(m, str(pre))
    out = tmp_path / "gemm_qdq.onnx"
    quantize_static(str(pre), str(out), _SampleReader([{name: x[i:i + 1]} for i in range(len(x))]),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    assert "Gemm" in [n.op_type for n in onnx.load(str(out)).graph.node]
    g = compile_model(out, None).graph
    assert _check_given_params(out, g) == 3
    r = deploy(out, "mps2-an386", None, tmp_path / "out")
    assert r.report["verify"]["outputs_match"] and r.report["verify"]["max_abs_diff_vs_onnxruntime"] <= 1


def test_kws_accuracy_matches_onnxruntime_on_the_same_qdq_model(qdq, tmp_path):
    with np.load(FIXTURE_DATA / "kws01.npz") as z:
        np.savez(tmp_path / "eval.npz", x=z["x"][100:400], y=z["y"][100:400])
    r = evaluate(qdq("kws_dscnn"), None, tmp_path / "eval.npz")
    print(f"kws_dscnn QDQ on kws01[100:400]: tinyaot int8 {100 * r['int8_top1']:.2f} %, onnxruntime int8 "
          f"{100 * r['onnxruntime_int8_top1']:.2f} %, top-1 agreement {100 * r['int8_vs_onnxruntime_agreement']:.2f} %")
    assert r["prequantized"] and r["samples"] == 300 and r["float_top1"] is None
    assert r["int8_top1"] > 0.85
    assert abs(r["int8_top1"] - r["onnxruntime_int8_top1"]) <= 0.01
    assert r["int8_vs_onnxruntime_agreement"] >= 0.98


def test_calibration_only_feeds_verification(qdq, tmp_path):
    path = qdq("kws_dscnn")
    name, x = _samples("kws_dscnn")
    np.savez(tmp_path / "cal.npz", x=x[:5])
    with_cal, without = compile_model(path, tmp_path / "cal.npz"), compile_model(path, None)
    assert "verification only" in with_cal.samples_source
    assert np.array_equal(with_cal.samples[name], x[:5].reshape(with_cal.samples[name].shape))
    for t in with_cal.graph.activations():  # same parameters: the samples calibrated nothing
        a, b = with_cal.graph.tensors[t].quant, without.graph.tensors[t].quant
        assert (a.s, a.zp) == (b.s, b.zp), t
    # the random verification inputs are deterministic and quantize back to the int8 values they came from
    again = compile_model(path, None)
    assert np.array_equal(without.samples[name], again.samples[name])
    q = without.quantize_input(without.samples[name][0])
    assert np.array_equal(without.graph.tensors[name].quant.dequantize(q).astype(np.float32).reshape(-1),
                          without.samples[name][0].reshape(-1))


def test_uint8_activations_are_shifted_exactly(qdq, tmp_path):
    """QUInt8 activations get the same scales as QInt8 and zero points 128 higher: after tinyaot's shift by -128
    the two models must compile to identical parameters and identical int8 outputs."""
    name, x = _samples("kws_dscnn")
    u8 = tmp_path / "kws_u8.onnx"
    quantize_static(str(MODELS / "kws_dscnn.onnx"), str(u8),
                    _SampleReader([{name: x[i:i + 1]} for i in range(len(x))]), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    _, _, acts_u8 = _qdq_params(u8)
    assert all(0 <= zp <= 255 for _, zp in acts_u8.values()) and any(zp > 127 for _, zp in acts_u8.values())
    a, b = compile_model(u8, None), compile_model(qdq("kws_dscnn"), None)
    for t in b.graph.activations():
        qa, qb = a.graph.tensors[t].quant, b.graph.tensors[t].quant
        assert (qa.s, qa.zp) == (qb.s, qb.zp), t
    for k in range(3):
        xq = b.quantize_input(x[k])
        assert np.array_equal(run_reference(a.graph, {a.input: xq})[a.output],
                              run_reference(b.graph, {b.input: xq})[b.output])


# ---- what tinyaot refuses, with one line ------------------------------------------------------------------------

TINY_W = np.arange(-6, 6, dtype=np.int8).reshape(3, 2, 2, 1)


def _tiny_qdq(tmp_path: Path, act_zp: np.ndarray, act_scale: np.ndarray, axis: int | None = None,
              w_zp: int = 0, pool_scale: float | None = None, opset: int = 13, weight: str = "int8") -> Path:
    """x[1,2,4,4] -> Q/DQ -> Conv(DQ(int8 W)) -> Q/DQ [-> MaxPool -> Q/DQ]: a hand-made QDQ model. `weight`:
    "int8" stores TINY_W; "float" stores TINY_W * 0.01 (+ 0.004) quantized at run time by a QuantizeLinear;
    "transposed" stores TINY_W as IOHW behind a Transpose of the dequantized weight."""
    w = {"int8": numpy_helper.from_array(TINY_W, "w_q"),
         "float": numpy_helper.from_array(TINY_W.astype(np.float32) * 0.01 + 0.004, "w"),
         "transposed": numpy_helper.from_array(TINY_W.transpose(1, 0, 2, 3).copy(), "w_q")}[weight]
    inits = [w, numpy_helper.from_array(np.full(3, 0.01, np.float32), "w_s"),
             numpy_helper.from_array(np.full(3, w_zp, np.int8), "w_zp"),
             numpy_helper.from_array(act_scale, "x_s"), numpy_helper.from_array(act_zp, "x_zp"),
             numpy_helper.from_array(np.float32(0.05), "y_s"), numpy_helper.from_array(np.int8(-10), "y_zp")]
    ax = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["x_q"], **ax),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_zp"], ["x_f"], **ax),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w_f"], axis=1 if weight == "transposed"
                              else 0),
             helper.make_node("Conv", ["x_f", "w_f"], ["y"], kernel_shape=[2, 1]),
             helper.make_node("QuantizeLinear", ["y", "y_s", "y_zp"], ["y_q"]),
             helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_zp"], ["y_f"])]
    if weight == "float":
        nodes.insert(0, helper.make_node("QuantizeLinear", ["w", "w_s", "w_zp"], ["w_q"], axis=0))
    if weight == "transposed":
        nodes[2].output[0] = "w_t"
        nodes.insert(3, helper.make_node("Transpose", ["w_t"], ["w_f"], perm=[1, 0, 2, 3]))
    out, shape = "y_f", [1, 3, 3, 4]
    if pool_scale is not None:
        inits += [numpy_helper.from_array(np.float32(pool_scale), "p_s"), numpy_helper.from_array(np.int8(-10), "p_zp")]
        nodes += [helper.make_node("MaxPool", ["y_f"], ["p"], kernel_shape=[3, 4]),
                  helper.make_node("QuantizeLinear", ["p", "p_s", "p_zp"], ["p_q"]),
                  helper.make_node("DequantizeLinear", ["p_q", "p_s", "p_zp"], ["p_f"])]
        out, shape = "p_f", [1, 3, 1, 1]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)], inits)
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def test_tiny_qdq_model_compiles(tmp_path):
    """The hand-made model itself is fine, so each refusal below is due to the one thing changed."""
    g = compile_model(_tiny_qdq(tmp_path, np.int8(3), np.float32(0.02), pool_scale=0.05), None).graph
    assert [n.op for n in g.nodes if n.op not in ("Reshape", "Transpose")] == ["Conv", "MaxPool"]


def test_weight_quantized_at_run_time(tmp_path):
    """A QuantizeLinear of a float weight is folded to the integers ONNX's QuantizeLinear gives (0.01 * w + 0.004
    at scale 0.01 rounds back to w), by fold_constants or, with it disabled, by absorb_qdq itself."""
    path = _tiny_qdq(tmp_path, np.int8(3), np.float32(0.02), weight="float")
    for disable in ((), ("fold_constants",)):
        g = compile_model(path, None, disable_passes=disable).graph
        conv = next(n for n in g.nodes if n.op == "Conv")
        assert np.array_equal(g.tensors[conv.inputs[1]].data, TINY_W.transpose(0, 2, 3, 1)), disable


@pytest.mark.parametrize("change,message", [
    (dict(act_zp=np.array([3, 4], np.int8), act_scale=np.array([0.02, 0.03], np.float32), axis=1),
     "per-channel activation quantization"),
    (dict(act_zp=np.int16(3), act_scale=np.float32(0.02), opset=21), "int16 activations are not supported"),
    (dict(act_zp=np.int8(3), act_scale=np.float32(0.02), w_zp=2), "asymmetric weights"),
    # int8 max pooling cannot requantize: a model giving it another output scale is refused
    (dict(act_zp=np.int8(3), act_scale=np.float32(0.02), pool_scale=0.04), "can only produce"),
    (dict(act_zp=np.int8(3), act_scale=np.float32(0.02), weight="transposed"),
     "Transpose node .* reads the quantized constant"),
])
def test_unsupported_qdq_is_a_clear_error(tmp_path, change, message):
    with pytest.raises(TinyaotError, match=message) as err:
        compile_model(_tiny_qdq(tmp_path, **change), None)
    assert "\n" not in str(err.value)


def test_onnxruntime_int16_qdq_is_a_clear_error(tmp_path):
    """onnxruntime's own 16-bit QDQ (standard Q/DQ at opset 21 today, its com.microsoft ops in older versions)."""
    name, x = _samples("mnist8_opset13")
    path = tmp_path / "int16.onnx"
    quantize_static(str(MODELS / "mnist8_opset13.onnx"), str(path),
                    _SampleReader([{name: x[i:i + 1]} for i in range(5)]), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt16, weight_type=QuantType.QInt8)
    with pytest.raises(TinyaotError, match="int16 .* not supported"):
        compile_model(path, None)
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int16(0), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "ms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                      helper.make_opsetid("com.microsoft", 1)]), str(path))
    with pytest.raises(TinyaotError, match="com.microsoft"):
        compile_model(path, None)
