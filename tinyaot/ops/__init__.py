"""One file per operator; importing this package registers them all (see registry.py)."""
from . import add, clamp, conv, fully_connected, onnx_only, pool, reshape, softmax, transpose  # noqa: F401
