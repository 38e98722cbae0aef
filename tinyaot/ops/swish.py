"""Swish (SiLU), x * sigmoid(x), as a 256-entry table (see lut.py): what EfficientNet's and other PyTorch models'
`x * torch.sigmoid(x)` (nn.SiLU) becomes when `passes/fuse_swish` finds the Sigmoid and the Mul that spell it. ONNX
has no such operator: the oracle runs the Sigmoid and the Mul. Its output parameters come from calibration (the
Mul's output)."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.ops.lut import LutOp
from tinyaot.ops.registry import register, Traits
from tinyaot.ops.sigmoid import sigmoid


def swish(x: np.ndarray) -> np.ndarray:
    # float32 as onnxruntime carries the two nodes: the sigmoid rounded to float32, then the product
    x32 = np.asarray(x, np.float32)
    return (x32 * sigmoid(x32).astype(np.float32)).astype(np.float64)


@register("Swish", traits=Traits(layout="elementwise", kernels=("tinyaot_lut_s8",)))
class Swish(LutOp):
    internal = True  # IR-only: made by a pass, never read from ONNX

    def fn(self, node, x):
        return swish(x)

    def onnx_node(self, node, x, out):
        return [helper.make_node("Sigmoid", [x], [out + "_gate"]), helper.make_node("Mul", [x, out + "_gate"], [out])]
