"""Helpers for the spatial-op tests (pooling options, ReduceMean, Resize, ConvTranspose), beside op_models.py's
model building and `deploy_verified`.

`float_model_gap` measures what a deploy cannot: how far tinyaot's int8 output, dequantized, lies from the float
model run by onnxruntime, in output LSB. The per-layer oracle is built by tinyaot from its own reading of the
attributes, so only this comparison with the untouched float model catches a misread attribute (a pad on the wrong
side, a Resize coordinate rounded the wrong way). The ctypes structures mirror templates/kernels/tinyaot_nn_types.h
for calling new kernels on the host.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tinyaot.api import compile_model
from tinyaot.toolchain.host import compile_shared
from tinyaot.oracle.reference import run_reference
from tinyaot.paths import TEMPLATES
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

KERNELS_DIR = TEMPLATES / "kernels"


def layer_diff(report: dict, op: str) -> int:
    """The worst difference from onnxruntime over the layers of one op type (asserting there is one)."""
    diffs = [l["max_abs_diff"] for l in report["verify"]["layers_vs_onnxruntime"] if l["op"] == op]
    assert diffs, f"no {op} layer in the report"
    return max(diffs)


def float_model_gap(model: Path, cal: Path) -> float:
    """max |dequantized tinyaot int8 output - onnxruntime float output| over the calibration samples, in units of
    the output scale."""
    compiled = compile_model(model, cal)
    g = compiled.graph
    sess = ort.InferenceSession(str(model), session_options(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    worst = 0.0
    for x in compiled.samples[compiled.input]:
        q = run_reference(g, {compiled.input: compiled.quantize_input(x)})[compiled.output]
        ours = compiled.dequantize_output(q)
        want = sess.run(None, {name: x})[0]
        worst = max(worst, float(np.abs(ours - want.reshape(ours.shape)).max() / g.tensors[compiled.output].quant.s))
    return worst


def host_kernels(*names: str) -> ctypes.CDLL:
    """The named kernel files compiled for the host (warnings are errors), loaded through ctypes."""
    return ctypes.CDLL(str(compile_shared([KERNELS_DIR / n for n in names], [KERNELS_DIR],
                                          extra_flags=("-Wpedantic", "-Werror"))))


class Dims(ctypes.Structure):  # tinyaot_dims
    _fields_ = [("n", ctypes.c_int32), ("h", ctypes.c_int32), ("w", ctypes.c_int32), ("c", ctypes.c_int32)]


class Tile(ctypes.Structure):  # tinyaot_tile
    _fields_ = [("h", ctypes.c_int32), ("w", ctypes.c_int32)]


class Activation(ctypes.Structure):  # tinyaot_activation
    _fields_ = [("min", ctypes.c_int32), ("max", ctypes.c_int32)]


class PoolParams(ctypes.Structure):  # tinyaot_pool_params
    _fields_ = [("stride", Tile), ("padding", Tile), ("activation", Activation)]


class ConvParams(ctypes.Structure):  # tinyaot_conv_params
    _fields_ = [("input_offset", ctypes.c_int32), ("output_offset", ctypes.c_int32), ("stride", Tile),
                ("padding", Tile), ("dilation", Tile), ("activation", Activation)]


class PerChannelQuant(ctypes.Structure):  # tinyaot_per_channel_quant_params
    _fields_ = [("multiplier", ctypes.POINTER(ctypes.c_int32)), ("shift", ctypes.POINTER(ctypes.c_int32))]


def ptr(a: np.ndarray | None):
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


def ref(obj) -> ctypes.c_void_p:
    return ctypes.cast(ctypes.byref(obj), ctypes.c_void_p)
