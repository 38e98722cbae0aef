"""ctypes twins of the structs in templates/kernels/tinyaot_nn_types.h, shared by the kernel tests that call the
host-compiled C directly. Keep field order and types in step with the header."""
from __future__ import annotations

import ctypes

i32 = ctypes.c_int32
VP = ctypes.c_void_p


class Dims(ctypes.Structure):
    _fields_ = [("n", i32), ("h", i32), ("w", i32), ("c", i32)]


class Tile(ctypes.Structure):
    _fields_ = [("h", i32), ("w", i32)]


class Activation(ctypes.Structure):
    _fields_ = [("min", i32), ("max", i32)]


class Context(ctypes.Structure):
    _fields_ = [("buf", VP), ("size", i32)]


class ConvParams(ctypes.Structure):
    _fields_ = [("input_offset", i32), ("output_offset", i32), ("stride", Tile), ("padding", Tile),
                ("dilation", Tile), ("activation", Activation)]


class DwConvParams(ctypes.Structure):
    _fields_ = ConvParams._fields_ + [("ch_mult", i32)]


class FcParams(ctypes.Structure):
    _fields_ = [("input_offset", i32), ("filter_offset", i32), ("output_offset", i32), ("activation", Activation)]


class PoolParams(ctypes.Structure):
    _fields_ = [("stride", Tile), ("padding", Tile), ("activation", Activation)]


class PerTensorQuant(ctypes.Structure):
    _fields_ = [("multiplier", i32), ("shift", i32)]
