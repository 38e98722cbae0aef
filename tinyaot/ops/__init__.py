"""One file per operator; importing this package registers them all (see registry.py)."""
from . import add, clamp, conv, fully_connected, onnx_only, pool, reshape, softmax, transpose  # noqa: F401
from . import conv_transpose, reduce_mean, resize  # noqa: F401  (spatial ops, issue 3)
from . import concat, hard_sigmoid, hard_swish, leaky_relu, mul, pad, prelu, sigmoid, sub, tanh  # noqa: F401  (issue 3)
