"""One file per operator; importing this package registers them all (see registry.py)."""
from . import clamp, onnx_only, reshape, transpose  # noqa: F401
from . import _stage  # noqa: F401  (op classes waiting to be merged into their op files)
