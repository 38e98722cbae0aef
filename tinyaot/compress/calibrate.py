"""Calibration: run the float model in onnxruntime over sample inputs and collect each tensor's range.

The ranges are keyed by ONNX tensor name. The passes keep names (a fused Conv+Relu writes the Relu's output
tensor), so the range of every IR tensor is the range of the ONNX tensor of the same name.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from tinyaot.compress.output_ranges import choose_by_output
from tinyaot.oracle.fake_quant import fake_quant_model
from tinyaot.oracle.sessions import session_options
from tinyaot.compress.ranges import Histogram, candidate_ranges, choose_range, parse_method
from tinyaot.errors import TinyaotError


def load_samples(path: Path, inputs: list[dict], skip=()) -> dict[str, np.ndarray]:
    """Reads an .npz of samples: keys are input names, the first axis is the sample. A single-input model may
    also use a file whose only array, or whose `x` array, is that input. Returns name -> float32 [N, *shape]
    where shape is the model input shape (a leading batch of 1 may be left out of the file's samples). For an input
    the model declares int8 with its scale and zero point (an int8 .tflite model), int8 arrays are taken as its
    integers. Arrays named in `skip` (a labelled file's `y`) are not samples."""
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"calibration file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k not in skip}
    except Exception as exc:
        raise TinyaotError(f"{path} is not a readable .npz file ({type(exc).__name__})") from None
    names = [i["name"] for i in inputs]
    if all(n in arrays for n in names):
        chosen = {n: arrays[n] for n in names}
    elif len(names) == 1 and ("x" in arrays or len(arrays) == 1):
        chosen = {names[0]: arrays["x"] if "x" in arrays else next(iter(arrays.values()))}
    else:
        raise TinyaotError(f"{path} has arrays {sorted(arrays)}; expected one per model input "
                           f"({', '.join(names)}), or for a single-input model one array or an 'x' array")
    out: dict[str, np.ndarray] = {}
    count = None
    for inp in inputs:
        a = np.asarray(chosen[inp["name"]])
        shape = tuple(inp["shape"])
        if a.ndim >= 1 and tuple(a.shape[1:]) == shape:
            pass
        elif shape and shape[0] == 1 and tuple(a.shape[1:]) == shape[1:]:
            a = a.reshape((a.shape[0],) + shape)
        else:
            also = f" or [N, {', '.join(map(str, shape[1:]))}]" if shape and shape[0] == 1 else ""
            raise TinyaotError(f"{path}: samples for input {inp['name']!r} have shape {list(a.shape)}; expected "
                               f"[N, {', '.join(map(str, shape))}]{also} (first axis = sample)")
        if a.shape[0] == 0:
            raise TinyaotError(f"{path}: no samples for input {inp['name']!r}")
        if not np.issubdtype(a.dtype, np.number):
            raise TinyaotError(f"{path}: input {inp['name']!r} is not numeric ({a.dtype})")
        if not np.all(np.isfinite(a)):
            raise TinyaotError(f"{path}: input {inp['name']!r} holds NaN or infinite values")
        if count is not None and a.shape[0] != count:
            raise TinyaotError(f"{path}: inputs have different sample counts ({inputs[0]['name']!r} {count}, "
                               f"{inp['name']!r} {a.shape[0]}); every input needs one array entry per sample")
        count = a.shape[0]
        if a.dtype == np.int8 and inp.get("dtype") == "int8" and "scale" in inp:
            # a model with int8 inputs (an int8 .tflite): int8 samples are its integers, held here as the real
            # values they stand for, which quantize back to exactly those integers
            a = (a.astype(np.float64) - inp["zero_point"]) * inp["scale"]
        out[inp["name"]] = a.astype(np.float32)
    return out


def float_session(model: onnx.ModelProto, extra_outputs: list[str] = ()) -> ort.InferenceSession:
    """An onnxruntime session of the float model with no graph optimisation, so intermediate names survive;
    `extra_outputs` become graph outputs so their values can be read."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra_outputs:
        if name not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            have.add(name)
    opts = session_options()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def collect_ranges(model: onnx.ModelProto, samples: dict[str, np.ndarray],
                   tensor_names: list[str], method: str | None = None,
                   chosen: dict[str, str] | None = None, transforms: dict | None = None,
                   scored: list[str] | None = None) -> dict[str, tuple[float, float]]:
    """Range of each named float tensor over all samples. `method` (compress/ranges.py, `--calibrate`): None or
    'minmax' is plain min/max (every calibration value representable); the others clip by a histogram of the
    values gathered in the same onnxruntime pass. `chosen`, when given, receives tensor -> the method that set it.
    `transforms`: tensor -> (per-channel divisor, per-channel offset or None) applied on the ONNX tensor's axis 1
    before anything is measured: cross-layer equalization's exact change of that tensor (compress/equalize.py).
    `scored`: the tensors the compiled graph quantizes (None: all), which `auto` fake-quantizes and judges by the
    model's output (compress/output_ranges.py); the others take min/max under `auto`."""

    name_, pct = parse_method(method)
    inputs = list(samples)

    def method_of(tensor: str) -> str:
        if name_ == "auto-input":  # the default: min/max, but a graph input's range judged by the output
            return "auto" if tensor in inputs else "minmax"
        return name_

    keep = name_ not in ("minmax", "auto-input")  # histograms of the inner tensors (the inputs' are cheap)
    judge = name_ in ("auto", "auto-input")  # ranges judged by the model's output (compress/output_ranges.py)
    # onnxruntime can refuse a model that ONNX's checker accepts (an opset newer than it knows, an op version it
    # lacks); its pybind errors share no useful base class, and the user must see one line, not a traceback.
    try:
        sess = float_session(model, tensor_names)
    except Exception as exc:
        raise TinyaotError(f"onnxruntime cannot load the float model: {_first_line(exc)}") from None
    outs = [o.name for o in sess.get_outputs()]
    lo = {n: np.inf for n in outs}
    hi = {n: -np.inf for n in outs}
    count = len(next(iter(samples.values())))
    kept: dict[str, list[np.ndarray]] = {n: [] for n in outs} if keep else {}
    model_outputs = [o.name for o in model.graph.output]
    float_outputs: list[list[np.ndarray]] = []
    ranks: dict[str, int] = {name: arr.ndim - 1 for name, arr in samples.items()}
    feeds = [{name: arr[k] for name, arr in samples.items()} for k in range(count)]
    for k, feed in enumerate(feeds):
        try:
            values = sess.run(outs, feed)
        except Exception as exc:
            raise TinyaotError(f"onnxruntime failed to run the float model on calibration sample {k}: "
                               f"{_first_line(exc)}") from None
        if judge:
            by_name = dict(zip(outs, values))
            float_outputs.append([np.asarray(by_name[o], np.float64) for o in model_outputs])
        for name, value in zip(outs, values):
            v = np.asarray(value)
            ranks[name] = v.ndim
            if transforms and name in transforms:
                v = _transform(v, *transforms[name])
            if v.dtype.kind == "f" and v.size:
                lo[name] = min(lo[name], float(v.min()))
                hi[name] = max(hi[name], float(v.max()))
                if keep:
                    kept[name].append(_thin(v.ravel(), count))
    for name, arr in samples.items():
        lo[name], hi[name] = float(arr.min()), float(arr.max())
        if method_of(name) != "minmax":
            kept[name] = [_thin(arr.ravel(), 1)]
    out = {n: (lo[n], hi[n]) for n in lo if np.isfinite(lo[n])}
    used = {n: "minmax" for n in out}
    for n in out:
        if method_of(n) not in ("minmax", "auto") and kept.get(n):
            (out[n], used[n]) = choose_range(Histogram(np.concatenate(kept[n]), *out[n]), method_of(n), pct)
    if judge:
        # every tensor the compiled graph quantizes is fake-quantized; those under `auto` choose among the
        # methods' ranges, the others keep theirs
        order = [n for n in inputs + [o for node in model.graph.node for o in node.output]
                 if n in out and (scored is None or n in scored)]
        candidates = {n: (_candidates(Histogram(np.concatenate(kept[n]), *out[n]), pct, name_)
                          if method_of(n) == "auto" and kept.get(n) else {used[n]: out[n]}) for n in order}
        if all(len(set(c.values())) < 2 for c in candidates.values()):
            judge = False  # nothing to choose (e.g. an image input whose 99.99 percentile is its maximum)
    if judge:
        try:
            fq = float_session(fake_quant_model(model, order, ranks, transforms))
            ranges, methods = choose_by_output(fq, feeds, float_outputs, order, candidates)
        except Exception as exc:
            # the default must never refuse a model plain min/max compiles: it falls back to min/max (the
            # record says so); an explicit `auto` says why it cannot run
            if name_ == "auto":
                raise TinyaotError(f"onnxruntime cannot run the fake-quantized model of --calibrate auto: "
                                   f"{_first_line(exc)}") from None
            ranges, methods = {}, {}
        out.update(ranges)
        used.update(methods)
    if chosen is not None:
        chosen.update(used)
    return out


# What the default (`auto-input`) lets a graph input's range be: its min/max or its percentile range, the clip
# that drops only the rarest values (1 in 10^4 per side at the default 99.99). By measurement: judged by the same
# output error, mse's and entropy's deeper clips of the input lost pt_frames_attention a sample that the percentile
# clip keeps (README "Calibration methods").
INPUT_CANDIDATES = ("minmax", "percentile")


def _candidates(h, pct: float | None, method: str) -> dict[str, tuple[float, float]]:
    return candidate_ranges(h, pct) if method == "auto" else candidate_ranges(h, pct, INPUT_CANDIDATES)


def _transform(v: np.ndarray, divisor: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    shape = [1] * v.ndim
    shape[1] = -1
    out = v.astype(np.float64) / np.asarray(divisor, np.float64).reshape(shape)
    if offset is not None:
        out = out - np.asarray(offset, np.float64).reshape(shape)
    return out.astype(np.float32)


def channel_extremes(model: onnx.ModelProto, samples: dict[str, np.ndarray], tensor_names: list[str],
                     transforms: dict | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-channel (ONNX axis 1) minimum and maximum of each named tensor over all samples, after `transforms`."""
    try:
        sess = float_session(model, tensor_names)
    except Exception as exc:
        raise TinyaotError(f"onnxruntime cannot load the float model: {_first_line(exc)}") from None
    lo: dict[str, np.ndarray] = {}
    hi: dict[str, np.ndarray] = {}
    count = len(next(iter(samples.values())))
    for k in range(count):
        feed = {name: arr[k] for name, arr in samples.items()}
        try:
            values = sess.run(tensor_names, feed)
        except Exception as exc:
            raise TinyaotError(f"onnxruntime failed to run the float model on calibration sample {k}: "
                               f"{_first_line(exc)}") from None
        for name, value in zip(tensor_names, values):
            v = np.asarray(value)
            if transforms and name in transforms:
                v = _transform(v, *transforms[name])
            axes = tuple(a for a in range(v.ndim) if a != 1)
            a, b = v.min(axis=axes).astype(np.float64), v.max(axis=axes).astype(np.float64)
            lo[name] = a if name not in lo else np.minimum(lo[name], a)
            hi[name] = b if name not in hi else np.maximum(hi[name], b)
    return lo, hi


MAX_VALUES = 1 << 21  # calibration values kept per tensor for its histogram (8 MB of float32)


def _thin(v: np.ndarray, count: int) -> np.ndarray:
    """A sample's values, every k-th one when all samples together would pass MAX_VALUES (a regular stride,
    so the histogram's shape is kept; its exact min/max are tracked separately)."""
    step = max(1, -(-v.size * count // MAX_VALUES))
    return v[::step].astype(np.float32, copy=False)


def _first_line(exc: Exception, limit: int = 300) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # onnxruntime prefixes its message with an error code and the C++ source location and signature.
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"^/\S+:\d+ .*?\) ", "", line)
    return line if len(line) <= limit else line[:limit] + "..."
