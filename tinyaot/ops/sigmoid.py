"""Sigmoid (TFLite LOGISTIC) as a 256-entry table (see lut.py). The output parameters are TFLite's fixed ones,
scale 1/256 and zero point -128: the 256 levels span [0, 1) and sigmoid's 1.0 saturates to 255/256."""
from __future__ import annotations

import numpy as np

from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits


def sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflows to inf for x < -709, giving exactly 0.0, which is the right limit
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


@register("Sigmoid", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class Sigmoid(LutOp):
    fixed_output = (1.0 / 256, -128)

    def fn(self, node, x):
        return sigmoid(x)
