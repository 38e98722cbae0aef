"""Bias correction and channel pruning with 16-bit layers (--activation-bits 16, and mixed 8/16 widths).

Known answer: a depthwise 3x3 conv (padding 1) and a fully connected layer whose weights are (k + 0.3) * s_w apart
from one weight per channel at max|w| (so s_w is exact): every other weight rounds down by 0.3 of a unit, and the
correction must add 0.3 * sum_j E[x_j] to the bias. With a constant input the depthwise layer's int16 input is
32767 everywhere; a tap (dy, dx) of the 4x4 image with padding 1 sees it at (4 - |dy|)(4 - |dx|) of 16 output pixels,
so its 8 rounded taps add 0.3 * 32767 * (4 * 9 + 4 * 12) / 16. The fully connected layer's inputs are whatever the
corrected depthwise layer (and, in a mix, the conversion) gives it, read from the numpy reference of the final
graph. Then host C == numpy reference. kws_dscnn (fixture copy) with mixed widths, --bias-correction and
--prune-channels 0.25: host C == reference, every layer within 1 LSB of onnxruntime. The compression kinds whose
storage only int8 kernels read are one-line errors per kind, from flags and from a spec file.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from shared_data import calibration_file, model_path
from tinyaot.api import evaluate
from tinyaot.cli.main import app
from tinyaot.compress.bounds import check_graph
from tinyaot.compress.equalize import correct_biases
from tinyaot.compress.pipeline import layer_report
from tinyaot.compress.precision import layer_names
from tinyaot.core.quant16 import ACC64_LIMIT
from tinyaot.frontend import import_onnx_model
from tinyaot.oracle.onnxruntime_layers import check_layers
from tinyaot.oracle.reference import run_reference
from tinyaot.passes import run_passes
from tinyaot.api import compile_model
from tinyaot.toolchain.hostjit import HostModel
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

FRAC = 0.3  # every weight but one per channel sits FRAC of a unit above an integer: rounding loses FRAC


def _weights():
    wd = np.empty((2, 1, 3, 3), np.float32)  # depthwise OIHW, s_w = 0.01 (channel 1: 0.02)
    wd[:] = (np.arange(9).reshape(3, 3) - 4 + FRAC) * 0.01
    wd[:, 0, 1, 1] = 1.27
    wd[1] *= 2
    wg = ((np.random.default_rng(0).integers(-100, 100, size=(32, 3)) + FRAC) * 0.01).astype(np.float32)
    wg[0, :] = 1.27  # Gemm B [K, N]: each output's first weight is its max
    return wd, wg


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bc16")
    wd, wg = _weights()
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["h"], name="dw", group=2, kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["h"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc")]
    inits = [numpy_helper.from_array(wd, "wd"), numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "bd"),
             numpy_helper.from_array(wg, "wg"), numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "bg")]
    g = helper.make_graph(nodes, "bc16", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp / "m.onnx")
    np.savez(tmp / "cal.npz", x=np.full((4, 1, 2, 4, 4), 0.5, np.float32))
    return tmp


def _bias(c, name):
    node = next(n for n in c.graph.nodes if n.name == name)
    return np.asarray(c.graph.tensors[node.inputs[2]].data, np.int64)


@pytest.mark.parametrize("bits", [16, {"dw": 16, "fc": 8}, {"dw": 8, "fc": 16}])
def test_known_mean_shift_is_taken_back(known, bits):
    plain, fixed = (compile_model(known / "m.onnx", known / "cal.npz", activation_bits=bits, cle=False,
                                  bias_correction=b) for b in (False, True))
    g = fixed.graph
    assert fixed.graph.meta["bias_corrected"] == ["dw", "fc"]
    ops = {n.name: n.op for n in g.nodes}
    q = fixed.quantize_input(np.full((2, 4, 4), 0.5, np.float32))
    ref = run_reference(g, {fixed.input: q})
    if ops["dw"] == "ConvS16":
        # constant int16 input 32767; 4 corner taps valid on 9 of 16 pixels, 4 edge taps on 12
        assert np.array_equal(_bias(fixed, "dw") - _bias(plain, "dw"), [round(FRAC * 32767 * 84 / 16)] * 2)
    fc = next(n for n in g.nodes if n.name == "fc")
    x = np.asarray(ref[fc.inputs[0]], np.int64).reshape(-1)  # what the fc layer really receives
    offset = int(fc.attrs.get("input_offset", 0))  # int8: x - zp; int16: zero point 0
    assert (ops["fc"] == "FullyConnectedS16") == (offset == 0) and x.dtype == np.int64
    want = round(FRAC * float((x[1:] + offset).sum()))  # the first weight of each row is exact
    assert np.array_equal(_bias(fixed, "fc") - _bias(plain, "fc"), [want] * 3)
    if ops["fc"] == "FullyConnectedS16":
        assert want > 100_000 and g.tensors[fc.inputs[2]].data.dtype == np.int64
    host = HostModel(g, fixed.plan.offsets, fixed.plan.arena_bytes, fixed.lower_bound)
    for x in (q, np.full_like(q, -128), np.full_like(q, 127)):  # the extremes too
        np.testing.assert_array_equal(host(x).reshape(-1), run_reference(g, {fixed.input: x})[fixed.output].reshape(-1))


def test_int64_bias_stays_inside_the_requantization_range(known):
    """A 16-bit bias already at the edge of |bias| + sum|w| * 32768 < 2**47 is held there, not pushed past it."""
    c = compile_model(known / "m.onnx", known / "cal.npz", activation_bits=16, cle=False)
    g = c.graph
    dw = next(n for n in g.nodes if n.name == "dw")
    w = np.abs(np.asarray(g.tensors[dw.inputs[1]].data, np.int64)).reshape(-1, 2).sum(axis=0)
    room = ACC64_LIMIT - 1 - w * 32768
    g.tensors[dw.inputs[2]].data = (room - 5).astype(np.int64)  # the correction is +51,608: would pass 2**47
    wd, wg = _weights()
    floats = {"dw": wd.transpose(1, 2, 3, 0).astype(np.float64), "fc": wg.T.astype(np.float64)}
    q = c.quantize_input(np.full((2, 4, 4), 0.5, np.float32))
    assert "dw" in correct_biases(g, floats, [q])
    assert np.array_equal(g.tensors[dw.inputs[2]].data, room)
    check_graph(g)


def test_kws_mixed_widths_with_bias_correction_and_channel_pruning_is_bit_exact(tmp_path):
    cal = calibration_file(tmp_path, "kws_dscnn")
    graph, _ = import_onnx_model(model_path("kws_dscnn"))
    names = layer_names(run_passes(graph, set(), set(), lambda _: None))  # as compile_model names them
    bits = {name: 16 if k % 2 else 8 for k, name in enumerate(names)}
    c = compile_model(model_path("kws_dscnn"), cal, activation_bits=bits, bias_correction=True,
                      compression={"prune_channels": 0.25, "prune_method": "magnitude"})  # uniform: no measuring
    g = c.graph
    ops = {n.name: n.op for n in g.nodes}
    corrected = g.meta["bias_corrected"]
    assert {"ConvS16", "Conv"} <= {ops[n] for n in corrected} and "Requantize" in ops.values()
    assert sum(g.meta["compression"]["channels_removed"].values()) > 0
    # report.json's per-layer compression fields cover the 16-bit layers too
    s16 = [layer_report(g, n) for n in g.nodes if n.op in ("ConvS16", "FullyConnectedS16")]
    assert s16 and all(r["storage"] == "dense" and "channels_removed" in r for r in s16)
    host = HostModel(g, c.plan.offsets, c.plan.arena_bytes, c.lower_bound)
    refs = []
    for x in c.samples[c.input][:2]:
        q = c.quantize_input(x)
        ref = run_reference(g, {c.input: q})
        np.testing.assert_array_equal(host(q).reshape(-1), ref[c.output].reshape(-1))
        refs.append(ref)
    assert max(ch.max_abs_diff for ch in check_layers(g, refs)) <= 1


@pytest.mark.parametrize("flags, spec, first", [
    (["--prune", "0.5"], None, "Error: --prune cannot be combined with --activation-bits 16: its sparse"),
    (["--clusters", "16"], None, "Error: --clusters cannot be combined with --activation-bits 16: its clustered"),
    (["--weight-bits", "4"], None, "Error: --weight-bits 4 cannot be combined with --activation-bits 16: its int4"),
    ([], '[[layer]]\npattern = "fc"\nsparsity = 0.5\n', "Error: --prune (or prune / sparsity in "),
    ([], 'prune_channels = 0.25\n[[layer]]\npattern = "*"\nweight_bits = 4\n', "Error: --weight-bits 4 (or "),
])
def test_compressed_storage_is_refused_per_kind(known, tmp_path, flags, spec, first):
    if spec is not None:
        (tmp_path / "spec.toml").write_text(spec)
        flags = ["--compression", str(tmp_path / "spec.toml")]
    for extra in (["--activation-bits", "16"], ["-d", str(known / "cal.npz"), "--max-accuracy-drop", "0.5"]):
        r = CliRunner().invoke(app, ["deploy", str(known / "m.onnx"), "-c", str(known / "cal.npz"), "--no-verify",
                                     "--out", str(tmp_path / "o"), *flags, *extra])
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code != 0 and len(lines) == 1 and "Traceback" not in r.output, r.output
        assert lines[0].startswith(first.replace("--activation-bits 16", extra[-2] if extra[0] == "-d"
                                                 else "--activation-bits 16")), lines[0]
        assert "int8 kernels" in lines[0] and not (tmp_path / "o").exists()


def _mlp(path, rng):
    """Gemm 12 -> 24, Relu, Gemm 24 -> 10, Softmax (as tests/s16/test_s16_search.py's, with its seed)."""
    w1, b1 = rng.normal(0, 0.5, (12, 24)).astype(np.float32), rng.normal(0, 0.1, 24).astype(np.float32)
    w2, b2 = rng.normal(0, 0.3, (24, 10)).astype(np.float32), rng.normal(0, 0.01, 10).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "mlp16", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 12])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_search_measures_with_channel_pruning_and_bias_correction(tmp_path):
    """--max-accuracy-drop takes --prune-channels and --bias-correction and measures every configuration with them:
    the top-1 it records is the one the final model (compiled with the same options) evaluates to."""
    rng = np.random.default_rng(5)
    model = tmp_path / "mlp16.onnx"
    _mlp(model, rng)
    x = rng.normal(0, 1, (300, 1, 12)).astype(np.float32)
    sess = ort.InferenceSession(str(model), session_options(), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(sess.run(None, {"x": s})[0])) for s in x])  # float top-1 is 100 %
    np.savez(tmp_path / "cal.npz", x=x[:100])
    np.savez(tmp_path / "data.npz", x=x[100:], y=y[100:])
    kw = dict(compare_onnxruntime=False, cle=False, compression={"prune_channels": 0.2}, bias_correction=True)
    drops = [100 * (1 - evaluate(model, tmp_path / "cal.npz", tmp_path / "data.npz", activation_bits=b, **kw)
                    ["int8_top1"]) for b in (8, 16)]
    assert drops[0] > drops[1]  # with these options too, int8 loses a sample 16x8 keeps
    r = evaluate(model, tmp_path / "cal.npz", tmp_path / "data.npz", max_accuracy_drop=sum(drops) / 2, **kw)
    bits = r["activation_bits"]
    assert bits["mode"] == "mixed" and len(bits["search"]["measurements"]) >= 3
    assert r["int8_top1"] == bits["search"]["top1"] and r["host_c_matches_reference"]
    assert r["quantization"]["calibration"]["bias_corrected_layers"] == 2
    assert sum(r["compression"]["channels_removed"].values()) > 0
