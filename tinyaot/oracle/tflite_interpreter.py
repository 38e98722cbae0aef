"""The outside oracle of an int8 .tflite model: TensorFlow Lite Micro's own interpreter (the `tflite-micro` package
from PyPI), run on the host on the very int8 inputs tinyaot's C receives. Its outputs must equal tinyaot's bit for
bit: the arithmetic is the same one.

Why TFLite Micro and not the desktop interpreter (LiteRT, `ai-edge-litert`): TFLM has only the reference int8
kernels and no delegates, and it is the runtime these files are made for on a microcontroller (CMSIS-NN reproduces
its kernels bit for bit). LiteRT's default resolver hands the graph to XNNPACK and its optimized kernels (softmax by
a lookup table: up to 16 LSB apart from the reference on kws_dscnn), and even its reference resolver (BUILTIN_REF)
rescales FULLY_CONNECTED with one rounding of acc * multiplier where TFLite's reference (TFLM, CMSIS-NN) rounds twice
(SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT): measured on the shared models, LiteRT's
BUILTIN_REF equals TFLM on every CONV_2D, DEPTHWISE_CONV_2D, ADD, AVERAGE_POOL_2D and SOFTMAX output and differs by
one on some FULLY_CONNECTED outputs (ci/tflite_figures.py prints both). The package is optional (the `test` extra
installs it): without it verification says the interpreter did not run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tflite  # the schema's reader, as the frontend uses it

from tinyaot.errors import TinyaotError

try:  # optional: `pip install tflite-micro` (tinyaot's `test` extra)
    from tflite_micro.python.tflite_micro import _version as _tflm_version
    from tflite_micro.python.tflite_micro import runtime as _tflm
except ImportError:  # pragma: no cover - depends on the environment
    _tflm = None
    _tflm_version = None

PACKAGE = "tflite-micro"
INSTALL_HINT = "pip install tflite-micro"


def interpreter_name() -> str | None:
    """`tflite-micro <version>` when TFLite Micro's interpreter is installed, else None."""
    if _tflm is None:
        return None
    return f"{PACKAGE} {getattr(_tflm_version, '__version__', '?')}"


def run_tflite(path: str | Path, samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """TFLite Micro's outputs of the model at `path` for each sample: a list of its int8 inputs (in the model's
    input order, each in the input's shape) -> the list of its outputs (int8, in the output order)."""
    if _tflm is None:
        raise TinyaotError(f"TFLite Micro's interpreter is not installed ({INSTALL_HINT})")
    data = Path(path).read_bytes()
    n_out = int(tflite.Model.GetRootAsModel(data, 0).Subgraphs(0).OutputsLength())
    interp = _interpreter(data)
    outputs = []
    for sample in samples:
        for k, x in enumerate(sample):
            interp.set_input(np.ascontiguousarray(x), k)
        interp.invoke()
        outputs.append([np.array(interp.get_output(k)) for k in range(n_out)])
    return outputs


def _interpreter(data: bytes):
    """An interpreter with an arena large enough for the model (TFLM refuses to allocate in a smaller one)."""
    size = max(1 << 20, 10 * len(data))
    for _ in range(4):
        try:
            return _tflm.Interpreter.from_bytes(data, arena_size=size)
        except RuntimeError:
            size *= 4
    raise TinyaotError(f"TFLite Micro could not run the model (no arena up to {size // 4} bytes was enough)")
