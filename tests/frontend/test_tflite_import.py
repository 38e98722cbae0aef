"""int8 .tflite in (tinyaot/frontend/tflite_import.py): the authors' own int8 TFLite files (tests/fixtures/models)
and small TFLite models written with the schema's generated builder (tests/tflite_models.py) compile to C whose
outputs equal TensorFlow Lite Micro's interpreter (the `tflite-micro` package, reference kernels only) bit for bit,
on real labelled samples, random and extreme inputs; under QEMU too; and what tinyaot cannot read is one `Error:`
line naming the operator."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import tflite_models
from shared_data import DATA, MODELS
from tinyaot.api import compile_model, deploy, evaluate
from tinyaot.cli.main import app
from tinyaot.core.quant import QuantParams, activation_clamp, tflite_activation_range
from tinyaot.oracle.reference import run_reference
from tinyaot.oracle.tflite_interpreter import interpreter_name, run_tflite

pytestmark = pytest.mark.skipif(interpreter_name() is None, reason="tflite-micro (the test extra) is not installed")

# fixture file -> (labelled data set, samples of it compared here)
SHARED = {"kws_dscnn_int8": ("kws01", 40), "ic_resnet8_int8": ("ic01", 16), "sww_dscnn_int8": ("sww01", 45)}
SYNTHETIC = ("mixed_ops", "fc_keep_dims", "relu6_on_a_tie")


def _inputs(compiled, x: np.ndarray, extremes: bool = True) -> list[np.ndarray]:
    """int8 inputs: real samples quantized with the model's own input parameters, then all -128 / 0 / 127."""
    shape = compiled.graph.tensors[compiled.input].shape
    qs = [compiled.quantize_input(s) for s in x]
    if extremes:
        qs += [np.full(shape, v, np.int8) for v in (-128, 0, 127)]
    return qs


def _assert_equal_to_interpreter(path: Path, compiled, qs: list[np.ndarray]) -> list[np.ndarray]:
    theirs = [o[0] for o in run_tflite(path, [[q] for q in qs])]
    for k, (q, t) in enumerate(zip(qs, theirs)):
        ours = run_reference(compiled.graph, {compiled.input: q})[compiled.output]
        assert ours.dtype == t.dtype == np.int8
        np.testing.assert_array_equal(ours.reshape(-1), t.reshape(-1), err_msg=f"{path.name} sample {k}")
    return theirs


@pytest.mark.parametrize("name", sorted(SHARED))
def test_authors_tflite_equals_tflite_micro(name):
    """The authors' file: its own scales, zero points, int8 weights and int32 biases, bit for bit, on real
    samples (quantized with the file's input parameters) and extreme inputs; top-1 is then the interpreter's."""
    path = MODELS / f"{name}.tflite"
    compiled = compile_model(path, None)
    assert compiled.prequantized and compiled.graph.meta["format"] == "tflite"
    data, n = SHARED[name]
    with np.load(DATA / f"{data}.npz") as z:
        x, y = z["x"][:n], z["y"][:n]
    theirs = _assert_equal_to_interpreter(path, compiled, _inputs(compiled, x))
    top1 = np.mean([np.argmax(t) == label for t, label in zip(theirs, y)])
    assert top1 > 0.5  # real inputs, a real classifier: not a degenerate comparison of saturated outputs


@pytest.mark.parametrize("maker", SYNTHETIC)
def test_tflite_arithmetic_corners_equal_tflite_micro(tmp_path, maker):
    """RELU6 / RELU_N1_TO_1 clamps (one on a float32 tie), SAME padding with the odd pixel at the end, dilation,
    depth multiplier 2, average pooling over windows cut by padding, max pooling, per-channel FC without bias,
    keep_num_dims, ADD of two activations and of a broadcast constant, softmax with beta 0.7."""
    path = tmp_path / f"{maker}.tflite"
    path.write_bytes(getattr(tflite_models, maker)())
    compiled = compile_model(path, None)
    shape = compiled.graph.tensors[compiled.input].shape
    rng = np.random.default_rng(11)
    qs = [rng.integers(-128, 128, size=shape).astype(np.int8) for _ in range(40)]
    qs += [np.full(shape, v, np.int8) for v in (-128, 0, 127)]
    theirs = _assert_equal_to_interpreter(path, compiled, qs)
    assert len(np.unique(np.concatenate([t.reshape(-1) for t in theirs]))) >= 4  # the outputs really vary


def test_relu6_clamp_is_tflites():
    """The RELU6 bound 6 / 2.4 is exactly 2.5 in float32: TFLite clamps at 3 (float32 division, ties away from
    zero); a float64 division rounded half to even would give 2. relu6_on_a_tie's outputs reach the clamp."""
    s = float(np.float32(2.4))
    assert tflite_activation_range(s, 0, 0.0, 6.0) == (0, 3)
    assert activation_clamp(QuantParams.per_tensor(s, 0), (0.0, 6.0)) == (0, 2)
    assert tflite_activation_range(0.05, -128, 0.0, float("inf")) == (-128, 127)
    assert tflite_activation_range(0.01, 3, -1.0, 1.0) == (-97, 103)


def test_host_c_equals_interpreter(tmp_path):
    """`evaluate`: the generated C compiled for the host, on real labelled samples, against the interpreter."""
    with np.load(DATA / "kws01.npz") as z:
        np.savez(tmp_path / "data.npz", x=z["x"][100:130], y=z["y"][100:130])
    r = evaluate(MODELS / "kws_dscnn_int8.tflite", None, tmp_path / "data.npz")
    assert r["host_c_matches_reference"] is True
    assert r["tflite_interpreter"] == interpreter_name()
    assert r["outputs_equal_tflite"] == r["samples"] == 30
    assert r["int8_top1"] == r["tflite_top1"] and r["int8_vs_tflite_agreement"] == 1.0


def test_deploy_verifies_against_interpreter_under_qemu(tmp_path):
    """deploy: the C under QEMU (Cortex-M55, where the Helium variants run) equals the numpy reference and TFLite
    Micro on the same int8 inputs."""
    path = tmp_path / "mixed_ops.tflite"
    path.write_bytes(tflite_models.mixed_ops())
    r = deploy(path, "mps3-an547", None, tmp_path / "out").report
    v = r["verify"]
    assert v["outputs_match"] and v["outputs_match_tflite"] is True and v["max_abs_diff_vs_tflite"] == 0
    assert v["tflite_interpreter"] == interpreter_name()
    assert r["quantization"]["source"] == "the TFLite model's own parameters"
    assert r["model"]["inputs"][0]["dtype"] == "int8" and r["model"]["inputs"][0]["zero_point"] == -10


def test_int8_samples_are_the_models_integers(tmp_path):
    """A sample file may hold the model's int8 integers (MLPerf Tiny's kws_mfcc_int8): they reach the C as they are."""
    with np.load(DATA / "inrepo_samples.npz") as z:
        q = z["kws_mfcc_int8"]
    np.savez(tmp_path / "int8.npz", x=q)
    compiled = compile_model(MODELS / "kws_dscnn_int8.tflite", tmp_path / "int8.npz")
    np.testing.assert_array_equal(compiled.quantize_input(compiled.samples[compiled.input][0]), q)


def _error(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_unsupported_builtin_is_one_error_line(tmp_path):
    path = tmp_path / "tanh.tflite"
    path.write_bytes(tflite_models.unsupported_op())
    line = _error("deploy", path, "--board", "stm32", "--out", tmp_path / "out")
    assert "operator 1 (TANH, output 'tanh_out') is not supported" in line and "CONV_2D" in line
    assert not (tmp_path / "out").exists()


def test_not_full_integer_is_one_error_line(tmp_path):
    path = tmp_path / "float.tflite"
    path.write_bytes(tflite_models.float_model())
    line = _error("deploy", path, "--board", "stm32", "--out", tmp_path / "out")
    assert "float32" in line and "full-integer" in line


@pytest.mark.parametrize("content", [b"not a model at all", None])
def test_bad_tflite_file_is_one_error_line(tmp_path, content):
    """A .tflite that is not TFLite, and a truncated one."""
    path = tmp_path / "bad.tflite"
    path.write_bytes(content if content is not None else (MODELS / "kws_dscnn_int8.tflite").read_bytes()[:3000])
    line = _error("deploy", path, "--board", "stm32", "--out", tmp_path / "out")
    assert "bad.tflite" in line and "TFLite model" in line


def test_input_shape_is_refused_for_tflite(tmp_path):
    line = _error("deploy", MODELS / "sww_dscnn_int8.tflite", "--input-shape", "x:1,2", "--out", tmp_path / "o")
    assert "static" in line
