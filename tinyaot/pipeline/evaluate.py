"""Accuracy: the float model (onnxruntime), tinyaot's int8 model (the generated C, host-compiled; checked bit-exact
against the numpy reference on a few samples every run) and onnxruntime's own int8 quantization, on the same
labelled samples.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tinyaot import __version__
from tinyaot.compress.ort_baseline import float_predictions, ort_int8_predictions, ort_quantize_static, top1
from tinyaot.compress.pipeline import compression_report
from tinyaot.compress.precision import precision_report
from tinyaot.errors import TinyaotError, VerificationError
from tinyaot.frontend.normalize import float32_model_file
from tinyaot.oracle.reference import run_reference
from tinyaot.oracle.tflite_interpreter import INSTALL_HINT, interpreter_name, run_tflite
from tinyaot.toolchain.hostjit import HostModel

from .compile import Compiled, Echo, _quiet, compile_model
from .labelled import load_labelled
from .precision_search import resolve_activation_bits
from .report import weights_bytes


def evaluate(model: str | Path, calibration: str | Path | None, data: str | Path, *, input_shapes=None,
             limit: int | None = None, compare_onnxruntime: bool = True, compression=None,
             echo: Echo = _quiet, calibrate: str | None = None, cle: bool | None = None,
             bias_correction: bool | None = None, target=None, activation_bits=8,
             max_accuracy_drop: float | None = None) -> dict:
    """Top-1 of the float model (onnxruntime), of tinyaot's int8 model (the generated C, host-compiled), and of
    onnxruntime's own quantize_static (QDQ, per-channel, same calibration samples), on the same samples.
    `compression` as for compile_model: the int8 figure is then the compressed model's, and `weights_bytes` /
    `compression` say what it costs in flash. `target` (a tinyaot.core.target.Target; None: generic kernels) picks
    the kernel variants the host-compiled C runs: every variant is bit-exact, so top-1 does not depend on it."""
    # activation widths: 8, 16, {layer: 8|16}, or searched within `max_accuracy_drop` points on `data`
    bits, mixed = resolve_activation_bits(model, calibration, activation_bits, max_accuracy_drop, data,
                                          input_shapes=input_shapes, calibrate=calibrate, cle=cle, echo=echo,
                                          compression=compression, bias_correction=bias_correction)
    compiled = compile_model(model, calibration, input_shapes=input_shapes, compression=compression, echo=echo,
                             calibrate=calibrate, cle=cle, bias_correction=bias_correction, target=target,
                             activation_bits=bits)
    if mixed is not None:
        compiled.graph.meta["mixed_precision"] = mixed
    g = compiled.graph
    x, y = load_labelled(data, g.meta["inputs"])
    if limit is not None:
        x, y = x[:limit], y[:limit]
    host = HostModel(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, compiled.patch)
    q_inputs = [compiled.quantize_input(x[k]) for k in range(len(x))]
    q_out = [host(q) for q in q_inputs]
    # The host C must equal the numpy reference bit for bit; check it on a few samples every run.
    checked = min(len(x), 4)
    host_diff = 0  # the largest |host C - numpy reference| over the checked samples, in LSB
    for k in range(checked):
        ref = run_reference(g, {compiled.input: q_inputs[k]})[compiled.output]
        diff = int(np.abs(ref.astype(np.int32).reshape(-1) - q_out[k].astype(np.int32).reshape(-1)).max())
        host_diff = max(host_diff, diff)
        if diff:
            raise VerificationError(f"host-compiled C differs from the numpy reference on sample {k} by up to {diff} "
                               "LSB (a tinyaot bug)")
    host_matches = (host_diff == 0) if checked else None  # nothing compared: unknown, not "matches"
    int8_logits = np.stack([compiled.dequantize_output(q).reshape(-1) for q in q_out])
    name = compiled.input
    # onnxruntime helpers take [N, ...] with one model batch per sample: drop the batch-of-1 axis.
    x_ort = x.reshape((len(x),) + tuple(g.meta["inputs"][0]["shape"][1:]))
    if compiled.prequantized:
        return _evaluate_prequantized(model, calibration, data, compiled, int8_logits, x_ort, y, checked,
                                      compare_onnxruntime, host_matches, q_out, q_inputs)
    cal_ort = {name: compiled.samples[name].reshape((-1,) + x_ort.shape[1:])}
    with tempfile.TemporaryDirectory(prefix="tinyaot-ort-") as tmp:
        # onnxruntime runs the float32 model tinyaot compiled (a float16 model's float32 rewrite)
        source = float32_model_file(model, Path(tmp))
        float_out = float_predictions(source, {name: x_ort}).reshape(len(x), -1)
        ort_out = None
        if compare_onnxruntime:
            qdq = ort_quantize_static(source, cal_ort, Path(tmp) / "model_qdq.onnx")
            ort_out = ort_int8_predictions(qdq, {name: x_ort}).reshape(len(x), -1)
    result = {
        "tinyaot_version": __version__,
        "model": str(model), "calibration": str(calibration), "data": str(data), "samples": int(len(x)),
        "calibration_samples": int(len(compiled.samples[name])),
        "float_top1": top1(float_out, y),
        "int8_top1": top1(int8_logits, y),
        "onnxruntime_int8_top1": None,
        "agreement": float(np.mean(np.argmax(float_out, 1) == np.argmax(int8_logits, 1))),
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes,
        "weights_bytes": weights_bytes(g),
        "compression": compression_report(g),  # the weights' cost, measured on the same run as the accuracy
        "activation_bits": precision_report(g),  # 8, 16 or mixed (and the --max-accuracy-drop search)
        "quantization": {"calibration": g.meta.get("calibration")},  # method, CLE, bias correction
    }
    if ort_out is not None:
        result["onnxruntime_int8_top1"] = top1(ort_out, y)
        result["onnxruntime_int8_agreement"] = float(np.mean(np.argmax(float_out, 1) == np.argmax(ort_out, 1)))
    return result


def _evaluate_prequantized(model, calibration, data, compiled: Compiled, int8_logits, x_ort, y, checked,
                           compare_onnxruntime: bool, host_matches: bool, q_out, q_inputs) -> dict:
    """A pre-quantized model has no float original to measure: tinyaot's int8 is set against onnxruntime
    running the very same QDQ model on its int8 kernels (so both use the model's own parameters), an int8 .tflite
    model against TFLite Micro's interpreter running the same file on the same int8 inputs, whose every output
    must equal the C's."""
    result = {
        "tinyaot_version": __version__,
        "model": str(model), "calibration": None if calibration is None else str(calibration), "data": str(data),
        "samples": int(len(y)), "calibration_samples": 0, "prequantized": True,
        "float_top1": None, "int8_top1": top1(int8_logits, y), "onnxruntime_int8_top1": None, "agreement": None,
        "int8_vs_onnxruntime_agreement": None,
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes, "weights_bytes": weights_bytes(compiled.graph),
        "compression": compression_report(compiled.graph),
    }
    if compiled.graph.meta.get("format") == "tflite":
        return {**result, **_versus_tflite(compiled, q_inputs, q_out, y)} if compare_onnxruntime else result
    if compare_onnxruntime:
        ort_out = ort_int8_predictions(model, {compiled.input: x_ort}).reshape(len(y), -1)
        result["onnxruntime_int8_top1"] = top1(ort_out, y)
        result["int8_vs_onnxruntime_agreement"] = float(np.mean(np.argmax(ort_out, 1) ==
                                                                np.argmax(int8_logits, 1)))
    return result


def _versus_tflite(compiled: Compiled, q_inputs, q_out, y) -> dict:
    """TFLite Micro's interpreter on the same int8 inputs: its top-1, and on how many samples its output equals the
    C's bit for bit (all of them, or tinyaot has a bug; with compression options the C computes other weights)."""
    name = interpreter_name()
    if name is None:
        return {"tflite_interpreter": f"not run ({INSTALL_HINT})", "tflite_top1": None,
                "outputs_equal_tflite": None, "int8_vs_tflite_agreement": None}
    theirs = np.stack([o[0].reshape(-1) for o in run_tflite(compiled.graph.meta["path"], [[q] for q in q_inputs])])
    ours = np.stack([np.asarray(q).reshape(-1) for q in q_out])
    return {"tflite_interpreter": name, "tflite_top1": top1(theirs.astype(np.float64), y),
            "outputs_equal_tflite": int(np.all(theirs == ours, axis=1).sum()),
            "max_abs_diff_vs_tflite": int(np.abs(theirs.astype(np.int32) - ours.astype(np.int32)).max()),
            "int8_vs_tflite_agreement": float(np.mean(np.argmax(theirs, 1) == np.argmax(ours, 1)))}
