"""tinyaot: float ONNX in, calibrated integer-only CMSIS-style C out, verified under QEMU."""

__version__ = "0.1.0"
