"""Accuracy: the float model (onnxruntime), tinyaot's int8 model (the generated C, host-compiled; checked bit-exact
against the numpy reference on a few samples every run) and onnxruntime's own int8 quantization, on the same
labelled samples.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tinyaot import __version__
from tinyaot.compress.ort_baseline import (float_predictions, ort_int8_predictions, ort_quantize_static,
                                           is_probability, predicted_class, top1)
from tinyaot.compress.pipeline import compression_report
from tinyaot.core.target import GENERIC
from tinyaot.compress.precision import precision_report
from tinyaot.errors import VerificationError
from tinyaot.frontend import ImportedModel, import_model
from tinyaot.frontend.normalize import float32_model_file
from tinyaot.options import Options
from tinyaot.oracle.reference import run_reference_many
from tinyaot.oracle.tflite_interpreter import INSTALL_HINT, interpreter_name, run_tflite
from tinyaot.toolchain.hostjit import HostModel

from .compile import Compiled, compile_model, retarget
from .labelled import label_output as label_output_of, load_labelled, take
from .precision_search import resolve_activation_bits
from .report import weights_bytes


def evaluate(model: str | Path | ImportedModel, calibration: str | Path | None, data: str | Path,
             options: Options | None = None, *, target=None, compiled: Compiled | None = None) -> dict:
    """Top-1 of the float model (onnxruntime), of tinyaot's int8 model (the generated C, host-compiled), and of
    onnxruntime's own quantize_static (QDQ, per-channel, same calibration samples), on the same samples.
    `options` as for compile_model (with compression the int8 figure is the compressed model's, and `weights_bytes` /
    `compression` say what it costs in flash), and `verification.limit` (the first N samples),
    `verification.compare_onnxruntime` and `verification.label_output`. `target` (a tinyaot.core.target.Target;
    None: generic kernels) picks the kernel variants the host-compiled C runs: every variant is bit-exact, so top-1
    does not depend on it. A model of several inputs takes one array per input name in `data`; one of several
    outputs is scored on its first output unless `verification.label_output` names another. `compiled`:
    compile_model's result for this model, calibration and options (a sweep compiles once for evaluate and deploy),
    used instead of compiling again."""
    options = Options() if options is None else options
    imported = import_model(model, options.compile.input_shapes)
    model = imported.path if isinstance(model, ImportedModel) else model  # as given, for the result's "model"
    if compiled is not None:
        compiled = retarget(compiled, GENERIC if target is None else target)
    else:
        # activation widths: 8, 16, {layer: 8|16}, or searched within `max_accuracy_drop` points on `data`
        bits, mixed = resolve_activation_bits(imported, calibration, data, options)
        compiled = compile_model(imported, calibration, options.with_(activation_bits=bits), target=target)
        if mixed is not None:
            compiled.graph.meta["mixed_precision"] = mixed
    g = compiled.graph
    limit = options.verification.limit
    scored = label_output_of(g.outputs, options.verification.label_output)
    xs, y = load_labelled(data, g.meta["inputs"])
    xs, y = take(xs, limit), y if limit is None else y[:limit]
    count = len(y)
    host = HostModel(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, compiled.patch)
    q_in = [compiled.quantize_inputs(compiled.feed(k, xs)) for k in range(count)]
    q_out = [host.run(q) for q in q_in]
    # The host C must equal the numpy reference bit for bit (every output); check it on a few samples every run.
    checked = min(count, 4)
    host_diff = 0  # the largest |host C - numpy reference| over the checked samples, in LSB
    for k, ref in enumerate(run_reference_many(g, q_in[:checked])):
        diff = max(int(np.abs(ref[o].astype(np.int32).reshape(-1) - q_out[k][o].astype(np.int32).reshape(-1)).max())
                   for o in g.outputs)
        host_diff = max(host_diff, diff)
        if diff:
            raise VerificationError(f"host-compiled C differs from the numpy reference on sample {k} by up to {diff} "
                               "LSB (a tinyaot bug)")
    host_matches = (host_diff == 0) if checked else None  # nothing compared: unknown, not "matches"
    int8_logits = np.stack([compiled.dequantize(scored, q[scored]).reshape(-1) for q in q_out])
    # onnxruntime helpers take [N, ...] with one model batch per sample: drop the batch-of-1 axis.
    shapes = {i["name"]: tuple(i["shape"]) for i in g.meta["inputs"]}
    x_ort = {n: a.reshape((count,) + shapes[n][1:]) for n, a in xs.items()}
    if compiled.prequantized:
        return _evaluate_prequantized(model, calibration, data, compiled, int8_logits, x_ort, y, checked,
                                      options.verification.compare_onnxruntime, host_matches, scored, q_out,
                                      q_in)
    cal_ort = {n: compiled.samples[n].reshape((-1,) + shapes[n][1:]) for n in g.inputs}
    with tempfile.TemporaryDirectory(prefix="tinyaot-ort-") as tmp:
        # onnxruntime runs the float32 model tinyaot compiled (a float16 model's float32 rewrite)
        source = float32_model_file(model, Path(tmp))
        float_out = float_predictions(source, x_ort, scored).reshape(count, -1)
        binary = is_probability(float_out)  # a sigmoid head: class 1 above 0.5
        ort_out = None
        if options.verification.compare_onnxruntime:
            qdq = ort_quantize_static(source, cal_ort, Path(tmp) / "model_qdq.onnx")
            ort_out = ort_int8_predictions(qdq, x_ort, scored).reshape(count, -1)
    result = {
        "tinyaot_version": __version__,
        "model": str(model), "calibration": str(calibration), "data": str(data), "samples": int(count),
        "calibration_samples": int(len(compiled.samples[compiled.input])), "label_output": scored,
        "float_top1": top1(float_out, y, binary),
        "int8_top1": top1(int8_logits, y, binary),
        "onnxruntime_int8_top1": None,
        "agreement": float(np.mean(predicted_class(float_out, binary) == predicted_class(int8_logits, binary))),
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes,
        "weights_bytes": weights_bytes(g),
        "compression": compression_report(g),  # the weights' cost, measured on the same run as the accuracy
        "activation_bits": precision_report(g),  # 8, 16 or mixed (and the --max-accuracy-drop search)
        "quantization": {"calibration": g.meta.get("calibration")},  # method, CLE, bias correction
    }
    if ort_out is not None:
        result["onnxruntime_int8_top1"] = top1(ort_out, y, binary)
        result["onnxruntime_int8_agreement"] = float(np.mean(predicted_class(float_out, binary) ==
                                                             predicted_class(ort_out, binary)))
    return result


def _evaluate_prequantized(model, calibration, data, compiled: Compiled, int8_logits, x_ort, y, checked,
                           compare_onnxruntime: bool, host_matches: bool, scored: str, q_out, q_inputs) -> dict:
    """A pre-quantized model has no float original to measure: tinyaot's int8 is set against onnxruntime
    running the very same QDQ model on its int8 kernels (so both use the model's own parameters), an int8 .tflite
    model against TFLite Micro's interpreter running the same file on the same int8 inputs, whose every output
    must equal the C's."""
    binary = is_probability(int8_logits)  # no float model: the int8 one's values decide (a sigmoid head)
    result = {
        "tinyaot_version": __version__,
        "model": str(model), "calibration": None if calibration is None else str(calibration), "data": str(data),
        "samples": int(len(y)), "calibration_samples": 0, "prequantized": True, "label_output": scored,
        "float_top1": None, "int8_top1": top1(int8_logits, y, binary), "onnxruntime_int8_top1": None,
        "agreement": None,
        "int8_vs_onnxruntime_agreement": None,
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes, "weights_bytes": weights_bytes(compiled.graph),
        "compression": compression_report(compiled.graph),
    }
    if compiled.graph.meta.get("format") == "tflite":
        return {**result, **_versus_tflite(compiled, q_inputs, q_out, y, scored)} if compare_onnxruntime else result
    if compare_onnxruntime:
        ort_out = ort_int8_predictions(model, x_ort, scored).reshape(len(y), -1)
        result["onnxruntime_int8_top1"] = top1(ort_out, y, binary)
        result["int8_vs_onnxruntime_agreement"] = float(np.mean(predicted_class(ort_out, binary) ==
                                                                predicted_class(int8_logits, binary)))
    return result


def _versus_tflite(compiled: Compiled, q_inputs, q_out, y, scored: str) -> dict:
    """TFLite Micro's interpreter on the same int8 inputs: its top-1 (on the scored output), and on how many samples
    its outputs equal the C's bit for bit, every output (all of them, or tinyaot has a bug; with compression options
    the C computes other weights)."""
    name = interpreter_name()
    if name is None:
        return {"tflite_interpreter": f"not run ({INSTALL_HINT})", "tflite_top1": None,
                "outputs_equal_tflite": None, "int8_vs_tflite_agreement": None}
    g = compiled.graph
    runs = run_tflite(g.meta["path"], [[q[n] for n in g.inputs] for q in q_inputs])
    theirs = [np.concatenate([o.reshape(-1) for o in outs]).astype(np.int32) for outs in runs]
    ours = [np.concatenate([np.asarray(q[o]).reshape(-1) for o in g.outputs]).astype(np.int32) for q in q_out]
    k = g.outputs.index(scored)
    scored_theirs = np.stack([outs[k].reshape(-1) for outs in runs])
    scored_ours = np.stack([np.asarray(q[scored]).reshape(-1) for q in q_out])
    return {"tflite_interpreter": name, "tflite_top1": top1(scored_theirs.astype(np.float64), y),
            "outputs_equal_tflite": int(sum(np.array_equal(t, o) for t, o in zip(theirs, ours))),
            "max_abs_diff_vs_tflite": int(max(np.abs(t - o).max() for t, o in zip(theirs, ours))),
            "int8_vs_tflite_agreement": float(np.mean(np.argmax(scored_theirs, 1) == np.argmax(scored_ours, 1)))}
