"""Issue 12 as a user meets it through the `tinyaot` command: `analyze`, `--max-accuracy-drop` and
`--activation-bits`. Bad input is one line `Error: ...` with a non-zero exit, before any minutes of work and
without a half-written `--out`; what ran is written down (analyze's report.json `quantization.calibration`, as
deploy's). A small float MLP built with onnx.helper keeps each test to a few seconds."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from tinyaot.cli.main import app
from tinyaot.ops.registry import int16_forms
from tinyaot.pipeline.precision_search import bits_line
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions


def _mlp(d: Path, name: str, widen: float = 1.0) -> Path:
    """Gemm, Relu, Gemm, Softmax on 12 inputs in d/name.onnx, the first layer's first four channels `widen` times
    wider; cal.npz (60 samples) and data.npz (80, labelled by the float model) beside it."""
    rng = np.random.default_rng(3)
    w1, b1 = rng.normal(0, 0.5, (12, 16)).astype(np.float32), rng.normal(0, 0.1, 16).astype(np.float32)
    w1[:, :4] *= widen
    w2, b2 = rng.normal(0, 0.3, (16, 5)).astype(np.float32), rng.normal(0, 0.01, 5).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 12])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5])], inits)
    model = d / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
    x = rng.normal(0, 1, (140, 1, 12)).astype(np.float32)
    sess = ort.InferenceSession(str(model), session_options(), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(sess.run(None, {"x": s})[0])) for s in x])
    np.savez(d / "cal.npz", x=x[:60])
    np.savez(d / "data.npz", x=x[60:], y=y[60:])
    return model


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    return _mlp(tmp_path_factory.mktemp("mlp"), "mlp")


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(result, *fragments: str) -> str:
    """One line `Error: ...` on stderr and nothing else (no progress line of work that was then refused), exit 2."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.mark.parametrize("x_shape, y, fragment", [
    ((20, 13), np.zeros(20, np.int64), "have shape [20, 13]"),   # samples of the wrong shape: was exit 3, a bug
    ((0, 12), np.zeros(0, np.int64), "no samples"),              # no samples at all: was exit 3
    ((20, 12), None, "needs arrays 'x' (inputs) and 'y'"),       # no labels
    ((20, 12), np.zeros(10, np.int64), "'y' must be 20 integer labels"),
])
def test_max_accuracy_drop_bad_data_is_one_line_before_the_search(mlp, tmp_path, x_shape, y, fragment):
    data = tmp_path / "bad.npz"
    arrays = {"x": np.zeros(x_shape, np.float32)} | ({} if y is None else {"y": y})
    np.savez(data, **arrays)
    for cmd in (["deploy", mlp, "--no-verify", "--out", tmp_path / "o"], ["evaluate", mlp]):
        r = run(*cmd, "-c", mlp.parent / "cal.npz", "-d", data, "--max-accuracy-drop", "0.5")
        one_error(r, str(data), fragment)
    assert not (tmp_path / "o").exists()


def test_max_accuracy_drop_refuses_what_16_bits_cannot_take_up_front(mlp, tmp_path):
    """The search used to run (and print its measurements) before compile_model refused its choice: clustered
    weights, which only the int8 kernels read."""
    r = run("deploy", mlp, "-c", mlp.parent / "cal.npz", "-d", mlp.parent / "data.npz", "--max-accuracy-drop",
            "0.5", "--no-verify", "--out", tmp_path / "o", "--clusters", "16")
    one_error(r, "cannot be combined with", "--max-accuracy-drop")
    assert not (tmp_path / "o").exists()


def test_analyze_out_that_is_a_file_is_one_line(mlp, tmp_path):
    out = tmp_path / "report.txt"
    out.write_text("keep me")
    r = run("analyze", mlp, "-c", mlp.parent / "cal.npz", "-d", mlp.parent / "data.npz", "--out", out)
    one_error(r, str(out), "exists and is not a folder")  # was an internal error (FileExistsError), exit 3
    assert out.read_text() == "keep me"


def test_analyze_records_what_ran_and_keeps_other_files(mlp, tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    # a folder holding a file tinyaot did not write is refused before any work, the file untouched (issue 18)
    r = run("analyze", mlp, "-c", mlp.parent / "cal.npz", "-d", mlp.parent / "data.npz", "--out", out)
    one_error(r, str(out), "notes.txt")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    r = run("analyze", mlp, "-c", mlp.parent / "cal.npz", "-d", mlp.parent / "data.npz", "--out", out,
            "--calibrate", "percentile:99.9", "--no-cle", "--bias-correction")
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    cal = rep["quantization"]["calibration"]
    assert (cal["method"], cal["percentile"], cal["cle"], cal["bias_correction"]) == ("percentile", 99.9, False, True)
    assert cal["bias_corrected_layers"] == 2  # the two Gemms
    assert {row["op"] for row in rep["layers"]} >= {"FullyConnected", "Softmax"}
    assert sorted(p.name for p in out.iterdir()) == [".tinyaot-manifest.json", "report.json", "report.md",
                                                     "sqnr.png"]
    assert ("calibration method `percentile:99.9`, CLE off (0 pairs equalized), bias correction on, 2 layers"
            in (out / "report.md").read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left beside it


def test_activation_bits_help_names_every_op_with_an_s16_kernel():
    r = run("deploy", "--help")
    assert r.exit_code == 0
    help_text = " ".join(r.output.split())
    names = {"Conv": "Conv", "FullyConnected": "fully connected", "AveragePool": "pooling",
             "GlobalAveragePool": "pooling", "MaxPool": "pooling"}
    for op in int16_forms():
        assert names.get(op, op) in help_text, op


def test_bits_line_counts_configurations_in_english():
    search = {"max_drop_points": 0.2, "float_top1": 0.91, "top1": 0.9111, "arena_bytes": 16000, "const_bytes": 29072,
              "measurements": [{}], "samples": 900}
    assert "(1 configuration measured on 900 samples)" in bits_line({"mode": 8, "search": search})
    search["measurements"] = [{}, {}]
    assert "(2 configurations measured" in bits_line({"mode": 8, "search": search})


def test_api_budget_that_is_not_a_number_is_refused_at_once(mlp):
    """NaN compares false with everything: the search measured every layer (71 s on kws_dscnn) and then failed with
    'within nan points'."""
    from tinyaot.api import evaluate
    from tinyaot.errors import TinyaotError

    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(TinyaotError, match="--max-accuracy-drop must be >= 0 points"):
            evaluate(mlp, mlp.parent / "cal.npz", mlp.parent / "data.npz", max_accuracy_drop=bad)


def test_api_has_analyze(mlp, tmp_path):
    from tinyaot.api import analyze

    rep = analyze(mlp, mlp.parent / "cal.npz", mlp.parent / "data.npz", tmp_path / "a", limit=20)
    assert rep["samples"] == 20 and (tmp_path / "a" / "report.json").exists()
    assert rep["quantization"]["calibration"]["default"] is True


def test_report_md_says_how_it_was_quantized(mlp, tmp_path):
    """report.md is what an engineer reads: it said only 'quantization: calibration', not which ranges, CLE, bias
    correction or activation widths ran (report.json's quantization block has them)."""
    r = run("deploy", mlp, "-c", mlp.parent / "cal.npz", "--no-verify", "--out", tmp_path / "a",
            "--calibrate", "percentile:99.9", "--cle", "--activation-bits", "16")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "a" / "report.md").read_text()
    assert "- ranges: `percentile` (percentile 99.9), input `x` percentile [" in md
    assert "CLE every pair, 1 pair equalized; bias correction off" in md
    assert "- activations: 16 bits" in md
    r = run("deploy", mlp, "-c", mlp.parent / "cal.npz", "--no-verify", "--out", tmp_path / "b", "--bias-correction")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "b" / "report.md").read_text()
    assert "- ranges: `auto-input` (default), input `x` " in md
    assert "CLE auto, 0 pairs equalized; bias correction on, 2 layers" in md and "- activations: 8 bits" in md


def test_analyze_measures_an_equalized_tensor_in_cle_units(tmp_path):
    """With CLE the int8 tensor between a pair holds the float values divided per channel (less the absorbed
    bias): analyze compared it with the float model's tensor as is, and its SQNR came out 2.7 dB (1.3 accumulated)
    on this MLP, the first conv of kws_dscnn -13 dB with 86.89 % top-1 'only this layer' (float 91.00 %)."""
    model = _mlp(tmp_path, "wide", widen=20.0)  # four hidden channels 20x wider: CLE has something to equalize
    r = run("analyze", model, "-c", tmp_path / "cal.npz", "-d", tmp_path / "data.npz", "--out", tmp_path / "o",
            "--cle")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["quantization"]["calibration"]["cle_pairs"] == 1
    row = next(row for row in rep["layers"] if row["tensor"] == "r")
    # 256 levels over a ReLU tensor's range: ~25 dB here (22 dB without CLE); the first layer, so the int8 model's
    # output of it has only its own noise and that of the input's quantization
    assert row["sqnr_db_this_layer"] > 20.0 and abs(row["sqnr_db"] - row["sqnr_db_this_layer"]) < 3.0, row
    assert row["top1_only_this_layer"] >= 0.98, row


def test_analyze_knows_nhwc_from_nchw_when_channels_equal_height_and_width(tmp_path):
    """A 4-channel 4x4 tensor has the same shape in NHWC and NCHW: analyze took the int8 model's NHWC values as
    NCHW (pt_mbv3_se's 16-channel 16x16 expansion output showed -1.4 dB); to_nhwc's recorded permutation says."""
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.4, (4, 4, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 4).astype(np.float32)
    fw, fb = rng.normal(0, 0.5, (4, 3)).astype(np.float32), np.zeros(3, np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fw, "fw"), (fb, "fb"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])], inits)
    model = tmp_path / "square.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
    x = rng.normal(0, 1, (90, 1, 4, 4, 4)).astype(np.float32)
    sess = ort.InferenceSession(str(model), session_options(), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(sess.run(None, {"x": s})[0])) for s in x])
    np.savez(tmp_path / "cal.npz", x=x[:50])
    np.savez(tmp_path / "data.npz", x=x[50:], y=y[50:])
    r = run("analyze", model, "-c", tmp_path / "cal.npz", "-d", tmp_path / "data.npz", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    row = next(row for row in json.loads((tmp_path / "o" / "report.json").read_text())["layers"]
               if row["tensor"] == "r")
    # the first layer: the int8 model's output of it carries its own rounding and the input's, no more (35 dB here;
    # read in the wrong order it was -1 dB)
    assert row["sqnr_db_this_layer"] > 20.0 and row["sqnr_db"] > 20.0, row


def test_empty_calibrate_is_refused_not_the_default(mlp, tmp_path):
    """`--calibrate "$METHOD"` with METHOD unset deployed with the default method, silently."""
    data = mlp.parent / "data.npz"
    for cmd in (["deploy", mlp, "--no-verify", "--out", tmp_path / "o"], ["evaluate", mlp, "-d", data],
                ["analyze", mlp, "-d", data, "--out", tmp_path / "o"]):
        r = run(*cmd, "-c", mlp.parent / "cal.npz", "--calibrate", "")
        assert r.exit_code == 2, r.output
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "--calibrate" in lines[0], r.output
        assert not (tmp_path / "o").exists()
