"""Tanh as a 256-entry table (see lut.py). The output parameters are TFLite's fixed ones, scale 1/128 and zero
point 0: the levels span [-1, 127/128] and tanh's +1.0 saturates to 127/128."""
from __future__ import annotations

import numpy as np

from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits


@register("Tanh", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class Tanh(LutOp):
    fixed_output = (1.0 / 128, 0)

    def fn(self, node, x):
        return np.tanh(x)
