"""HardSigmoid, max(0, min(1, alpha * x + beta)) (ONNX defaults alpha 0.2, beta 0.5), as a 256-entry table (see
lut.py). Its output parameters come from calibration."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits


def hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    # alpha and beta are float32 attributes in ONNX; the product is taken in float32 as onnxruntime does
    xa = np.asarray(x, np.float32) * np.float32(alpha) + np.float32(beta)
    return np.clip(xa, np.float32(0.0), np.float32(1.0)).astype(np.float64)


@register("HardSigmoid", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class HardSigmoid(LutOp):
    def _ab(self, node):
        return float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))

    def fn(self, node, x):
        return hard_sigmoid(x, *self._ab(node))

    def onnx_node(self, node, x, out):
        alpha, beta = self._ab(node)
        return helper.make_node("HardSigmoid", [x], [out], alpha=alpha, beta=beta)
