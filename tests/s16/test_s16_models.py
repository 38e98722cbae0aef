"""16x8 activations end to end: kws_dscnn with --activation-bits 16 deploys on mps2-an386 and verifies under QEMU
(outputs == the numpy reference, every layer within 1 LSB of onnxruntime's int16 QDQ); a mixed 8/16 ic_resnet8
(residual Adds at 16 bits, conversions both ways) runs bit-exact on the host and within 1 LSB per layer of
onnxruntime; an op without an s16 kernel is a one-line error naming it; the CLI validates --activation-bits."""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from shared_data import calibration_file, model_path
from tinyaot.api import compile_model, deploy
from tinyaot.cli.main import app
from tinyaot.compress.precision import layer_names
from tinyaot.oracle.onnxruntime_layers import check_layers
from tinyaot.oracle.reference import run_reference
from tinyaot.toolchain.hostjit import HostModel


def test_kws_dscnn_16x8_verifies_under_qemu(tmp_path):
    result = deploy(model_path("kws_dscnn"), "mps2-an386", calibration_file(tmp_path, "kws_dscnn"),
                    tmp_path / "out", activation_bits=16, verify_samples=4)
    r = result.report
    v = r["verify"]
    assert v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    assert r["quantization"]["activation_bits"]["mode"] == 16
    computing = [layer for layer in r["layers"] if layer["op"] != "Reshape"]
    assert all(layer["activation_bits"] == 16 for layer in computing)
    assert {layer["op"] for layer in computing} >= {"ConvS16", "AveragePoolS16", "FullyConnectedS16", "SoftmaxS16"}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["layers"][2]["activation_bits"] == 16


def test_mixed_precision_resnet_is_bit_exact_and_within_one_lsb(tmp_path):
    cal = calibration_file(tmp_path, "ic_resnet8")
    base = compile_model(model_path("ic_resnet8"), cal)
    names = layer_names(base.graph)
    adds = {n.name for n in base.graph.nodes if n.op == "Add"}
    bits = {name: 16 if (k % 2 or name in adds) else 8 for k, name in enumerate(names)}
    c = compile_model(model_path("ic_resnet8"), cal, activation_bits=bits)
    g = c.graph
    ops = {n.op for n in g.nodes}
    assert {"AddS16", "ConvS16", "Requantize"} <= ops and "Conv" in ops
    widths = {n.attrs["out_bits"] for n in g.nodes if n.op == "Requantize"}
    assert widths == {8, 16}
    host = HostModel(g, c.plan.offsets, c.plan.arena_bytes, c.lower_bound)
    xs = c.samples[c.input][:2]
    refs = []
    for x in xs:
        q = c.quantize_input(x)
        ref = run_reference(g, {c.input: q})
        np.testing.assert_array_equal(host(q).reshape(-1), ref[c.output].reshape(-1))
        refs.append(ref)
    assert max(ch.max_abs_diff for ch in check_layers(g, refs)) <= 1


def test_unsupported_op_and_bad_bits_are_one_line_errors(tmp_path):
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("LeakyRelu", ["h"], ["y"])],
                          "sig", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])],
                          [numpy_helper.from_array(np.full((4, 3), 0.5, np.float32), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "sig.onnx")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).normal(size=(8, 1, 4)).astype(np.float32))
    runner = CliRunner()
    res = runner.invoke(app, ["deploy", str(tmp_path / "sig.onnx"), "-c", str(tmp_path / "cal.npz"), "--out",
                              str(tmp_path / "o"), "--activation-bits", "16", "--no-verify"])
    assert res.exit_code != 0
    lines = res.output.strip().splitlines()
    assert lines[-1].startswith("Error: LeakyRelu node") and "Conv" in lines[-1] and "Softmax" in lines[-1]
    res = runner.invoke(app, ["deploy", str(model_path("mnist8_opset13")), "--activation-bits", "12"])
    assert res.exit_code != 0 and "--activation-bits" in res.output
