"""LeakyRelu (alpha) as a 256-entry table with calibrated output parameters: every table entry against
onnxruntime's QDQ LeakyRelu, for the default and a large alpha, and a deploy after a Conv verified under QEMU."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import deploy_after_conv, layer_ops, lut_exhaustive


def test_leaky_relu_tables_against_onnxruntime_on_every_input(tmp_path):
    default, c1 = lut_exhaustive(tmp_path, helper.make_node("LeakyRelu", ["x"], ["y"]))
    steep, c2 = lut_exhaustive(tmp_path, helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.3))
    assert default <= 1 and steep <= 1
    g = c2.graph
    qi, qo = g.tensors[c2.input].quant, g.tensors[c2.output].quant
    x = (np.arange(-128, 128) - qi.zp) * qi.s
    real = (g.nodes[0].attrs["table"].astype(float) - qo.zp) * qo.s
    lo, hi = (-128 - qo.zp) * qo.s, (127 - qo.zp) * qo.s  # what the output grid can hold
    np.testing.assert_allclose(real, np.clip(np.where(x >= 0, x, 0.3 * x), lo, hi), atol=qo.s / 2 + 1e-6)


def test_leaky_relu_deploys_after_conv(tmp_path):
    assert ("LeakyRelu", "tinyaot_lut_s8") in layer_ops(deploy_after_conv(tmp_path, "LeakyRelu", alpha=0.1))
