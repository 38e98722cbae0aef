"""onnxruntime as the yardstick beside tinyaot: float accuracy, and onnxruntime's own static int8 quantization.

`tinyaot evaluate` reports float top-1, tinyaot's int8 top-1 and the top-1 of the model that onnxruntime's
`quantize_static` makes from the same calibration samples (QDQ, int8 activations and weights, weights per channel,
min/max ranges), so a user can tell whether an accuracy loss comes from int8 itself or from tinyaot.

Arrays are passed as `{input_name: array}` whose first axis is the sample. Our models fix the batch dimension to 1,
so samples are fed one at a time as `array[i:i+1]`; a model with a symbolic batch dimension gets the whole array in
one run.
"""
from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_static,
)

from tinyaot.errors import TinyaotError
from tinyaot.frontend.normalize import flatten_gemm_biases
from tinyaot.oracle.sessions import session_options

__all__ = ["float_predictions", "float_session", "ort_quantize_static", "ort_int8_predictions", "int8_session",
           "is_probability", "predicted_class", "top1"]

_PROVIDERS = ["CPUExecutionProvider"]

# onnxruntime's input type strings -> numpy dtypes, for casting user arrays to what the model declares.
_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def float_session(model_path: str | Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_path), session_options(), providers=_PROVIDERS)


def int8_session(qdq_model_path: str | Path) -> ort.InferenceSession:
    """A session for a QDQ model in which int8 QDQ Conv really runs as integer QLinearConv.

    On x86 onnxruntime otherwise keeps DQ -> Conv -> Q as a float Conv between (de)quantizers for int8 (it only
    fuses uint8 by default), which would measure float arithmetic on quantized values, not onnxruntime's int8 path.
    """
    so = session_options()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(str(qdq_model_path), sess_options=so, providers=_PROVIDERS)


def _feeds(session: ort.InferenceSession, inputs: Mapping[str, np.ndarray]) -> tuple[bool, list[dict]]:
    """Validate `inputs` against the session and split them into run feeds.

    Returns (batched, feeds): one feed with all samples if every input's batch dimension is symbolic, else one feed
    per sample, each shaped exactly as the model declares (batch 1).
    """
    declared = {i.name: i for i in session.get_inputs()}
    if set(inputs) != set(declared):
        raise TinyaotError(
            f"inputs {sorted(inputs)} do not match the model's inputs {sorted(declared)}")
    arrays = {n: np.asarray(a) for n, a in inputs.items()}
    counts = {a.shape[0] if a.ndim else None for a in arrays.values()}
    if len(counts) != 1 or None in counts:
        raise TinyaotError(f"every input needs the same number of samples on its first axis, got "
                           f"{ {n: a.shape for n, a in arrays.items()} }")
    (n_samples,) = counts
    dtypes = {n: _ORT_DTYPES.get(d.type) for n, d in declared.items()}
    for n, d in declared.items():
        if dtypes[n] is None:
            raise TinyaotError(f"input {n!r} has type {d.type}, which the evaluation does not support")

    def dynamic(dim) -> bool:
        return not isinstance(dim, int)

    batched = all(len(d.shape) > 0 and dynamic(d.shape[0]) for d in declared.values())
    if batched:
        return True, [{n: np.ascontiguousarray(a, dtype=dtypes[n]) for n, a in arrays.items()}]

    for n, d in declared.items():
        want = tuple(d.shape)
        got = (1,) + arrays[n].shape[1:]
        # Dims must match where the model fixes them; no silent reshape, since a layout mix-up (NHWC data for an
        # NCHW model, say) can have the right element count and still be wrong.
        if len(want) != len(got) or any(not dynamic(w) and w != g for w, g in zip(want, got)):
            raise TinyaotError(
                f"input {n!r}: one sample has shape {list(got)}, the model expects {list(want)}")
    feeds = [{n: np.ascontiguousarray(a[i:i + 1], dtype=dtypes[n]) for n, a in arrays.items()}
             for i in range(n_samples)]
    return False, feeds


def _predict(session: ort.InferenceSession, inputs: Mapping[str, np.ndarray], output: str | None = None
             ) -> np.ndarray:
    batched, feeds = _feeds(session, inputs)
    names = [o.name for o in session.get_outputs()]
    if output is not None and output not in names:
        raise TinyaotError(f"the model has no output {output!r}; its outputs are {names}")
    chosen = names[0] if output is None else output
    outs = [session.run([chosen], feed)[0] for feed in feeds]
    # Each per-sample output carries the batch dimension 1 first; joining on it gives [samples, ...].
    return outs[0] if batched else np.concatenate(outs, axis=0)


def float_predictions(model_path: str | Path, input_name_to_array: Mapping[str, np.ndarray],
                      output: str | None = None) -> np.ndarray:
    """Values of the model's output `output` (default: its first graph output) for every sample, stacked on axis 0
    ([samples, ...])."""
    return _predict(float_session(model_path), input_name_to_array, output)


def ort_int8_predictions(qdq_model_path: str | Path, inputs: Mapping[str, np.ndarray],
                         output: str | None = None) -> np.ndarray:
    """As float_predictions, for a QDQ model from ort_quantize_static, run on onnxruntime's int8 kernels."""
    return _predict(int8_session(qdq_model_path), inputs, output)


class _SampleReader(CalibrationDataReader):
    """Hands quantize_static one prepared feed per calibration sample."""

    def __init__(self, feeds: list[dict]):
        self._feeds = feeds
        self._next = 0

    def get_next(self) -> dict | None:
        if self._next >= len(self._feeds):
            return None
        self._next += 1
        return self._feeds[self._next - 1]

    def rewind(self) -> None:
        self._next = 0

    def __len__(self) -> int:
        return len(self._feeds)


def ort_quantize_static(model_path: str | Path, calibration: Mapping[str, np.ndarray],
                        out_path: str | Path, *, preprocess: bool = True) -> Path:
    """onnxruntime's own int8 model of `model_path`: QDQ, QInt8 activations and weights, per channel, MinMax.
    preprocess=False skips onnxruntime's quant_pre_process (for tests that need the raw graph's structure)."""
    model_path, out_path = Path(model_path), Path(out_path)
    # Calibration samples are fed one by one at batch 1, validated against the float model's declared inputs.
    batched, feeds = _feeds(float_session(model_path), calibration)
    if batched:
        # Split a symbolic-batch input into per-sample feeds too, so min/max sees the same tensors either way.
        (feed,) = feeds
        n = next(iter(feed.values())).shape[0]
        feeds = [{k: v[i:i + 1] for k, v in feed.items()} for i in range(n)]
    if not feeds:
        raise TinyaotError("calibration needs at least one sample")
    out_path.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="tinyaot_ort_q_") as tmp:
        source = Path(tmp) / "preprocessed.onnx"
        try:
            if not preprocess:
                raise RuntimeError("pre-processing not asked for")
            # Symbolic shape inference and onnxruntime's optimizer (folds BatchNormalization into Conv): what
            # quantize_static expects, and what makes onnxruntime's result a fair, best-effort baseline.
            quant_pre_process(str(model_path), str(source))
        except Exception as exc:  # noqa: BLE001 - any failure of the optional pre-pass means the same thing
            # Pre-processing is an optimisation of the baseline, not a requirement: symbolic shape inference does
            # not know every op and can raise on graphs that onnxruntime itself runs. quantize_static still works
            # on the raw model (it only quantizes less fused graphs, e.g. BatchNormalization stays float), so a
            # baseline without it beats no baseline; the warning keeps the reduced comparison visible.
            if preprocess:
                warnings.warn(f"onnxruntime quant_pre_process failed on {model_path.name} "
                              f"({type(exc).__name__}: {exc}); quantizing the raw model instead", stacklevel=2)
            source = model_path
        model = onnx.load(str(source))
        if flatten_gemm_biases(model):
            source = Path(tmp) / "gemm_bias_1d.onnx"
            onnx.save(model, str(source))
        # onnxruntime's quantizer logs on the root logger a warning per rank-1 weight it cannot quantize per
        # channel (a standalone BatchNormalization's scale: it quantizes it per tensor, as it should); the user
        # of `evaluate` asked for none of that, so it is kept quiet for the call
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            _quantize(source, out_path, feeds)
        finally:
            root.setLevel(level)
    return out_path


def _quantize(source: Path, out_path: Path, feeds: list) -> None:
    quantize_static(
        str(source),
        str(out_path),
        _SampleReader(feeds),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        calibration_providers=_PROVIDERS,
    )


def is_probability(outputs: np.ndarray) -> bool:
    """An output of one value per sample, every value within [0, 1]: a sigmoid head's probability, scored as
    binary (`predicted_class`). Decided on the float model's outputs and applied to every model compared."""
    flat = np.asarray(outputs).reshape(len(outputs), -1)
    return flat.shape[1] == 1 and len(flat) > 0 and float(flat.min()) >= 0.0 and float(flat.max()) <= 1.0


def predicted_class(outputs: np.ndarray, binary: bool = False) -> np.ndarray:
    """Each sample's class: the highest-scoring one (last axis), or with `binary` (one value per sample, a
    probability) 1 where it is above 0.5 and 0 otherwise."""
    flat = np.asarray(outputs).reshape(len(outputs), -1)
    return (flat[:, 0] > 0.5).astype(np.int64) if binary else flat.argmax(axis=1)


def top1(outputs: np.ndarray, labels: np.ndarray, binary: bool = False) -> float:
    """Fraction of samples whose class (`predicted_class`) equals the label, in [0, 1]."""
    outputs, labels = np.asarray(outputs), np.asarray(labels).reshape(-1)
    if outputs.shape[0] != labels.shape[0] or labels.shape[0] == 0:
        raise ValueError(f"need one label per output row and at least one sample, got {outputs.shape[0]} outputs "
                         f"and {labels.shape[0]} labels")
    return float(np.mean(predicted_class(outputs, binary) == labels))
