"""LeakyRelu, x for x >= 0 and alpha * x below (ONNX default alpha 0.01), as a 256-entry table (see lut.py): one
table lookup replaces the two multipliers of TFLite's LEAKY_RELU and rounds exactly like onnxruntime's QDQ
layer. Its output parameters come from calibration. A per-channel slope is PRelu (prelu.py)."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits


def leaky_relu(x: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    x32 = np.asarray(x, np.float32)
    return np.where(x32 >= 0, x32, x32 * np.float32(alpha)).astype(np.float64)


@register("LeakyRelu", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class LeakyRelu(LutOp):
    def _alpha(self, node):
        return float(node.attrs.get("alpha", 0.01))

    def fn(self, node, x):
        return leaky_relu(x, self._alpha(node))

    def onnx_node(self, node, x, out):
        return helper.make_node("LeakyRelu", [x], [out], alpha=self._alpha(node))
