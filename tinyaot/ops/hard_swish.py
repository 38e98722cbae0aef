"""HardSwish, x * max(0, min(1, x / 6 + 1/2)) (ONNX's definition: HardSigmoid with alpha 1/6, beta 0.5, times x),
as a 256-entry table (see lut.py). Its output parameters come from calibration."""
from __future__ import annotations

import numpy as np

from onnx import helper

from tinyaot.ops.hard_sigmoid import hard_sigmoid
from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits


def hard_swish(x: np.ndarray) -> np.ndarray:
    x32 = np.asarray(x, np.float32)
    return (x32 * hard_sigmoid(x32, 1.0 / 6.0, 0.5).astype(np.float32)).astype(np.float64)


@register("HardSwish", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class HardSwish(LutOp):
    def fn(self, node, x):
        return hard_swish(x)

    def onnx_node(self, node, x, out):
        # HardSwish is opset 14 and the oracle's layer models are opset 13: ONNX defines it as exactly this
        return [helper.make_node("HardSigmoid", [x], [out + "_gate"], alpha=1.0 / 6.0, beta=0.5),
                helper.make_node("Mul", [x, out + "_gate"], [out])]
